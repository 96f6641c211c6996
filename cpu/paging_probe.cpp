#include "cpu/paging_probe.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

namespace kvscope {

PagingProbe::PagingProbe(std::shared_ptr<const Model> model, int32_t ctx, int32_t bs, KvDtype dtype, int threads,
                         uint64_t seed)
    : model_(std::move(model)), ctx_(ctx), backend_(model_, threads) {
  if (ctx < 1) throw std::invalid_argument("paging probe: context must be at least 1");
  const ModelConfig& c = model_->config;
  const KvLayout L{c.n_layer, c.n_head_kv, c.head_dim, bs, (ctx + bs - 1) / bs + 1, dtype};
  backend_.init_kv(L, {});
  table_.resize(static_cast<size_t>(L.num_blocks));
  std::iota(table_.begin(), table_.end(), 0);
  std::shuffle(table_.begin(), table_.end(), std::mt19937_64(seed ^ 0x9e3779b97f4a7c15ull));
  batch_.tokens = {1};
  batch_.positions = {ctx - 1};
  batch_.slot_mapping = {0};
  batch_.seq_index = {0};
  batch_.block_tables.push_back(std::span<const BlockId>(table_));

  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  q_.resize(static_cast<size_t>(c.q_dim()));
  for (auto& e : q_) e = nd(rng);
  // The same random K/V in both layouts: the pool at the slots the shuffled table gives, the
  // contiguous arrays in order, each vector encoded once into the KV dtype.
  const int64_t vec_bytes = static_cast<int64_t>(c.head_dim) * kv_elem_bytes(dtype);
  const size_t n_vec = static_cast<size_t>(ctx) * static_cast<size_t>(c.n_head_kv);
  std::vector<float> x(static_cast<size_t>(c.head_dim));
  CpuKvStorage& st = backend_.kv_storage();
  // The sub-byte formats are stored per tile (codes and parameters for a block at a time, kivi's
  // residual until its block is full), so they have no per-vector contiguous copy: their probe
  // times the paged path only (has_contiguous() false).
  has_contiguous_ = !kv_dtype_packed(dtype);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    // A sliding-window layer (gemma3) sees only its window on the paged path; the contiguous
    // reference is given the same keys, or the two would do different work.
    first_.push_back(c.layer_is_swa(l) && c.sliding_window > 0 ? std::max(0, ctx - c.sliding_window) : 0);
    if (!has_contiguous_) {
      for (int32_t p = 0; p < ctx; ++p)
        for (int32_t h = 0; h < c.n_head_kv; ++h)
          for (int is_v = 0; is_v < 2; ++is_v) {
            for (auto& e : x) e = nd(rng);
            st.store(l, is_v, static_cast<int64_t>(table_[static_cast<size_t>(p / bs)]) * bs + p % bs, h, x.data());
          }
      st.complete_deferred(l);  // KIVI: quantize the full blocks (the backend defers it to after attention)
      continue;
    }
    k_.emplace_back(n_vec * static_cast<size_t>(vec_bytes));
    v_.emplace_back(n_vec * static_cast<size_t>(vec_bytes));
    k_scale_.emplace_back(n_vec);
    v_scale_.emplace_back(n_vec);
    k_hm_.emplace_back(n_vec * static_cast<size_t>(vec_bytes));
    v_hm_.emplace_back(n_vec * static_cast<size_t>(vec_bytes));
    k_scale_hm_.emplace_back(n_vec);
    v_scale_hm_.emplace_back(n_vec);
    for (int32_t p = 0; p < ctx; ++p)
      for (int32_t h = 0; h < c.n_head_kv; ++h)
        for (int is_v = 0; is_v < 2; ++is_v) {
          for (auto& e : x) e = nd(rng);
          const size_t i = static_cast<size_t>(p) * static_cast<size_t>(c.n_head_kv) + static_cast<size_t>(h);
          uint8_t* dst = (is_v ? v_ : k_).back().data() + i * static_cast<size_t>(vec_bytes);
          (is_v ? v_scale_ : k_scale_).back()[i] = kv_encode_vector(dtype, x.data(), c.head_dim, dst);
          const size_t ih = static_cast<size_t>(h) * static_cast<size_t>(ctx) + static_cast<size_t>(p);
          std::copy_n(dst, vec_bytes, (is_v ? v_hm_ : k_hm_).back().data() + ih * static_cast<size_t>(vec_bytes));
          (is_v ? v_scale_hm_ : k_scale_hm_).back()[ih] = (is_v ? v_scale_ : k_scale_).back()[i];
          st.store(l, is_v, static_cast<int64_t>(table_[static_cast<size_t>(p / bs)]) * bs + p % bs, h, x.data());
        }
  }
}

void PagingProbe::paged(int32_t layer, float* out) { backend_.attention(layer, batch_, q_.data(), out); }

void PagingProbe::contiguous(int32_t layer, float* out) {
  if (!has_contiguous_) throw std::logic_error("paging probe: a tile-stored KV dtype has no contiguous copy");
  const ModelConfig& c = model_->config;
  const size_t l = static_cast<size_t>(layer);
  const ContiguousKv kv = head_major_ ? ContiguousKv{backend_.kv_storage().layout().dtype,
                                                     k_hm_[l].data(),
                                                     v_hm_[l].data(),
                                                     k_scale_hm_[l].data(),
                                                     v_scale_hm_[l].data(),
                                                     true,
                                                     ctx_}
                                      : ContiguousKv{backend_.kv_storage().layout().dtype, k_[l].data(), v_[l].data(),
                                                     k_scale_[l].data(), v_scale_[l].data()};
  contiguous_attention_decode(backend_.pool(), q_.data(), kv, ctx_, c.n_head, c.n_head_kv, c.head_dim, c.attn_scale,
                              out, first_[l], contiguous_prefetch_ ? backend_.prefetch_threshold() : INT64_MAX);
}

}  // namespace kvscope
