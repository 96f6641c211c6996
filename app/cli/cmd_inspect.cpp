// kvscope-cli inspect: what a GGUF file holds and what its KV cache costs per token.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_inspect.h"
#include "kv/kv_dtype.h"
#include "kv/kv_layout.h"
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
    if (c.latent_kv())
      cfg["latent_attention"] = {{"kv_lora_rank", c.mla.kv_lora_rank},
                                 {"rope_dim", c.rope_dim},
                                 {"q_lora_rank", c.mla.q_lora_rank},
                                 {"head_k_dim", c.mla.qk_nope + c.rope_dim},
                                 {"head_v_dim", c.mla.v_dim}};
    j["model_config"] = cfg;
    // KV cost per token, scales included, as the engine sizes its pool (KvLayout, 16-token
    // blocks): 2 (K and V) x layers x kv_heads x a head vector, or one latent row per layer.
    KvLayout l;
    l.n_layer = c.n_layer;
    l.n_head_kv = c.n_head_kv;
    l.head_dim = c.head_dim;
    l.latent = c.latent_kv();
    for (KvDtype d : kAllKvDtypes) {
      if (l.latent && kv_dtype_packed(d)) continue;  // refused on a latent cache
      l.dtype = d;
      kv[kv_dtype_name(d)] = l.bytes_per_token();
    }
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
    if (c.contains("latent_attention"))
      std::cout << "\nKV cache per token = " << c["n_layer"] << " layers x 1 latent row of ("
                << c["latent_attention"]["kv_lora_rank"] << " latent + " << c["latent_attention"]["rope_dim"]
                << " RoPE key) x bytes (+ a scale for int8/fp8), key and value at once (multi-head latent "
                   "attention; 4-/2-bit KV refused):";
    else
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
