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

// One recurrent layer's state in words: lfm2's past conv inputs, qwen35's conv inputs and S,
// granitehybrid's conv inputs and Mamba-2 state.
static std::string recurrent_state_text(const nlohmann::json& c) {
  if (c.contains("mamba2")) {
    const nlohmann::json& m = c["mamba2"];
    return std::to_string(m["conv_kernel"].get<int>() - 1) + " past inputs x " +
           std::to_string(m["conv_channels"].get<int>()) + " conv channels + " +
           std::to_string(m["d_state"].get<int>()) + " x " + std::to_string(m["d_inner"].get<int>()) + " Mamba-2 state";
  }
  if (!c.contains("gated_delta_net")) return std::to_string(c["conv_l_cache"].get<int>() - 1) + " past inputs x n_embd";
  const nlohmann::json& g = c["gated_delta_net"];
  const int d = g["d_state"].get<int>();
  return std::to_string(g["conv_kernel"].get<int>() - 1) + " past inputs x " +
         std::to_string(g["conv_channels"].get<int>()) + " conv channels + " +
         std::to_string(g["value_heads"].get<int>()) + " value heads x " + std::to_string(d) + " x " +
         std::to_string(d) + " delta-rule state";
}

// gemma4: which layers keep KV of which shape, and which read another layer's.
static std::string gemma4_kv_text(const nlohmann::json& layers) {
  std::string own[2], borrow[2];
  for (size_t il = 0; il < layers.size(); ++il) {
    const nlohmann::json& l = layers[il];
    const int kind = l["sliding"].get<bool>() ? 1 : 0;
    const int32_t from = l["kv_from_layer"].get<int32_t>();
    std::string& list = from == static_cast<int32_t>(il) ? own[kind] : borrow[kind];
    list += (list.empty() ? "" : " ") + std::to_string(il) +
            (from == static_cast<int32_t>(il) ? "" : "<-" + std::to_string(from));
  }
  std::string out;
  for (int kind = 0; kind < 2; ++kind) {
    const nlohmann::json* first = nullptr;
    for (const nlohmann::json& l : layers)
      if (l["sliding"].get<bool>() == (kind == 1)) first = first ? first : &l;
    if (!first) continue;
    out += std::string(kind ? "sliding" : "full-attention") + " layers (" +
           std::to_string((*first)["n_head_kv"].get<int>()) + " KV heads x " +
           std::to_string((*first)["head_dim"].get<int>()) + "): keep KV: " + (own[kind].empty() ? "none" : own[kind]) +
           "; read an earlier layer's KV (no memory): " + (borrow[kind].empty() ? "none" : borrow[kind]) + "\n";
  }
  return out;
}

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
    if (!c.shapes.empty()) {  // gemma4: per-layer shapes, and which layers borrow KV
      nlohmann::json layers = nlohmann::json::array();
      for (int32_t il = 0; il < c.n_layer; ++il)
        layers.push_back({{"sliding", c.layer_is_swa(il)},
                          {"n_head_kv", c.layer_n_head_kv(il)},
                          {"head_dim", c.layer_head_dim(il)},
                          {"rope_dim", c.layer_rope_dim(il)},
                          {"n_ff", c.layer_n_ff(il)},
                          {"kv_from_layer", c.kv_source(il)}});
      cfg["layers"] = layers;
      cfg["n_embd_per_layer"] = c.n_embd_per_layer;
      cfg["final_logit_softcap"] = c.final_softcap;
    }
    if (c.has_recurrent()) {  // lfm2: layers with a fixed state per sequence instead of KV
      nlohmann::json rec = nlohmann::json::array();
      for (int32_t il = 0; il < c.n_layer; ++il)
        if (c.layer_is_recurrent(il)) rec.push_back(il);
      cfg["recurrent_layers"] = rec;
      if (c.traits.gated_delta_net)  // qwen35: conv inputs plus one S per value head, per layer
        cfg["gated_delta_net"] = {{"conv_kernel", c.gdn.conv_kernel},
                                  {"conv_channels", c.gdn.conv_channels()},
                                  {"d_state", c.gdn.d_state},
                                  {"value_heads", c.gdn.n_v_heads},
                                  {"key_heads", c.gdn.n_k_heads}};
      else if (c.traits.mamba2)  // granitehybrid: conv inputs plus a d_state x head_dim state per head
        cfg["mamba2"] = {{"conv_kernel", c.mamba2.conv_kernel}, {"conv_channels", c.mamba2.conv_channels()},
                         {"d_state", c.mamba2.d_state},         {"d_inner", c.mamba2.d_inner},
                         {"heads", c.mamba2.n_heads},           {"groups", c.mamba2.n_groups}};
      else
        cfg["conv_l_cache"] = c.conv_l_cache;
      j["state_bytes_per_layer"] = c.state_floats_per_layer() * static_cast<int64_t>(sizeof(float));
      cfg["kv_layers"] = c.n_layer - static_cast<int32_t>(rec.size());
      j["state_bytes_per_seq"] = c.state_floats_per_seq() * static_cast<int64_t>(sizeof(float));
    }
    j["model_config"] = cfg;
    // KV cost per token, scales included, as the engine sizes its pool (KvLayout, 16-token
    // blocks): 2 (K and V) x layers x kv_heads x a head vector, or one latent row per layer.
    // Layers that borrow KV store none; each layer's own shape (gemma4).
    for (KvDtype d : kAllKvDtypes) {
      if (c.latent_kv() && kv_dtype_packed(d)) continue;  // refused on a latent cache
      int64_t bytes = 0;
      for (int32_t il = 0; il < c.n_layer; ++il) {
        if (!c.layer_keeps_kv(il)) continue;
        KvLayout l;
        l.n_layer = 1;
        l.n_head_kv = c.layer_n_head_kv(il);
        l.head_dim = c.layer_head_dim(il);
        l.latent = c.latent_kv();
        l.dtype = d;
        bytes += l.bytes_per_token();
      }
      kv[kv_dtype_name(d)] = bytes;
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
    else if (c.contains("layers"))
      std::cout << "\n"
                << gemma4_kv_text(c["layers"])
                << "KV cache per token = 2 x the sum over the layers that keep KV of KV heads x head_dim x bytes:";
    else
      std::cout << "\nKV cache per token = 2 x " << c.value("kv_layers", c["n_layer"].get<int>())
                << (c.contains("kv_layers") ? " attention" : "") << " layers x " << c["n_head_kv"] << " KV heads x "
                << c["head_dim"] << " head_dim x bytes (+ a scale for int8/fp8):";
    for (auto& [name, bytes] : kv.items()) std::cout << "  " << name << " " << bytes.get<int64_t>() << " B";
    std::cout << "\n";
    if (j.contains("state_bytes_per_seq"))
      std::cout << "recurrent layers " << c["recurrent_layers"].dump() << ": no KV; each sequence holds a fixed "
                << j["state_bytes_per_seq"] << " B of state, whatever its length (f32, per layer "
                << recurrent_state_text(c) << ")\n";
    if (c["n_expert"].get<int32_t>() > 0)
      std::cout << "mixture of experts: " << c["n_expert"] << " experts, " << c["n_expert_used"]
                << " per token; experts are FFN weights, so the KV per token above is the same whatever their "
                   "number\n";
  }
  return 0;
}

}  // namespace kvscope::cli
