// gemma4's per-layer shapes, read as llama.cpp's llama_model_gemma4::load_arch_hparams and the
// generic loader read them (src/models/gemma4.cpp, src/llama-model.cpp): sliding layers take
// key_length_swa and rope.dimension_count_swa, full layers key_length and rope.dimension_count;
// head_count_kv and feed_forward_length may be one value per layer; the last
// attention.shared_kv_layers layers keep no KV and read the last KV layer of their own kind
// (n_layer_kv_from_start - 2 for a sliding layer, - 1 for a full one).
#include "model/layer_shapes.h"

#include <algorithm>

#include "gguf/gguf_file.h"
#include "model/hparams.h"

namespace kvscope {

namespace {

// Which layer each layer reads its KV from; throws naming the key when a borrowing layer has no
// earlier layer of its kind to read.
std::vector<int32_t> kv_sources(const ModelConfig& c, int64_t n_shared, const std::string& key) {
  std::vector<int32_t> src(static_cast<size_t>(c.n_layer));
  for (int32_t il = 0; il < c.n_layer; ++il) src[static_cast<size_t>(il)] = il;
  if (n_shared == 0) return src;
  const int32_t first_shared = c.n_layer - static_cast<int32_t>(n_shared);
  if (first_shared < 2)
    throw ModelError(key + " = " + std::to_string(n_shared) + " leaves " + std::to_string(first_shared) +
                     " layers with their own KV; the layers that borrow need an earlier sliding and full layer");
  for (int32_t il = first_shared; il < c.n_layer; ++il) {
    const bool swa = c.layer_is_swa(il);
    const int32_t from = first_shared - (swa ? 2 : 1);
    if (c.layer_is_swa(from) != swa)
      throw ModelError(key + ": layer " + std::to_string(il) + " (" + (swa ? "sliding" : "full") +
                       ") would read the KV of layer " + std::to_string(from) + ", a " +
                       (swa ? "full-attention" : "sliding") + " layer");
    src[static_cast<size_t>(il)] = from;
  }
  return src;
}

// Every layer of a kind that keeps its own KV has the same KV heads: each kind is one block pool.
void check_uniform_kv_heads(const ModelConfig& c, const std::string& key) {
  int32_t heads[2] = {0, 0};
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const LayerShape& s = c.shapes[static_cast<size_t>(il)];
    int32_t& h = heads[c.layer_is_swa(il) ? 1 : 0];
    if (s.kv_source != il) {
      if (s.n_head_kv != c.shapes[static_cast<size_t>(s.kv_source)].n_head_kv)
        throw ModelError(key + ": layer " + std::to_string(il) + " has " + std::to_string(s.n_head_kv) +
                         " KV heads but reads the KV of layer " + std::to_string(s.kv_source) + ", which has " +
                         std::to_string(c.shapes[static_cast<size_t>(s.kv_source)].n_head_kv));
      continue;
    }
    if (h != 0 && h != s.n_head_kv)
      throw ModelError(key + " differs between layers of the same kind (" + std::to_string(h) + " and " +
                       std::to_string(s.n_head_kv) + "): kvscope keeps each kind's KV in one block pool");
    h = s.n_head_kv;
  }
}

}  // namespace

void read_layer_shapes(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  if (c.swa_layers.empty())
    throw ModelError(a + "attention.sliding_window_pattern must hold one flag per layer for " + c.arch);
  const bool any_swa = std::any_of(c.swa_layers.begin(), c.swa_layers.end(), [](uint8_t s) { return s != 0; });
  if (any_swa && c.sliding_window <= 0)
    throw ModelError(a + "attention.sliding_window is 0, but " + a +
                     "attention.sliding_window_pattern has sliding layers");
  const int32_t head_swa = checked_i32(f.get_int(a + "attention.key_length_swa").value_or(c.head_dim),
                                       a + "attention.key_length_swa", 2, 4096);
  if (f.get_int(a + "attention.value_length_swa").value_or(head_swa) != head_swa)
    throw ModelError(a + "attention.value_length_swa must equal " + a + "attention.key_length_swa");
  const int32_t rope_swa =
      checked_i32(f.get_int(a + "rope.dimension_count_swa").value_or(std::min(c.rope_dim, head_swa)),
                  a + "rope.dimension_count_swa", 2, head_swa);
  if (rope_swa % 2 != 0) throw ModelError(a + "rope.dimension_count_swa must be even");
  const int64_t n_head = c.n_head;
  const std::vector<int64_t> kv_heads = per_layer_ints(f, a + "attention.head_count_kv", c.n_layer, &n_head);
  const std::vector<int64_t> ffs = per_layer_ints(f, a + "feed_forward_length", c.n_layer, nullptr);
  const int64_t n_shared = f.get_int(a + "attention.shared_kv_layers").value_or(0);
  if (n_shared < 0 || n_shared >= c.n_layer)
    throw ModelError(a + "attention.shared_kv_layers = " + std::to_string(n_shared) + " is out of range [0, " +
                     std::to_string(c.n_layer - 1) + "]");
  const std::vector<int32_t> src = kv_sources(c, n_shared, a + "attention.shared_kv_layers");
  c.shapes.assign(static_cast<size_t>(c.n_layer), LayerShape{});
  for (int32_t il = 0; il < c.n_layer; ++il) {
    LayerShape& s = c.shapes[static_cast<size_t>(il)];
    const bool swa = c.layer_is_swa(il);
    s.n_head_kv = checked_i32(kv_heads[static_cast<size_t>(il)], a + "attention.head_count_kv", 1, c.n_head);
    if (c.n_head % s.n_head_kv != 0)
      throw ModelError(a + "attention.head_count_kv: layer " + std::to_string(il) + "'s " +
                       std::to_string(s.n_head_kv) + " KV heads do not divide " + std::to_string(c.n_head) +
                       " query heads");
    s.head_dim = swa ? head_swa : c.head_dim;
    s.rope_dim = swa ? rope_swa : c.rope_dim;
    s.n_ff = checked_i32(ffs[static_cast<size_t>(il)], a + "feed_forward_length", 1, int64_t(1) << 24);
    s.kv_source = src[static_cast<size_t>(il)];
  }
  check_uniform_kv_heads(c, a + "attention.head_count_kv");
  // The model-wide sizes are the full-attention layers' (the first one's), else layer 0's.
  int32_t full = 0;
  while (full < c.n_layer && c.layer_is_swa(full)) ++full;
  c.n_head_kv = c.shapes[static_cast<size_t>(full < c.n_layer ? full : 0)].n_head_kv;
  c.n_ff = c.shapes[0].n_ff;
  c.n_embd_per_layer = checked_i32(f.get_int(a + "embedding_length_per_layer_input").value_or(0),
                                   a + "embedding_length_per_layer_input", 0, 65536);
  // Absent, llama.cpp's default (llama_hparams) caps at 30; a 0 in the file turns the cap off.
  c.final_softcap = static_cast<float>(f.get_float(a + "final_logit_softcapping").value_or(30.0));
  if (!(c.final_softcap >= 0.0f)) throw ModelError(a + "final_logit_softcapping must not be negative");
  c.attn_scale = 1.0f;  // llama.cpp's f_attention_scale for gemma4: q.k is not scaled
}

}  // namespace kvscope
