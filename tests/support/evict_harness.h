#pragma once
// What the token-eviction tests share (test_evict.cpp, test_evict_layer.cpp): a small synthetic
// model, random data, and one sequence driven through a KvCacheManager and the CPU backend
// without the scheduler, so a test can evict and compact exactly where it wants.
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_support.h"

namespace kvscope::test {

inline std::shared_ptr<const Model> synthetic(uint64_t seed, int32_t n_head_kv = 2) {
  SyntheticSpec spec;
  spec.n_layer = 2;
  spec.n_head = 4;
  spec.n_head_kv = n_head_kv;
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.seed = seed;
  const auto path =
      test::tmp_dir() / ("evict-model-" + std::to_string(seed) + "-" + std::to_string(n_head_kv) + ".gguf");
  write_synthetic_model(spec, path.string());
  return Model::load(path.string());
}

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<TokenId> tokens(int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> d(3, 500);
  std::vector<TokenId> t(static_cast<size_t>(n));
  t[0] = 1;
  for (int32_t i = 1; i < n; ++i) t[static_cast<size_t>(i)] = d(rng);
  return t;
}

inline KvLayout layout_of(const Model& m, int32_t bs, int32_t n_blocks) {
  KvLayout L;
  L.n_layer = m.config.n_layer;
  L.n_head_kv = m.config.n_head_kv;
  L.head_dim = m.config.head_dim;
  L.latent = m.config.latent_kv();
  L.block_size = bs;
  L.num_blocks = n_blocks;
  return L;
}

// One sequence driven through a KvCacheManager and the CPU backend without the scheduler, so a
// test can evict and compact exactly where it wants.
struct Driven {
  std::shared_ptr<const Model> m;
  KvCacheManager kv;
  CpuBackend be;
  std::vector<TokenId> toks;
  // evict_layers > 0: per-layer eviction (one hole mask per layer).
  Driven(std::shared_ptr<const Model> model, int32_t bs, int32_t n_blocks, int32_t evict_layers = 0)
      : m(std::move(model)),
        kv([&] {
          KvCacheConfig c;
          c.block_size = bs;
          c.num_blocks = n_blocks;
          c.prefix_caching = false;
          c.token_eviction = true;
          c.hole_layers = evict_layers;
          return c;
        }()),
        be(m, 1) {
    be.init_kv(layout_of(*m, bs, n_blocks), {});
  }
  // Computes toks [from, to) as one batch (allocating their slots) and returns the last logits.
  std::vector<float> feed(int32_t from, int32_t to, bool record = false) {
    if (!kv.allocate_slots(1, toks, to - from)) throw std::runtime_error("pool full");
    return compute(from, to, record);
  }
  // Computes toks [from, to) again in the slots and rows they hold now (after a compaction).
  std::vector<float> compute(int32_t from, int32_t to, bool record = false) {
    BatchView b;
    const auto table = kv.block_table(1);
    b.block_tables.push_back(table);
    for (int32_t p = from; p < to; ++p) {
      b.tokens.push_back(toks[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(kv.slot(1, p));
      b.seq_index.push_back(0);
      b.rows.push_back(kv.token_holes().cache_row(1, p));
      b.record_attention.push_back(record ? 1 : 0);
    }
    b.holes = kv.token_holes().hole_mask();
    b.layer_holes = kv.token_holes().layer_hole_mask();
    if (!record) b.record_attention.clear();
    b.logits_rows.push_back(b.n_tokens() - 1);
    std::vector<float> logits(static_cast<size_t>(m->config.n_vocab));
    be.forward(b, logits.data());
    return logits;
  }
};

}  // namespace kvscope::test
