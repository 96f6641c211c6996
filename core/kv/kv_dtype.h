#pragma once
// Element types of the KV cache and their exact byte cost (scales, zero points and padding
// included), the one set of functions every memory report uses.
#include <cstdint>
#include <optional>
#include <string>

namespace kvscope {

// INT8, FP8_E4M3 and FP8_E5M2 carry one f32 scale per (token, kv head) vector; see kv/kv_quant.h
// for why per token and for the exact FP8 definitions.
// The sub-byte formats (cpu/kv_quant4.h) pack their codes and f16 scales inside the tile:
//  * INT4: symmetric 4-bit, one f16 scale per group of `group` channels of each head vector.
//  * ROT4: INT4 of the head vector after a fixed orthogonal rotation (sign-randomised
//    Walsh-Hadamard), undone in attention; needs a power-of-two head_dim.
//  * ROT4C: ROT4 with each block's keys centered first (the block's per-channel mean, one f16
//    vector per block and head, subtracted before and added back on decode; SageAttention's
//    "smooth K") and each group's scale fitted to the least squared error over codes -8..7.
//    Like KIVI it needs the whole block: a filling block stays in the f16 residual.
//  * KIVI4 / KIVI2: keys per channel over the block's tokens (asymmetric, f16 scale and min per
//    channel per block), values per token (asymmetric, f16 scale and min per group); the tokens
//    of a block that is not yet full are kept in f16 until the block completes (the residual).
enum class KvDtype { F32, F16, BF16, INT8, FP8_E4M3, FP8_E5M2, INT4, KIVI4, KIVI2, ROT4, ROT4C };

inline constexpr KvDtype kAllKvDtypes[] = {KvDtype::F32,      KvDtype::F16,      KvDtype::BF16, KvDtype::INT8,
                                           KvDtype::FP8_E4M3, KvDtype::FP8_E5M2, KvDtype::INT4, KvDtype::KIVI4,
                                           KvDtype::KIVI2,    KvDtype::ROT4,     KvDtype::ROT4C};

// The channel group of the sub-byte formats when the setting says nothing (KIVI's paper: 32).
inline constexpr int32_t kDefaultKvGroup = 32;

const char* kv_dtype_name(KvDtype t);  // "f32", ..., "fp8_e5m2", "int4", "kivi4", "kivi2", "rot4", "rot4c"
// Accepts the names above and "fp8" (= fp8_e4m3, the usual choice for KV).
std::optional<KvDtype> parse_kv_dtype(const std::string& s);
const char* kv_dtype_choices();  // for error messages
int32_t kv_elem_bytes(
    KvDtype t);                   // bytes of one element, scales excluded (1 for the sub-byte formats: their container)
int32_t kv_code_bits(KvDtype t);  // bits of one element's code: 32, 16, 8, 4 or 2
bool kv_dtype_scaled(KvDtype t);  // one f32 scale per head vector in a side array (int8, fp8)
bool kv_dtype_packed(KvDtype t);  // a sub-byte format: codes and f16 parameters inside the tile
bool kv_dtype_kivi(KvDtype t);    // keys per channel per block (kivi4, kivi2)
// Quantized a whole block at a time (kivi4, kivi2, rot4c): a filling block waits in the f16
// residual, the `kivi_residual` setting applies, single slots cannot move.
bool kv_dtype_block_quantized(KvDtype t);
bool kv_dtype_rotated(KvDtype t);  // stored in a rotated basis (rot4, rot4c)
// Bytes to store one head vector of head_dim elements (plus its scale for quantized types).
// For the packed formats: (K + V bytes per token-head at block size 16, default group) / 2.
int64_t kv_bytes_per_head_vector(KvDtype t, int32_t head_dim);

// The group the packed formats use for head vectors of head_dim: min(group, head_dim)
// (0 = kDefaultKvGroup). Valid when it divides head_dim (kv_format_problem says otherwise).
int32_t kv_effective_group(int32_t group, int32_t head_dim);
// Empty when (dtype, head_dim, block_size, group) can be stored, else why not.
std::string kv_format_problem(KvDtype t, int32_t head_dim, int32_t block_size, int32_t group);

// Tile geometry of the main K or V array of one (block, kv head): block_size rows of
// kv_row_bytes (codes, and for the per-token packed formats their f16 scales/mins), followed by
// kv_tile_extra_bytes (KIVI keys: f16 scale and min per channel; rot4c keys: the f16 center per
// channel; padded to a multiple of
// block_size so that bytes per token stay an integer).
int64_t kv_row_bytes(KvDtype t, bool is_value, int32_t head_dim, int32_t group);
int64_t kv_tile_extra_bytes(KvDtype t, bool is_value, int32_t head_dim, int32_t block_size);
// Exact bytes of one token of one KV head, K and V together, everything included (int8/fp8's
// side-array scales, packed formats' parameters and padding; not KIVI's transient residual).
// Why a packed dtype cannot store a latent (MLA) cache: the error of every layer that refuses it.
std::string latent_packed_problem(KvDtype t);
int64_t kv_bytes_per_token_head(KvDtype t, int32_t head_dim, int32_t block_size, int32_t group);
// f16 bytes the residual of the block-quantized formats holds for one block (all tokens of one block, K and V, of one
// layer and KV head) while that block fills: 2 * block_size * head_dim * 2.
int64_t kv_residual_bytes_per_block_head(KvDtype t, int32_t head_dim, int32_t block_size);

}  // namespace kvscope
