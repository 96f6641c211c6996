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
#include "kv/state_dtype.h"
#include "kv/state_slot_manager.h"

namespace kvscope {

struct AttentionPolicy {
  int32_t window = 0;  // 0: full attention (a model's own SWA layers still use their window)
  int32_t sinks = 0;   // with a window: the first `sinks` positions stay visible
  // A model's own sliding-window layers (Gemma 3) see the sinks too (true), or only its
  // full-attention layers do and the sliding layers keep their trained, sink-free window (false).
  bool sinks_in_sliding_layers = true;
  // The longest sequence the engine will run (0: the model's trained context). phi3's LongRoPE
  // picks its long or short factors by it, as llama.cpp does by its n_ctx.
  int32_t context_len = 0;
  // gpt-oss's trained sink logits (attn_sinks) in the softmax; false drops them, an ablation
  // that shows what they do (they are weights, not cached tokens: no KV memory either way).
  bool learned_sinks = true;
};

// A KV group: layers that share one block pool and one block table per sequence. Most models
// have one group holding every layer. A model mixing sliding-window and full-attention layers
// (Gemma 3) runs with two under the hybrid KV cache (kv/hybrid_kv_manager.h): group 0 the
// full-attention layers, group 1 the sliding ones, whose tables drop blocks outside the window.
struct KvGroupSpec {
  KvLayout layout;              // layout.n_layer == layers.size(); its own num_blocks
  std::vector<int32_t> layers;  // model layers stored in this group, ascending
};

// Slot mapping and block tables of one more KV group (group >= 1), shaped like BatchView's.
struct KvGroupBatch {
  std::vector<int64_t> slot_mapping;                   // [n_tokens]
  std::vector<std::span<const BlockId>> block_tables;  // [n_seqs]
};

// One engine step's tokens. Tokens of one sequence are contiguous and in position order.
// slot_mapping and block_tables are KV group 0's (the only group of most models, so callers
// that know one group never see the others); groups 1.. follow in groups_after_first.
struct BatchView {
  std::vector<TokenId> tokens;                         // [n_tokens]
  std::vector<int32_t> positions;                      // [n_tokens] position in its sequence
  std::vector<int64_t> slot_mapping;                   // [n_tokens] block * block_size + offset
  std::vector<int32_t> seq_index;                      // [n_tokens] index into block_tables
  std::vector<std::span<const BlockId>> block_tables;  // [n_seqs]
  std::vector<int32_t> logits_rows;                    // token indices whose logits are wanted, ascending
  std::vector<KvGroupBatch> groups_after_first;        // [n_groups - 1]: groups 1.. (hybrid KV cache)
  // [n_seqs] each sequence's recurrent-state slot (models with recurrent layers; empty or -1
  // otherwise). A sequence whose first token here is at position 0 starts a fresh state.
  std::vector<int32_t> state_slots;
  // [n_tokens] or empty: the state slot (a prefix-cache checkpoint) each recurrent layer copies
  // its sequence's state into once this token is computed; -1: none.
  std::vector<int32_t> state_save_to;
  // Token eviction (one KV group only; all empty when it is off, and then cost nothing):
  std::span<const uint8_t> holes;  // [num_blocks * block_size]: 1 = evicted slot, attention skips it
  std::span<const uint8_t>
      layer_holes;  // per-layer eviction: [n_layer][num_blocks * block_size], 1 = that layer skips it
  std::span<const int32_t> slot_positions;  // [num_blocks * block_size]: the position in each slot
  std::vector<int32_t> rows;                // [n_tokens] the token's cache row (position - rows compacted away)
  std::vector<uint8_t> record_attention;    // [n_tokens] 1: add this query's softmax weights to attention_mass()
  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_groups() const { return 1 + static_cast<int32_t>(groups_after_first.size()); }
  const std::vector<int64_t>& group_slots(int32_t g) const {
    return g == 0 ? slot_mapping : groups_after_first[static_cast<size_t>(g - 1)].slot_mapping;
  }
  const std::vector<std::span<const BlockId>>& group_tables(int32_t g) const {
    return g == 0 ? block_tables : groups_after_first[static_cast<size_t>(g - 1)].block_tables;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 (NVIDIA H100 ...)"
  // One KV group holding every layer.
  virtual void init_kv(const KvLayout& layout, const AttentionPolicy& policy) = 0;
  // Several KV groups (hybrid KV cache). Backends that store one group only keep this default,
  // which accepts exactly one group of every layer and refuses more with a clear message.
  virtual bool supports_kv_groups() const { return false; }
  virtual void init_kv_groups(std::span<const KvGroupSpec> groups, const AttentionPolicy& policy);
  // Group 0's layout (the only one unless init_kv_groups set up more).
  virtual const KvLayout& kv_layout() const = 0;
  virtual std::vector<KvLayout> kv_group_layouts() const { return {kv_layout()}; }
  // Bytes of all groups' pools, and of one token's K/V across every layer.
  int64_t kv_total_bytes() const;
  int64_t kv_bytes_per_token() const;
  // KIVI's f16 residual (blocks being filled) at its largest since init_kv; 0 for other dtypes.
  virtual int64_t kv_residual_peak_bytes() const { return 0; }
  // KIVI's residual longer than the block being filled (KvLayout::kivi_residual > 0): a backend
  // that cannot keep full blocks in f16 says no, and the engine refuses the setting.
  virtual bool supports_kivi_residual() const { return false; }
  // Blocks freed since the last step, applied before copy_blocks and forward (a freed block may
  // be taken again and written in this step). Default: nothing kept per block, nothing to do.
  virtual void release_blocks(std::span<const BlockRelease> released) { (void)released; }
  // logits: [batch.logits_rows.size()][n_vocab]
  virtual void forward(const BatchView& batch, float* logits) = 0;
  virtual void copy_blocks(std::span<const BlockCopy> copies) = 0;  // copy-on-write (BlockCopy::group)
  // Recurrent-state slots (kv/state_slot_manager.h) for a model with recurrent layers: how many,
  // the bytes one holds, and the copies forked sequences need. A backend that runs no recurrent
  // layer refuses any slot (the defaults).
  virtual void init_state_slots(int32_t n_slots, StateDtype dtype = StateDtype::F32);
  virtual int64_t state_bytes_per_slot() const { return 0; }
  virtual StateDtype state_dtype() const { return StateDtype::F32; }
  virtual void copy_state_slots(std::span<const StateCopy> copies);
  // Token eviction: whether holes / cache rows / attention recording are honoured; the
  // accumulated softmax weight every slot received from recorded queries (summed over layers
  // and query heads; reset when a slot is written at layer 0); and compaction's slot moves
  // (K/V and accumulated weight, applied in order).
  virtual bool supports_token_eviction() const { return false; }
  virtual std::span<const float> attention_mass() const { return {}; }
  // The same per layer, [n_layer][slot] (per-layer eviction; empty before the first recording).
  virtual std::span<const float> layer_attention_mass() const { return {}; }
  virtual void copy_slots(std::span<const SlotCopy> copies);
};

}  // namespace kvscope
