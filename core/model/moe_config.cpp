#include "model/moe_config.h"

#include <string>

#include "gguf/gguf_file.h"
#include "model/hparams.h"

namespace kvscope {

namespace {

// A key that llama.cpp reads as "a value or one per layer" (get_key_or_arr); kvscope runs one
// value for every layer.
int64_t key_or_uniform_array(const GgufFile& f, const std::string& key, int64_t def) {
  const GgufValue* v = f.find(key);
  if (!v) return def;
  if (v->type != GgufValueType::ARRAY) return f.get_int(key).value_or(def);
  const std::vector<int64_t> a = v->as_int_array();
  if (a.empty()) return def;
  for (int64_t x : a)
    if (x != a[0]) throw ModelError(key + " differs between layers, which kvscope does not run");
  return a[0];
}

// glm4moe's gating key (llama_expert_gating_func_type): 0 (none) means sigmoid for GLM-4.5.
MoeGating glm_gating(const GgufFile& f, const std::string& key) {
  const int64_t g = f.get_int(key).value_or(0);
  if (g == 0 || g == 2) return MoeGating::Sigmoid;
  if (g == 1) return MoeGating::Softmax;
  throw ModelError(key + " = " + std::to_string(g) + " is not a gating kvscope runs (1 softmax, 2 sigmoid)");
}

// The per-architecture part: what llama.cpp's graph for the architecture passes to build_moe_ffn.
void read_arch_routing(const GgufFile& f, const ModelConfig& c, MoeConfig& m) {
  const std::string a = c.arch + ".";
  if (c.arch == "glm4moe") {
    m.n_shared = required_i32(f, a + "expert_shared_count", 0, 64);
    m.n_dense_lead = checked_i32(f.get_int(a + "leading_dense_block_count").value_or(0),
                                 a + "leading_dense_block_count", 0, c.n_layer);
    const double scale = f.get_float(a + "expert_weights_scale").value_or(0.0);
    m.weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
    m.norm_weights = f.get_bool(a + "expert_weights_norm").value_or(false);
    m.gating = glm_gating(f, a + "expert_gating_func");
    m.selection_bias = true;
    return;
  }
  if (c.arch == "deepseek2") {
    // V2 and V2.5 files carry no gating key and mean softmax; V3/R1/Kimi K2 say sigmoid (2).
    m.n_shared = required_i32(f, a + "expert_shared_count", 0, 64);
    m.n_dense_lead = checked_i32(f.get_int(a + "leading_dense_block_count").value_or(0),
                                 a + "leading_dense_block_count", 0, c.n_layer);
    const double scale = f.get_float(a + "expert_weights_scale").value_or(0.0);
    m.weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
    m.norm_weights = f.get_bool(a + "expert_weights_norm").value_or(false);
    const int64_t g = f.get_int(a + "expert_gating_func").value_or(0);
    if (g < 0 || g > 2)
      throw ModelError(a + "expert_gating_func = " + std::to_string(g) +
                       " is not a gating kvscope runs (1 softmax, 2 sigmoid)");
    m.gating = g == 2 ? MoeGating::Sigmoid : MoeGating::Softmax;
    m.selection_bias = m.n_dense_lead < c.n_layer &&
                       f.find_tensor("blk." + std::to_string(m.n_dense_lead) + ".exp_probs_b.bias") != nullptr;
    return;
  }
  if (c.arch == "qwen35moe") {  // softmax, renormalized, the file's weight scale (0: none)
    m.gating = MoeGating::Softmax;
    m.norm_weights = true;
    const double scale = f.get_float(a + "expert_weights_scale").value_or(0.0);
    m.weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
    m.n_ff_shared = checked_i32(f.get_int(a + "expert_shared_feed_forward_length").value_or(0),
                                a + "expert_shared_feed_forward_length", 0, int64_t(1) << 24);
    return;
  }
  if (c.arch == "gpt-oss") {  // its graph passes norm_w false and softmax-of-the-chosen gating
    m.gating = MoeGating::SoftmaxOfChosen;
    return;
  }
  // qwen3moe and mistral3: softmax over the router logits, the chosen weights renormalized,
  // no weight scale (their graphs pass hparams.expert_weights_scale, which they never read).
  m.gating = MoeGating::Softmax;
  m.norm_weights = true;
}

}  // namespace

MoeConfig read_moe_config(const GgufFile& f, const ModelConfig& c) {
  MoeConfig m;
  const std::string a = c.arch + ".";
  const int64_t n_expert = f.get_int(a + "expert_count").value_or(0);
  const int64_t n_used = key_or_uniform_array(f, a + "expert_used_count", 0);
  const bool moe_arch = c.arch == "qwen3moe" || c.arch == "glm4moe" || c.arch == "mistral3" || c.arch == "gpt-oss" ||
                        c.arch == "deepseek2" || c.arch == "qwen35moe";
  if (c.arch == "granitehybrid" && n_expert > 0)
    throw ModelError(a + "expert_count is " + std::to_string(n_expert) +
                     ": Granite 4.0-H's mixture-of-experts FFN (Tiny, Small) is not supported yet; the dense "
                     "Granite 4.0-H models run");
  if (!moe_arch || (c.arch == "mistral3" && n_expert == 0)) return m;
  m.n_expert = checked_i32(n_expert, a + "expert_count", 1, 4096);
  m.n_expert_used = checked_i32(n_used, a + "expert_used_count", 1, m.n_expert);
  if (const int64_t groups = f.get_int(a + "expert_group_count").value_or(0); groups > 1) {
    // llama.cpp's grouped routing (build_moe_ffn): each group scores its two best experts.
    m.n_group = checked_i32(groups, a + "expert_group_count", 2, m.n_expert / 2);
    if (m.n_expert % m.n_group != 0)
      throw ModelError(a + "expert_group_count " + std::to_string(m.n_group) + " does not divide expert_count " +
                       std::to_string(m.n_expert));
    const int32_t per_group = m.n_expert / m.n_group;
    m.n_group_used = checked_i32(f.get_int(a + "expert_group_used_count").value_or(0), a + "expert_group_used_count", 1,
                                 m.n_group - 1);
    if (m.n_expert_used > m.n_group_used * per_group)
      throw ModelError(a + "expert_used_count " + std::to_string(m.n_expert_used) + " exceeds the experts of the " +
                       std::to_string(m.n_group_used) + " groups kept (" + std::to_string(per_group) + " each)");
  }
  // mistral3's experts are n_ff wide; the others read expert_feed_forward_length, or llama.cpp's
  // fallback n_ff / n_expert_used.
  const int64_t ff_exp = c.arch == "mistral3" ? 0 : key_or_uniform_array(f, a + "expert_feed_forward_length", 0);
  m.n_ff_exp = checked_i32(ff_exp > 0 ? ff_exp : (c.arch == "mistral3" ? c.n_ff : c.n_ff / m.n_expert_used),
                           a + "expert_feed_forward_length", 1, int64_t(1) << 24);
  read_arch_routing(f, c, m);
  return m;
}

}  // namespace kvscope
