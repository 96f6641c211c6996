#pragma once
// A loaded model: the mapped file, its hyper-parameters, tensor views and tokenizer.
#include <memory>
#include <string>

#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/tokenizer.h"

namespace kvscope {

struct Model {
  std::shared_ptr<GgufFile> file;  // owns the copied tensor data the weight views point into
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  bool synthetic = false;  // general.name says random weights (built by make-model)

  // Throws GgufError / ModelError / std::runtime_error with a message naming the problem.
  static std::shared_ptr<Model> load(const std::string& path);
  std::string describe() const;  // one line: arch, size, layers, heads, dtype mix
};

}  // namespace kvscope
