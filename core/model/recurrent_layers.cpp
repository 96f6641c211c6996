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
  const std::optional<int64_t> taps = f.get_int(a + "shortconv.l_cache");
  if (!taps) throw ModelError("missing hyper-parameter '" + a + "shortconv.l_cache'");
  c.conv_l_cache = checked_i32(*taps, a + "shortconv.l_cache", 2, 64);
}

void slide_attention_layers(ModelConfig& c) {
  c.swa_layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int32_t il = 0; il < c.n_layer; ++il)
    c.swa_layers[static_cast<size_t>(il)] = c.sliding_window > 0 && !c.layer_is_recurrent(il) ? 1 : 0;
}

}  // namespace kvscope
