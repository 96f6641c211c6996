#include "model/recurrent_layers.h"

#include "gguf/gguf_file.h"
#include "model/hparams.h"

namespace kvscope {

namespace {

// attention.recurrent_layers, when the file has it, must name the same layers as head_count_kv.
void check_recurrent_flags(const GgufFile& f, const ModelConfig& c, const std::vector<int64_t>& kv_heads) {
  const std::string key = c.arch + ".attention.recurrent_layers";
  const GgufValue* v = f.find(key);
  if (!v || v->type != GgufValueType::ARRAY) return;
  const std::vector<int64_t> flags = v->as_int_array();
  if (static_cast<int64_t>(flags.size()) < c.n_layer)
    throw ModelError(key + " has " + std::to_string(flags.size()) + " entries for " + std::to_string(c.n_layer) +
                     " layers");
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const bool flagged = flags[static_cast<size_t>(il)] != 0, no_kv = kv_heads[static_cast<size_t>(il)] == 0;
    if (flagged != no_kv)
      throw ModelError(key + " marks layer " + std::to_string(il) + (flagged ? " recurrent" : " as attention") +
                       ", but " + c.arch + ".attention.head_count_kv gives it " +
                       std::to_string(kv_heads[static_cast<size_t>(il)]) + " KV heads");
  }
}

// granitehybrid's Mamba-2 sizes (ssm.* keys); llama.cpp runs only an expansion of 2.
void read_mamba2(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  Mamba2Config& m = c.mamba2;
  m.conv_kernel = required_i32(f, a + "ssm.conv_kernel", 2, 64);
  m.d_inner = required_i32(f, a + "ssm.inner_size", 1, int64_t(1) << 20);
  m.d_state = required_i32(f, a + "ssm.state_size", 1, 4096);
  m.n_heads = required_i32(f, a + "ssm.time_step_rank", 1, m.d_inner);
  m.n_groups = required_i32(f, a + "ssm.group_count", 1, m.n_heads);
  if (m.d_inner != 2 * c.n_embd)
    throw ModelError(a + "ssm.inner_size " + std::to_string(m.d_inner) + " is not 2 x embedding_length (" +
                     std::to_string(2 * c.n_embd) + "), the only Mamba-2 expansion llama.cpp runs");
  if (m.d_inner % m.n_heads != 0 || m.n_heads % m.n_groups != 0)
    throw ModelError(a + "ssm.time_step_rank " + std::to_string(m.n_heads) + " must divide ssm.inner_size " +
                     std::to_string(m.d_inner) + ", and ssm.group_count " + std::to_string(m.n_groups) + " it");
}

}  // namespace

void read_recurrent_layers(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  const std::vector<int64_t> heads = per_layer_ints(f, a + "attention.head_count", c.n_layer, nullptr);
  const std::vector<int64_t> kv_heads = per_layer_ints(f, a + "attention.head_count_kv", c.n_layer, nullptr);
  check_recurrent_flags(f, c, kv_heads);
  c.recurrent.assign(static_cast<size_t>(c.n_layer), 0);
  int32_t n_attention = 0;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const int64_t h = heads[static_cast<size_t>(il)], kv = kv_heads[static_cast<size_t>(il)];
    if (kv == 0) {
      c.recurrent[static_cast<size_t>(il)] = 1;
      continue;
    }
    if (h < 1 || h > 4096 || kv < 0 || kv > h)
      throw ModelError(a + "attention.head_count / head_count_kv of layer " + std::to_string(il) + " (" +
                       std::to_string(h) + " / " + std::to_string(kv) + ") are out of range");
    if (n_attention++ > 0 && (h != c.n_head || kv != c.n_head_kv))
      throw ModelError(a + "attention.head_count_kv: the attention layers differ (" + std::to_string(c.n_head) + "/" +
                       std::to_string(c.n_head_kv) + " and " + std::to_string(h) + "/" + std::to_string(kv) +
                       " heads); kvscope keeps them in one block pool");
    c.n_head = static_cast<int32_t>(h);
    c.n_head_kv = static_cast<int32_t>(kv);
  }
  if (n_attention == 0)
    throw ModelError(a + "attention.head_count_kv is 0 in every layer: the model has no attention layer");
  if (c.traits.mamba2) return read_mamba2(f, c);
  c.conv_l_cache = required_i32(f, a + "shortconv.l_cache", 2, 64);
}

