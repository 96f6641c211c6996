#pragma once
// Everything that configures an engine, in one plain struct; config_validation.h says which
// values are allowed (the one rule book the CLI, the Settings panel and the engine share).
#include <cstddef>
#include <cstdint>

#include "engine/evict_config.h"
#include "engine/scheduler_config.h"
#include "kv/baseline_reserve.h"
#include "kv/kv_dtype.h"
#include "kv/state_checkpoint_pool.h"
#include "kv/state_dtype.h"

namespace kvscope {

// The hybrid KV cache (kv/hybrid_kv_manager.h) for models mixing sliding-window and global
// layers: Auto turns it on for such models when the allocator is paged and the backend can
// store several KV groups; On insists (an error when impossible); Off keeps one block table.
enum class HybridKvMode : uint8_t { Auto, On, Off };

struct EngineConfig {
  int32_t block_size = 16;
  int32_t num_blocks = 0;  // when 0, derived from kv_memory_bytes
  int64_t kv_memory_bytes = 64LL << 20;
  KvDtype kv_dtype = KvDtype::F32;
  // Hybrid recurrent models only: the element type of each sequence's state slot.
  StateDtype state_dtype = StateDtype::F32;
  // Hybrid recurrent models with prefix caching: the block boundaries where a computing sequence
  // leaves a copy of its state (kv/state_checkpoint_pool.h), and the memory those copies may
  // take (least recently used first out). Policy off, or no room for one: no prefix-cache hits.
  CheckpointPolicy state_checkpoints;
  int64_t checkpoint_memory_bytes = 256LL << 20;
  // Channels per scale of the packed 4/2-bit KV dtypes (int4, rot4, kivi values); 0 = the default
  // kDefaultKvGroup (32), capped at head_dim. KIVI's keys are grouped by the block instead.
  int32_t kv_quant_group = 0;
  // KIVI (kivi4/kivi2) only: tokens of each sequence kept in f16 beyond the block being filled.
  // A full block is quantized once at least this many tokens of its sequence follow it, so the
  // newest R to R + block_size - 1 tokens are always in f16 (KIVI's residual; its paper uses
  // 128). 0: a block is quantized as soon as it is full (the block being filled is the residual).
  int32_t kivi_residual = 0;
  bool prefix_caching = true;
  int32_t window = 0;
  int32_t sinks = 0;
  // Token eviction (engine/evict_config.h). With it on, `window` is the policy's recent window
  // (unless the spec names one) and `sinks` the first tokens never evicted: there is no separate
  // attention window then, every kept token is visible.
  EvictConfig evict;
  bool sinks_in_sliding_layers = true;  // AttentionPolicy::sinks_in_sliding_layers
  bool learned_sinks = true;            // AttentionPolicy::learned_sinks (gpt-oss's attn_sinks)
  SchedulerConfig sched;                // max_model_len 0 -> model's context length
  size_t max_events = 100000;           // bounded block-event history
  // After every step (and cancel) the engine builds a snapshot and publishes it (a swap of a
  // shared_ptr<const>, telemetry/snapshot_slot.h), so a reader on any thread can take the newest one with
  // latest_snapshot() at its own pace without ever blocking or waiting for the engine. Off: a
  // snapshot is built only when the driving thread calls snapshot(); for a consumer that reads
  // far less often than the engine steps and wants none of the per-step copies.
  bool publish_every_step = true;
  // The "traditional" allocator instead of paging: every request reserves max_model_len
  // contiguous slots up front (first-fit). Same scheduler, model and backend: a real measurement.
  bool contiguous_baseline = false;
  // How much the baseline reserves per request (max_model_len, the request's own worst case,
  // or a fixed guess that grows on overflow): kv/baseline_reserve.h.
  BaselineReserve baseline_reserve;
  // Teaching mode: no KV cache at all. After every sampled token the sequence's K/V are thrown
  // away and the whole sequence is recomputed next step, so compute per generated token grows
  // with the length (quadratic in total) instead of staying flat. Prefix caching is off.
  bool no_kv_cache = false;
  HybridKvMode hybrid_kv = HybridKvMode::Auto;
  // Hybrid KV cache only: blocks of the sliding group's pool (0: derived, see
  // kv/hybrid_pool_split.h). num_blocks then counts the global group's blocks; when both are 0
  // kv_memory_bytes is split between the two pools.
  int32_t sliding_num_blocks = 0;
  // CPU worker threads of the backend a front end builds for this engine (0: its own default).
  // The engine never reads it (it receives a built Backend); it lives here so that the GUI's
  // Settings panel hands one config to the worker that rebuilds backend and engine together.
  int32_t threads = 0;
};

}  // namespace kvscope
