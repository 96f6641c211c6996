#pragma once
// Launchers of the CUDA backend's kernels, in plain types so host code (cuda_backend.cu, the
// benchmark, tests) needs no kernel source. Every launcher is asynchronous on `stream`.
//
// Shapes follow the CPU backend: activations are row-major [n_tokens][features]; the residual
// stream and GEMM outputs are f32, GEMM inputs are the weights' type (ActType: f16 or bf16).
#include <cstdint>

#include <cuda_runtime.h>

#include "kv_math.h"  // KVSCOPE_HD

namespace kvscope::cuda {

enum class ActType : int32_t { F16, BF16 };
// Element types of the KV pool. F32/F16/BF16 are KvDtype's; the scaled 8-bit ones are ready
// for the quantized-KV issue (one f32 scale per (token, kv head) vector, see kv_math.h).
enum class KvCodecId : int32_t { F32, F16, BF16, FP8_E4M3, FP8_E5M2, INT8 };

int32_t kv_codec_elem_bytes(KvCodecId c);
bool kv_codec_scaled(KvCodecId c);
const char* kv_codec_name(KvCodecId c);

// A prompt chunk's queries are attended in tiles of this many consecutive tokens.
constexpr int32_t kPrefillTile = 16;
// Split-K partition of the decode kernel, in visible positions.
constexpr int32_t kDecodePartition = 512;
// Largest head_dim the attention kernels take (head_dim must also be a multiple of 8).
constexpr int32_t kMaxHeadDim = 256;

// Kernel error codes, written to a device int the host checks after every step.
enum KernelError : int32_t {
  kErrNone = 0,
  kErrDroppedBlock = 1,    // attention reached a kNoBlock table entry
  kErrTableOverrun = 2,    // a visible position lies past the sequence's block table
  kErrSlotOutOfRange = 3,  // slot_mapping points outside the pool
};

// Device pointers into one step's packed upload (see CudaBackend::pack_step).
struct StepPtrs {
  const int32_t* tokens = nullptr;         // [n_tokens]
  const int32_t* positions = nullptr;      // [n_tokens]
  const int64_t* slot_mapping = nullptr;   // [n_tokens] block * block_size + offset
  const int32_t* seq_index = nullptr;      // [n_tokens]
  const int32_t* table_offsets = nullptr;  // [n_seqs + 1] into tables
  const int32_t* tables = nullptr;         // concatenated block tables
  const int32_t* logits_rows = nullptr;    // [n_out]
  const int32_t* decode_tokens = nullptr;  // [n_decode] tokens attended by the split-K decode kernel
  const int32_t* prefill_tiles = nullptr;  // [n_tiles][2]: first token, count (<= kPrefillTile)
  const int32_t* res_slot = nullptr;       // KIVI: [n_tokens] residual slot each token's K/V row goes to
  const int32_t* kivi_complete = nullptr;  // KIVI: [n_complete][2] (block, residual slot) completed this step
  int32_t n_tokens = 0, n_seqs = 0, n_out = 0, n_decode = 0, n_tiles = 0, n_complete = 0;
};

// One layer's K or V array ([block][kv_head][slot][head_dim]) and, for scaled codecs, its
// scales ([block][kv_head][slot]).
struct KvArray {
  void* data = nullptr;
  float* scale = nullptr;
  uint16_t* residual = nullptr;  // KIVI: this layer's K or V part of residual slot 0 (f16 bits)
};

// The packed 4/2-bit formats (cpu/kv_quant4.h, math in kv_quant4_math.h) are not element
// codecs: codes and f16 parameters live inside each (block, kv head) tile of tile_bytes, rows of
// row_bytes (kv/kv_dtype.h kv_row_bytes / kv_tile_extra_bytes), so they have their own store and
// attention kernels (cuda_packed.cu) selected by `packed`.
enum class PackedKv : int32_t { None, INT4, ROT4, KIVI4, KIVI2 };
const char* packed_kv_name(PackedKv f);
KVSCOPE_HD inline int32_t packed_kv_bits(PackedKv f) { return f == PackedKv::KIVI2 ? 2 : 4; }
KVSCOPE_HD inline bool packed_kv_kivi(PackedKv f) { return f == PackedKv::KIVI4 || f == PackedKv::KIVI2; }

struct KvGeometry {
  int32_t n_head_kv = 0, head_dim = 0, block_size = 0, num_blocks = 0;
  KvCodecId codec = KvCodecId::F16;  // element codecs only (packed == None)
  PackedKv packed = PackedKv::None;
  int32_t group = 0;               // effective channel group (kv_effective_group)
  int64_t row_bytes[2] = {0, 0};   // [is_value] bytes of one slot's row in a packed tile
  int64_t tile_bytes[2] = {0, 0};  // [is_value] bytes of one (block, kv head) packed tile
  // KIVI's f16 residual (tokens of blocks not yet full): residual slot r of a layer's K or V at
  // KvArray::residual + r * res_stride, [kv_head][slot][head_dim] inside. res_of_block[b]: the
  // residual slot block b's rows are read from by attention, -1 once it is quantized.
  const int32_t* res_of_block = nullptr;
  int64_t res_stride = 0;  // f16 elements between residual slots
};

// ---- element-wise / per-row kernels (cuda_kernels.cu) ---------------------------------------

// x[t] = table[tokens[t]] * (embed_scale ? sqrt(E) : 1), table [n_vocab][E] in ActType.
void launch_embed(ActType at, const void* table, const int32_t* tokens, int32_t n, int32_t E, bool embed_scale,
                  float* x, cudaStream_t stream);

// Per row r of n: [o = rms_norm(o) * post_w]; x += o (when o != nullptr); then, when norm_w !=
// nullptr, xn[r] = rms_norm(x[row]) * norm_w. row = rows ? rows[r] : r (rows only without o:
// the final norm of the logits rows).
void launch_residual_norm(ActType at, float* x, float* o, const float* post_w, const float* norm_w, void* xn,
                          const int32_t* rows, int32_t n, int32_t E, float eps, cudaStream_t stream);

struct QkvParams {
  float* qkv = nullptr;           // [n][n_head*D + 2*n_head_kv*D]: q | k | v, q rewritten in place
  const float* bias = nullptr;    // [n_head*D + 2*n_head_kv*D] or nullptr
  const float* q_norm = nullptr;  // [D] or nullptr
  const float* k_norm = nullptr;  // [D] or nullptr
  const int32_t* positions = nullptr;
  const int64_t* slot_mapping = nullptr;
  const int32_t* res_slot = nullptr;  // KIVI: StepPtrs::res_slot
  int32_t n_tokens = 0, n_head = 0;
  int32_t rope_dim = 0;
  bool neox = false;
  bool rope = true;  // false with attention sinks: K is stored before RoPE and q/k are
                     // rotated at attention time by cache position (AttnParams::sink_rope)
  float rope_base = 10000.0f, rope_freq_scale = 1.0f, eps = 1e-5f;
  KvGeometry kv;
  KvArray k, v;  // this layer's cache arrays
  int32_t* error = nullptr;
};
// Bias, q/k RMS norm, RoPE of q and k; K and V stored at their slots (encoded to the KV codec).
void launch_qkv_rope_store(const QkvParams& p, cudaStream_t stream);

// h[t][f] = act(gu[t][f]) * gu[t][F + f]  (act: SiLU, or tanh-GELU when gelu)
void launch_gated_act(ActType at, bool gelu, const float* gu, void* h, int32_t n, int32_t F, cudaStream_t stream);

// Copy-on-write of KV: for each (src, dst, n_slots) triple, slots [0, n_slots) of every layer's
// K and V tile rows (and scales). pool: layer l's K at k_base + l * layer_stride bytes, V at
// v_base + l * layer_stride; scales likewise with scale_layer_stride floats.
struct KvPoolView {
  uint8_t* k_base = nullptr;
  uint8_t* v_base = nullptr;
  int64_t layer_stride = 0;        // bytes (K; V too unless v_layer_stride is set)
  int64_t v_layer_stride = 0;      // bytes of one layer's V (packed KIVI: K and V tiles differ); 0 = layer_stride
  uint16_t* k_res_base = nullptr;  // KIVI residual: layer l's K part at k_res_base + l * res_layer_stride
  uint16_t* v_res_base = nullptr;
  int64_t res_layer_stride = 0;  // f16 elements
  float* k_scale_base = nullptr;
  float* v_scale_base = nullptr;
  int64_t scale_layer_stride = 0;  // floats
  int32_t n_layer = 0;
  KvGeometry kv;
  KVSCOPE_HD KvArray layer(int32_t l, bool value) const {
    KvArray a;
    a.data = value ? v_base + l * (v_layer_stride ? v_layer_stride : layer_stride) : k_base + l * layer_stride;
    float* sb = value ? v_scale_base : k_scale_base;
    a.scale = sb ? sb + l * scale_layer_stride : nullptr;
    uint16_t* rb = value ? v_res_base : k_res_base;
    a.residual = rb ? rb + l * res_layer_stride : nullptr;
    return a;
  }
};
// Packed formats copy whole tiles (KIVI keys' parameters sit after the rows), whatever n_slots.
void launch_copy_blocks(const KvPoolView& pool, const int32_t* copies /*[n][3]*/, int32_t n_copies,
                        cudaStream_t stream);

// Host/device codec agreement check (GPU tests): encodes each x with the device path of kv_math.h.
void launch_codec_selftest(const float* x, int32_t n, uint8_t* e4m3, uint8_t* e5m2, int8_t* i8, float i8_scale,
                           float* e4m3_back, float* e5m2_back, cudaStream_t stream);

// ---- paged attention (cuda_attention.cu) ----------------------------------------------------

struct AttnParams {
  const float* q = nullptr;  // q head h of token t at q + t * q_stride + h * head_dim
  int32_t q_stride = 0;
  void* out = nullptr;  // ActType [n_tokens][out_stride], head h at h * head_dim
  int32_t out_stride = 0;
  KvArray k, v;
  KvGeometry kv;
  int32_t n_head = 0;
  int32_t window = 0, sinks = 0;  // this layer's effective window (kv_math layer_window) and sinks
  float scale = 1.0f;             // multiplier of q.k
  // Attention sinks (StreamingLLM, as the CPU backend): keys were stored before RoPE; every
  // visible key is rotated by its cache position (kv_math cache_position) and the query by the
  // last one. sink_rope: cos/sin table [sinks + window][rope_dim] for this layer's RoPE base
  // (kv_math rope_cos_sin); nullptr = RoPE already applied at absolute positions.
  const float* sink_rope = nullptr;
  int32_t rope_dim = 0;
  bool neox = false;  // with sinks, NEOX needs rope_dim % 16 == 0
  StepPtrs step;
  // Split-K workspace for decode tokens: [n_decode][n_head][part_stride] (max, sum) pairs and
  // [n_decode][n_head][part_stride][head_dim] unnormalised outputs.
  float* part_ml = nullptr;
  float* part_o = nullptr;
  int32_t part_stride = 0;  // partitions allocated per (token, head)
  int32_t max_parts = 0;    // partitions this layer needs at most (grid z)
  int32_t* error = nullptr;
};
// Workspace floats for n_decode tokens with up to max_parts partitions each.
int64_t attention_workspace_floats(int32_t n_decode, int32_t n_head, int32_t max_parts, int32_t head_dim);
// Decode tokens through the split-K kernel (+ reduce), prefill tiles through the tiled kernel.
void launch_attention(ActType at, const AttnParams& p, cudaStream_t stream);
// Only the decode part (benchmarks time it alone).
void launch_attention_decode(ActType at, const AttnParams& p, cudaStream_t stream);

// ---- packed 4/2-bit KV (cuda_packed.cu) -------------------------------------------------------

// KIVI: quantizes the tiles of the blocks completed this step (step.kivi_complete) from the f16
// residual, for one layer: keys per channel over the block, values per token. Runs after the
// layer's launch_qkv_rope_store (every row of the block is in the residual) and before its
// attention (which reads those blocks quantized).
void launch_kivi_complete(const KvGeometry& kv, KvArray k, KvArray v, const StepPtrs& step, cudaStream_t stream);
// Paged attention over packed tiles for every token of the step (decode and prefill alike):
// one thread block per (token, kv head) serving its q heads, keys in chunks through shared
// memory, dequantized inside the online-softmax loop (never a dequantized copy of the cache).
// rot4: the query is rotated (R q) and the output rotated back, as CpuBackend::attend_group.
void launch_attention_packed(ActType at, const AttnParams& p, cudaStream_t stream);
// Device packed codecs against the host (GPU tests): encodes each of n rows x[n][d] as int4
// (group g) into rows_int4[n][row bytes], and as kivi values (bits) into rows_asym; decodes
// both back to y_int4 / y_asym [n][d] through the attention kernels' element decoders.
void launch_packed_selftest(const float* x, int32_t n, int32_t d, int32_t g, int32_t bits, uint8_t* rows_int4,
                            uint8_t* rows_asym, float* y_int4, float* y_asym, cudaStream_t stream);

}  // namespace kvscope::cuda
