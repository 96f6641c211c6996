#pragma once
// The CPU backend: f32 activations, weights read in their GGUF type through quant_dot, the KV
// block pool in host memory, paged attention that walks each sequence's block table.
//
// Positions. Full attention and window-only attention use absolute positions: keys are stored
// after RoPE at their position in the text (window-only is the StreamingLLM paper's failing
// baseline, kept as such). With attention sinks (policy.sinks > 0) the backend follows the
// paper instead: keys are stored BEFORE RoPE, and at attention time every visible key is
// rotated by its position in the cache (sinks 0..S-1, then the window keys consecutively after
// them) and the query by its own cache position (the last one). Why not rotate by absolute
// positions and fix up only the sinks (RoPE is relative, so that gives the same scores)? The
// angles would then grow with the text: past the trained context and, in f32, past ~1e5
// positions they lose precision, while cache positions stay below sinks + window forever, which
// is what lets generation stream on with bounded memory. The cost is one rotation per visible
// key per query head, from a cos/sin table of sinks + window rows.
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "cpu/cpu_kv_storage.h"
#include "cpu/matmul.h"
#include "cpu/query_tiles.h"
#include "cpu/thread_pool.h"
#include "engine/backend.h"
#include "model/model.h"

namespace kvscope {

class OnlineAttention;

class CpuBackend : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Model> model, int n_threads = 0);
  std::string name() const override;
  void init_kv(const KvLayout& layout, const AttentionPolicy& policy) override;
  bool supports_kv_groups() const override { return true; }
  void init_kv_groups(std::span<const KvGroupSpec> groups, const AttentionPolicy& policy) override;
  const KvLayout& kv_layout() const override { return kv_[0].layout(); }
  std::vector<KvLayout> kv_group_layouts() const override;
  void forward(const BatchView& batch, float* logits) override;
  int64_t kv_residual_peak_bytes() const override;
  void copy_blocks(std::span<const BlockCopy> copies) override;
  void init_state_slots(int32_t n_slots, StateDtype dtype = StateDtype::F32) override;
  int64_t state_bytes_per_slot() const override;
  StateDtype state_dtype() const override { return state_dtype_; }
  void copy_state_slots(std::span<const StateCopy> copies) override;
  bool supports_kivi_residual() const override { return true; }
  void release_blocks(std::span<const BlockRelease> released) override;
  bool supports_token_eviction() const override { return true; }
  std::span<const float> attention_mass() const override { return mass_; }
  std::span<const float> layer_attention_mass() const override { return layer_mass_; }
  void copy_slots(std::span<const SlotCopy> copies) override;
  ThreadPool& pool() { return pool_; }
  // The KV pool of one group (benchmarks fill it directly to time attention alone).
  CpuKvStorage& kv_storage(int32_t group = 0) { return kv_.at(static_cast<size_t>(group)); }
  // Software prefetch of K/V along the block table is used for a head whose visible K/V exceeds
  // this many bytes (default: a quarter of this core's L2). 0 = always, INT64_MAX = never: benchmarks
  // and tests set it to measure or exercise either way.
  void set_prefetch_threshold(int64_t bytes) { prefetch_min_bytes_ = bytes; }
  // Queries per tile in prefill attention (cpu/query_tiles.h); 1 = one query per pass, the
  // untiled path. Default kQueryTileMax, or KVSCOPE_QUERY_TILE from the environment (benchmarks
  // time both in one binary; tests compare them).
  void set_query_tile(int32_t n) { query_tile_ = std::clamp(n, 1, kQueryTileMax); }
  int32_t query_tile() const { return query_tile_; }
  int64_t prefetch_threshold() const { return prefetch_min_bytes_; }
  // Paged attention of one layer over the whole batch (public so benchmarks can time it alone).
  // Pairs (token, KV head) are handed to the pool heaviest first; a step with too few pairs to
  // keep every thread busy (decode of a long sequence) splits each pair's keys into parts
  // (cpu/attention_split.h).
  void attention(int32_t layer, const BatchView& batch, const float* q, float* out);

  // Wall time of forward() since the last reset, and how much of it went to attention and to
  // the weight matmuls (the rest: embedding, norms, RoPE, activations, K/V stores); output_s is
  // the part of matmul_s spent in the output (vocabulary) matrix. For the benchmark's step
  // profiles; two clock reads per call, always on.
  struct PhaseTimes {
    double forward_s = 0, attention_s = 0, matmul_s = 0, output_s = 0;
    int64_t tiled_queries = 0;  // (token, KV head) queries attended in query tiles
  };
  const PhaseTimes& phase_times() const { return phase_; }
  void reset_phase_times() { phase_ = {}; }

 private:
  struct Scratch {                      // per worker thread, reused across steps
    std::vector<float> k_tile, v_tile;  // [chunk][head_dim] dequantized K and V rows
    std::vector<float> rot;             // [query heads + chunk][head_dim] rotated queries and keys (sink mode)
    // Token eviction's recording: scores [query head][row], the rows' slots, their weights,
    // and this thread's per-slot sums (only `touched` entries non-zero).
    std::vector<float> rec, w, mass;
    std::vector<int64_t> rec_slots, touched;
  };
  void start_recording(OnlineAttention& att, Scratch& sc, int32_t n_q, int32_t max_rows) const;
  void finish_recording(const OnlineAttention& att, Scratch& sc) const;
  void merge_attention_mass(int32_t layer, bool per_layer);
  void reset_mass(int64_t slot);  // a slot written with a new token: no weight yet, in any layer
  void prepare_eviction(const BatchView& batch);
  int32_t layer_window(int32_t layer) const;
  void complete_aged_blocks(CpuKvStorage& kv, int32_t kv_layer, int32_t group, const BatchView& batch) const;
  int32_t layer_sinks(int32_t layer) const;  // policy.sinks, or 0 in a sliding layer without sinks
  void set_policy(const AttentionPolicy& policy);
  // forward()'s steps; activations live in the x_ ... up_ buffers below.
  void embed(const BatchView& batch);
  void attention_block(int32_t layer, const BatchView& batch);
  void position_qkv(int32_t layer, const BatchView& batch, int32_t token);
  // Latent attention's projections, cache rows and up-projection (cpu/cpu_latent_attention.cpp):
  // attention_block for deepseek2, leaving the heads' outputs (n_head * v_dim) in att_.
  void latent_attention(int32_t layer, const BatchView& batch);
  void latent_queries(const LayerWeights& L, const BatchView& batch);
  // The output projection, the residual and the FFN's input norm: the end of attention_block.
  void attention_output(int32_t layer, int32_t n_tokens, const float* heads);
  // o_ (a layer's attention or short-convolution output) into the residual stream x_ (after
  // the post-attention norm where the architecture has one), then the FFN's input norm into xn_.
  void add_mixer_output(int32_t layer, int32_t n_tokens);
  void ffn_block(int32_t layer, int32_t n_tokens);
  // lfm2's short-convolution layer (cpu/cpu_short_conv.cpp): B, C, x from in_proj, the causal
  // depthwise convolution of B*x over the sequence's state then its tokens, C * that, out_proj,
  // residual and the FFN's input norm. Updates each sequence's state slot.
  void short_conv_block(int32_t layer, const BatchView& batch);
  // qwen35's Gated DeltaNet layer (cpu/cpu_gated_delta_net.cpp): in_proj, the causal conv over
  // the sequence's state, the gated delta rule per value head, the gated norm, out_proj,
  // residual and the FFN's input norm. Updates each sequence's state slot, token by token.
  void gated_delta_net_block(int32_t layer, const BatchView& batch);
  // granitehybrid's Mamba-2 layer (cpu/cpu_mamba2.cpp): in_proj, the conv and the selective
  // scan per head over the sequence's state, silu(z) gating, the grouped norm, out_proj,
  // residual and the FFN's input norm. mamba2_token: one token's conv and scan on its layer
  // state st, from its in_proj row (consumed) to y (d_inner).
  void mamba2_block(int32_t layer, const BatchView& batch);
  void mamba2_token(const Mamba2Weights& M, float* st, float* row, float* y) const;
  // Token t's sequence's state in recurrent layer il as f32 (cpu/cpu_state_slots.cpp), zeroed
  // at position 0: a new sequence, or one recomputed after a preemption. With a 16-bit state
  // dtype it is a decoded copy that store_token_state rounds back into the slot; every layer
  // calls it when the token is done, and it also copies the layer's state into the token's
  // checkpoint slot (BatchView::state_save_to) when the batch asks for one.
  float* token_state(int32_t layer, const BatchView& batch, int32_t token);
  void store_token_state(const BatchView& batch, int32_t token);
  // One token's convolution and delta rule on one sequence's layer state (st), from its
  // in_proj row (mix, consumed) to its value heads' outputs (out).
  void delta_rule_token(const GdnWeights& G, float* st, float* mix, const float* alpha, const float* beta,
                        float* out) const;
  // qwen35's gated attention: the query projection's rows split into q_ and each head's gate
  // (q_gate_), and after attention each head's output scaled by sigmoid(its gate).
  void split_query_gate(int32_t layer, int32_t n_tokens);
  void gate_attention_heads(int32_t layer, int32_t n_tokens);
  // gemma4 (cpu/cpu_layer_inputs.cpp): the per-layer inputs of this batch's tokens, computed once
  // from the embeddings, and each layer's use of them; then the layer's output scale.
  void per_layer_inputs(const BatchView& batch);
  void per_layer_embedding(int32_t layer, int32_t n_tokens);
  // The MoE FFN of xn_'s n_tokens rows into o_ (cpu/cpu_moe_ffn.cpp): route, then each chosen
  // expert over the tokens routed to it, so only those experts' weights are read.
  void moe_ffn(const MoeWeights& X, int32_t n_tokens);
  void route_tokens(const MoeWeights& X, int32_t n_tokens);
  void output_logits(const BatchView& batch, float* logits);
  bool sink_mode() const { return policy_.sinks > 0; }
  // cos/sin of RoPE at cache position p for layer il's base: n_rot floats (see rope_cos_sin_row).
  const float* cache_rope(int32_t il, int32_t p) const;
  // One part of a split-KV pass: visible keys [n_vis * part / parts, n_vis * (part + 1) / parts),
  // leaving the running max and sum of each query head in m, l (and out unnormalised).
  struct AttendPart {
    int32_t part, parts;
    float* m;
    double* l;
  };
  // Attention of the query heads of `token` that share KV head kv_head; q, out: those heads' rows.
  void attend_group(int32_t layer, const BatchView& batch, int32_t token, int32_t kv_head, const float* q, float* out,
                    Scratch& s, const AttendPart* part = nullptr) const;
  // attend_group's steps (cpu/cpu_attend_group.cpp). The keys one query sees: cache positions
  // [0, n_sink) then [lo, pos]; this call takes visible keys [v0, v1) of them (a split part).
  struct VisibleKeys {
    int32_t pos = 0, window = 0, lo = 0, n_sink = 0, n_vis = 0, v0 = 0, v1 = 0;
  };
  VisibleKeys visible_keys(int32_t layer, const BatchView& batch, int32_t token, const AttendPart* part) const;
  // The query rows to score with: q, or q turned (rot4's rotation, sink mode's RoPE) into
  // s.rot; *krot: where sink mode's re-roped keys go (null otherwise).
  const float* turn_queries(int32_t layer, const float* q, int32_t n_vis, bool rotated, Scratch& s, float** krot) const;
  class KeyWalk;  // the walk over the visible keys, block by block, into the online softmax
  // Attention of the queries of `tile` (consecutive tokens of one sequence) that share KV head
  // kv_head, in one walk over their keys (cpu/query_tiles.h); q, out: the whole batch's rows.
  // Only for steps without sinks, holes or attention recording (attention() decides).
  void attend_tile(int32_t layer, const BatchView& batch, const QueryTile& tile, int32_t kv_head, const float* q,
                   float* out, Scratch& s) const;
  // The KV pool `layer` is stored in, and the layer's index inside it.
  const CpuKvStorage& kv_of(int32_t layer, int32_t* kv_layer) const;
  // Rows [off, off + n) of block b's K and V tiles for KV head g as f32: the cache itself (f32
  // KV) or decoded into the scratch tiles at row `at`. What attend_group and attend_tile load,
  // once per block: inline, as CpuKvStorage::load_rows is, for the same reason.
  std::pair<const float*, const float*> load_kv_rows(const CpuKvStorage& kv, int32_t kv_layer, BlockId b, int32_t g,
                                                     int32_t off, int32_t n, Scratch& sc, int32_t at) const {
    const int64_t row = static_cast<int64_t>(at) * kv.layout().head_dim;
    const float* k = kv.load_rows(kv_layer, false, b, g, off, n, sc.k_tile.data() + row);
    if (kv.layout().latent) return {k, k};  // the value is the key row's latent part
    return {k, kv.load_rows(kv_layer, true, b, g, off, n, sc.v_tile.data() + row)};
  }
  // Whether this step's layer runs query tiles (and plans them into tiles_).
  bool plan_tiles(const BatchView& batch, int32_t n_head_kv);
  int64_t mean_visible_keys(int32_t layer, const BatchView& batch) const;
  void matmul_timed(const TensorView& w, const float* x, int64_t n_tokens, float* y);
  // Several weights against the same x (cpu/matmul.h: one pool hand-off per decode step).
  void matmul_shared_timed(std::initializer_list<MatmulTarget> targets, const float* x, int64_t n_tokens);

  std::shared_ptr<const Model> model_;
  ThreadPool pool_;
  std::vector<CpuKvStorage> kv_;      // [KV group]: one pool per group (usually one group)
  std::vector<int32_t> layer_group_;  // [n_layer] the group storing layer il
  std::vector<int32_t> layer_slot_;   // [n_layer] il's layer index inside its group's storage
  AttentionPolicy policy_;
  // Scratch, reused across steps: [n_tokens][...]
  std::vector<float> x_, xn_, q_, k_, v_, att_, o_, gate_, up_, ffn_;
  std::vector<float> mla_q_, mla_qa_, mla_in_, mla_out_, mla_heads_;  // latent attention (cpu_latent_attention.cpp)
  std::vector<float> ple_in_, ple_x_;  // gemma4: [token][layer][n_embd_per_layer] inputs, [token][..] work
  // Recurrent state: [slot][recurrent layer][ModelConfig::state_floats_per_layer()], in f32 or
  // (state_dtype_) 16 bits; lfm2's is [n_embd][conv_l_cache - 1] past B*x values, qwen35's and
  // granitehybrid's the conv inputs then the recurrence (GdnConfig, Mamba2Config), oldest first;
  // recurrent_index_[il]: il's place among the recurrent layers (-1: none).
  std::vector<float> state_;       // f32 slots
  std::vector<uint16_t> state16_;  // f16 / bf16 slots
  StateDtype state_dtype_ = StateDtype::F32;
  std::vector<float> state_work_;  // the decoded layer state of the token being computed
  size_t state_work_at_ = 0;       // where the token's layer state is in its slot array
  size_t state_layer_at_ = 0;      // the same within one slot
  int32_t n_state_slots_ = 0;
  std::vector<int32_t> recurrent_index_;
  std::vector<float> conv_bcx_, conv_y_;  // [token][3 n_embd], [token][n_embd]
  // qwen35: [token][conv_channels], [token][value_dim] x2, [token][n_v_heads] x2 (granitehybrid:
  // gdn_mix_ [token][in_proj rows], gdn_out_ [token][d_inner]); the gated
  // attention's query rows [token][2 q_dim] and gates [token][q_dim].
  std::vector<float> gdn_mix_, gdn_z_, gdn_out_, gdn_alpha_, gdn_beta_, q_rows_, q_gate_;
  std::vector<Scratch> scratch_;            // [threads]
  std::vector<float> split_acc_, split_m_;  // split-KV parts: [pair][part][query head]([head_dim])
  std::vector<double> split_l_;
  std::vector<float> mass_;        // token eviction: [slot] accumulated softmax weight (see Backend::attention_mass)
  std::vector<float> layer_mass_;  // per-layer eviction: [layer][slot], the same per layer
  PhaseTimes phase_;
  int64_t prefetch_min_bytes_;    // see set_prefetch_threshold
  int32_t query_tile_;            // see set_query_tile
  std::vector<QueryTile> tiles_;  // this step's query tiles (attention(), reused)

  const float* rope_factors_ = nullptr;  // the model's per-pair RoPE divisors for policy_.context_len
  // MoE scratch: per token its chosen experts and weights; per expert its tokens' rows.
  struct MoeScratch {
    std::vector<float> logits, x, gate, up, out, weights;
    std::vector<int32_t> chosen;
    std::vector<std::vector<int32_t>> routed;  // [expert] -> (token * n_expert_used + k)
  } moe_;
  // Sink mode only: [2 (rope_base, rope_base_swa)][sinks + window][that kind's rope_dim] cos/sin pairs.
  std::vector<float> rope_cs_[2];
};

}  // namespace kvscope
