#pragma once
// Drives the CPU backend directly, without the scheduler: one sequence whose blocks are a
// random permutation of the pool, fed a prompt as one batch and then forced tokens one by one
// (teacher forcing, the way ../shared/golden compares logits).
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/cpu_backend.h"
#include "model/model.h"

namespace kvscope::test {

struct PagedRun {
  std::shared_ptr<const Model> model;
  std::unique_ptr<CpuBackend> backend;
  std::vector<BlockId> table;  // logical -> physical, shuffled
  int32_t block_size;
  int32_t n_groups = 1;  // gemma4: 2, sharing one table (each pool has every block)

  PagedRun(std::shared_ptr<const Model> m, int32_t n_ctx, int32_t bs, uint64_t seed, KvDtype dtype = KvDtype::F32,
           int threads = 2, AttentionPolicy policy = {})
      : model(std::move(m)), block_size(bs) {
    const int32_t n_blocks = (n_ctx + bs - 1) / bs + 3;  // a few spare blocks so placement is not dense
    KvLayout L;
    L.n_layer = 0;  // the layers that store K/V (not lfm2's recurrent ones)
    for (int32_t il = 0; il < model->config.n_layer; ++il) L.n_layer += model->config.layer_keeps_kv(il) ? 1 : 0;
    L.n_head_kv = model->config.n_head_kv;
    L.head_dim = model->config.head_dim;
    L.latent = model->config.latent_kv();
    L.block_size = bs;
    L.num_blocks = n_blocks;
    L.dtype = dtype;
    backend = std::make_unique<CpuBackend>(model, threads);
    if (model->config.has_recurrent()) backend->init_state_slots(1);  // the one sequence's state
    if (model->config.shapes.empty()) {
      backend->init_kv(L, policy);
    } else {  // gemma4: one group per layer kind, each with its own head shape, the same table
      const ModelConfig& c = model->config;
      KvGroupSpec groups[2];
      for (int g = 0; g < 2; ++g) {
        groups[g].layout = L;
        for (int32_t il = 0; il < c.n_layer; ++il)
          if (c.layer_owns_kv(il) && c.layer_is_swa(il) == (g == 1)) {
            groups[g].layers.push_back(il);
            groups[g].layout.n_head_kv = c.layer_n_head_kv(il);
            groups[g].layout.head_dim = c.layer_head_dim(il);
          }
        groups[g].layout.n_layer = static_cast<int32_t>(groups[g].layers.size());
      }
      n_groups = groups[1].layers.empty() ? 1 : 2;
      backend->init_kv_groups(std::span<const KvGroupSpec>(groups, static_cast<size_t>(n_groups)), policy);
    }
    std::vector<BlockId> perm(static_cast<size_t>(n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(perm.begin(), perm.begin() + (n_ctx + bs - 1) / bs);
  }

  // Computes tokens at positions [pos0, pos0 + toks.size()); returns logits of the last one.
  std::vector<float> feed(const std::vector<TokenId>& toks, int32_t pos0) {
    BatchView b;
    b.block_tables.push_back(std::span<const BlockId>(table));
    for (size_t i = 0; i < toks.size(); ++i) {
      const int32_t pos = pos0 + static_cast<int32_t>(i);
      b.tokens.push_back(toks[i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(static_cast<int64_t>(table[static_cast<size_t>(pos / block_size)]) * block_size +
                               pos % block_size);
      b.seq_index.push_back(0);
    }
    for (int32_t g = 1; g < n_groups; ++g) b.groups_after_first.push_back({b.slot_mapping, b.block_tables});
    b.state_slots = {0};
    b.logits_rows.push_back(b.n_tokens() - 1);
    std::vector<float> logits(static_cast<size_t>(model->config.n_vocab));
    backend->forward(b, logits.data());
    return logits;
  }

  // Row 0: logits after the prompt; row i: after forced[i-1]. Returns 1 + forced.size() rows
  // (or fewer when n_rows is given).
  std::vector<std::vector<float>> teacher_forced(const std::vector<TokenId>& prompt, const std::vector<TokenId>& forced,
                                                 size_t n_rows) {
    std::vector<std::vector<float>> rows;
    rows.push_back(feed(prompt, 0));
    for (size_t i = 0; i + 1 < n_rows && i < forced.size(); ++i)
      rows.push_back(feed({forced[i]}, static_cast<int32_t>(prompt.size() + i)));
    return rows;
  }
};

inline float max_abs_diff(const std::vector<float>& a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace kvscope::test
