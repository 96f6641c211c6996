// kvscope-cli inspect: what a GGUF file holds and what its KV cache costs per token.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_inspect.h"
#include "kv/kv_dtype.h"
#include "model/model_config.h"

namespace kvscope::cli {

int cmd_inspect(int argc, char** argv, int first) {
  const Args a(argc, argv, first, {"model"}, {"json", "help"});
  if (a.has("help")) {
    std::cout << "kvscope-cli inspect MODEL.gguf [--json]\n";
    return 0;
  }
  std::string path = a.str("model");
  if (path.empty() && !a.positional().empty()) path = a.positional().front();
  if (path.empty()) throw UsageError("name a GGUF file: kvscope-cli inspect MODEL.gguf");
  auto file = GgufFile::open(path);
  nlohmann::json j = gguf_summary_json(*file);
  j["path"] = path;
  std::string model_error;
  nlohmann::json kv;
  try {
    const ModelConfig c = ModelConfig::from_gguf(*file);
    nlohmann::json cfg = {{"arch", c.arch},
                          {"n_vocab", c.n_vocab},
                          {"n_embd", c.n_embd},
                          {"n_layer", c.n_layer},
                          {"n_head", c.n_head},
                          {"n_head_kv", c.n_head_kv},
                          {"head_dim", c.head_dim},
                          {"n_ff", c.n_ff},
                          {"context_length", c.n_ctx_train},
                          {"rope_base", c.rope_base},
                          {"sliding_window", c.sliding_window},
                          {"n_expert", c.moe.n_expert},
                          {"n_expert_used", c.moe.n_expert_used},
                          {"n_ff_exp", c.moe.n_ff_exp},
                          {"n_expert_shared", c.moe.n_shared}};
    j["model_config"] = cfg;
    // KV cost per token = 2 (K and V) x layers x kv_heads x bytes per head vector (scales included).
    for (KvDtype d : kAllKvDtypes)
      kv[kv_dtype_name(d)] = static_cast<int64_t>(c.n_layer) * c.n_head_kv *
                             kv_bytes_per_token_head(d, c.head_dim, 16, 0);  // 16-token blocks
    j["kv_bytes_per_token"] = kv;
  } catch (const std::exception& e) {
    model_error = e.what();
    j["model_error"] = model_error;
  }
  if (a.has("json")) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << gguf_summary_text(*file);
  if (!model_error.empty()) {
    std::cout << "\nnot runnable by kvscope: " << model_error << "\n";
  } else {
    const auto& c = j["model_config"];
    std::cout << "\nKV cache per token = 2 x " << c["n_layer"] << " layers x " << c["n_head_kv"] << " KV heads x "
              << c["head_dim"] << " head_dim x bytes (+ a scale for int8/fp8):";
    for (auto& [name, bytes] : kv.items()) std::cout << "  " << name << " " << bytes.get<int64_t>() << " B";
    std::cout << "\n";
    if (c["n_expert"].get<int32_t>() > 0)
      std::cout << "mixture of experts: " << c["n_expert"] << " experts, " << c["n_expert_used"]
                << " per token; experts are FFN weights, so the KV per token above is the same whatever their "
                   "number\n";
  }
  return 0;
}

}  // namespace kvscope::cli