namespace {

// Which layers run the delta rule: attention.recurrent_layers when the file has it, else every
// layer but each full_attention_interval-th (llama_model_qwen35::load_arch_hparams, default 4).
void read_gdn_layer_flags(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.recurrent.assign(static_cast<size_t>(c.n_layer), 0);
  const GgufValue* v = f.find(a + "attention.recurrent_layers");
  if (v && v->type == GgufValueType::ARRAY) {
    const std::vector<int64_t> flags = per_layer_ints(f, a + "attention.recurrent_layers", c.n_layer, nullptr);
    for (int32_t il = 0; il < c.n_layer; ++il)
      c.recurrent[static_cast<size_t>(il)] = flags[static_cast<size_t>(il)] != 0;
    return;
  }
  const int32_t every =
      checked_i32(f.get_int(a + "full_attention_interval").value_or(4), a + "full_attention_interval", 1, c.n_layer);
  if (c.n_layer % every != 0)
    throw ModelError(a + "full_attention_interval " + std::to_string(every) + " does not divide block_count " +
                     std::to_string(c.n_layer));
  for (int32_t il = 0; il < c.n_layer; ++il) c.recurrent[static_cast<size_t>(il)] = (il + 1) % every != 0;
}

}  // namespace

void read_gated_delta_net(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  read_gdn_layer_flags(f, c);
  // head_count_kv may come per layer; a delta-rule layer then has 0 and the attention layers agree.
  const GgufValue* kv_key = f.find(a + "attention.head_count_kv");
  const bool per_layer = kv_key && kv_key->type == GgufValueType::ARRAY;
  const int64_t all_heads = c.n_head;
  const std::vector<int64_t> kv = per_layer_ints(f, a + "attention.head_count_kv", c.n_layer, &all_heads);
  int32_t n_attention = 0;
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const int64_t h = kv[static_cast<size_t>(il)];
    if (c.layer_is_recurrent(il)) {
      if (per_layer && h != 0)
        throw ModelError(a + "attention.head_count_kv gives recurrent layer " + std::to_string(il) + " " +
                         std::to_string(h) + " KV heads");
      continue;
    }
    const int32_t heads = checked_i32(h, a + "attention.head_count_kv of layer " + std::to_string(il), 1, c.n_head);
    if (n_attention++ > 0 && heads != c.n_head_kv)
      throw ModelError(a + "attention.head_count_kv differs between the attention layers");
    c.n_head_kv = heads;
  }
  if (n_attention == 0) throw ModelError(a + "attention.recurrent_layers marks every layer recurrent: no attention");
  GdnConfig& g = c.gdn;
  g.conv_kernel = required_i32(f, a + "ssm.conv_kernel", 2, 64);
  g.d_state = required_i32(f, a + "ssm.state_size", 1, 4096);
  g.n_v_heads = required_i32(f, a + "ssm.time_step_rank", 1, 4096);
  g.n_k_heads = required_i32(f, a + "ssm.group_count", 1, g.n_v_heads);
  if (g.n_v_heads % g.n_k_heads != 0)
    throw ModelError(a + "ssm.group_count " + std::to_string(g.n_k_heads) + " does not divide ssm.time_step_rank " +
                     std::to_string(g.n_v_heads));
  const int64_t inner = required_i32(f, a + "ssm.inner_size", 1, int64_t(1) << 20);
  if (inner != g.value_dim())
    throw ModelError(a + "ssm.inner_size " + std::to_string(inner) + " != ssm.time_step_rank x ssm.state_size (" +
                     std::to_string(g.value_dim()) + "): the delta rule needs value heads as wide as key heads");
}

void slide_attention_layers(ModelConfig& c) {
  c.swa_layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int32_t il = 0; il < c.n_layer; ++il)
    c.swa_layers[static_cast<size_t>(il)] = c.sliding_window > 0 && !c.layer_is_recurrent(il) ? 1 : 0;
}

}  // namespace kvscope
