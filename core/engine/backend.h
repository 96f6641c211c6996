#pragma once
// What the engine asks of a compute backend (CPU here, CUDA in cuda/): hold the KV block pool
// and run the model over a batch of tokens from several sequences, writing each token's K/V into
// its slot and attending by walking that sequence's block table.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"

namespace kvscope {

struct AttentionPolicy {
  int32_t window = 0;  // 0: full attention (a model's own SWA layers still use their window)
  int32_t sinks = 0;   // with a window: the first `sinks` positions stay visible
};

// One engine step's tokens. Tokens of one sequence are contiguous and in position order.
struct BatchView {
  std::vector<TokenId> tokens;                     // [n_tokens]
  std::vector<int32_t> positions;                  // [n_tokens] position in its sequence
  std::vector<int64_t> slot_mapping;                   // [n_tokens] block * block_size + offset
  std::vector<int32_t> seq_index;                  // [n_tokens] index into block_tables
  std::vector<std::span<const BlockId>> block_tables;  // [n_seqs]
  std::vector<int32_t> logits_rows;                // token indices whose logits are wanted, ascending
  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;            // "cpu", "cuda:0 (NVIDIA H100 ...)"
  virtual void init_kv(const KvLayout& layout, const AttentionPolicy& policy) = 0;
  virtual const KvLayout& kv_layout() const = 0;
  // logits: [batch.logits_rows.size()][n_vocab]
  virtual void forward(const BatchView& batch, float* logits) = 0;
  virtual void copy_blocks(std::span<const BlockCopy> copies) = 0;  // copy-on-write
};

}  // namespace kvscope
