#include "model/model.h"

#include <sstream>

namespace kvscope {

std::shared_ptr<Model> Model::load(const std::string& path) {
  auto m = std::make_shared<Model>();
  m->file = GgufFile::open(path);
  m->config = ModelConfig::from_gguf(*m->file);
  m->weights = ModelWeights::from_gguf(*m->file, m->config);
  m->tokenizer = Tokenizer::from_gguf(*m->file);
  if (m->tokenizer->n_vocab() != m->config.n_vocab)
    throw ModelError("vocabulary size mismatch: tokenizer has " + std::to_string(m->tokenizer->n_vocab()) +
                     " tokens, the model " + std::to_string(m->config.n_vocab));
  m->synthetic = m->file->get_bool("kvscope.synthetic").value_or(false);
  return m;
}

std::string Model::describe() const {
  std::ostringstream os;
  const ModelConfig& c = config;
  os << c.arch << (c.name.empty() ? "" : " '" + c.name + "'") << ", " << weights.n_params / 1000 << "K params, "
     << c.n_layer << " layers, n_embd " << c.n_embd << ", heads " << c.n_head << "/" << c.n_head_kv << " (q/kv), head_dim "
     << c.head_dim << ", vocab " << c.n_vocab;
  if (synthetic) os << " [synthetic: RANDOM WEIGHTS, output is gibberish]";
  return os.str();
}

}  // namespace kvscope
