// GEMM driver: CPU dispatch, the token panel (activations interleaved L tokens per vector),
// the per-call unpacking of row tiles, and the split over the thread pool.
//
// Loop nest (per thread): for each tile of kRows weight rows it owns, unpack those rows over the
// whole K once (<= kRows * K bytes plus scales: 16 KB at K = 2048, in L1/L2), then run every
// token tile of the panel past it. Tokens are the inner dimension so the unpacking is paid once
// per row per call however many tokens there are; the panel (all tokens, ~1.25 * K bytes per
// token) is read once per row tile from L2 (it is < 1.3 MB at 512 tokens x K = 2048).
#include "cpu/gemm.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemm_float.h"
#include "cpu/gemm_kernels.h"
#include "cpu/quant_dot_kernels.h"
#include "cpu/thread_pool.h"

namespace kvscope {

using namespace gemm_detail;

namespace {

GemmIsa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma"))
    return GemmIsa::Avx512Vnni;
  // F16C for the float-weight kernels (cpu/gemm_float.h); every AVX2 CPU has it.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) return GemmIsa::Avx2;
#endif
  return GemmIsa::None;
}

GemmIsa capped_isa() {
  GemmIsa isa = detect_isa();
  if (const char* env = std::getenv("KVSCOPE_GEMM")) {
    const std::string v = env;
    if (v == "off" || v == "none")
      isa = GemmIsa::None;
    else if (v == "avx2" && isa != GemmIsa::None)
      isa = GemmIsa::Avx2;
  }
  return isa;
}

// Types whose activations are Q8_K blocks (super-blocks of 256).
bool k_quant(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K || t == GgmlType::Q6_K ||
         t == GgmlType::IQ4_XS;
}
// log2 of the offset the kernels remove from the unpacked levels (gemm_kernels.h): the
// AVX-512 layout stores every level unsigned; the AVX2 layout keeps Q8_0/Q4_0/Q5_0/IQ4_NL/
// IQ4_XS/MXFP4 signed, while Q6_K and Q3_K stay unsigned for both.
int level_shift(GgmlType t, bool signed_levels) {
  switch (t) {
    case GgmlType::Q6_K:
      return 5;
    case GgmlType::Q3_K:
      return 2;
    case GgmlType::Q4_0:
      return signed_levels ? 0 : 3;
    case GgmlType::Q5_0:
      return signed_levels ? 0 : 4;
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::MXFP4:
      return signed_levels ? 0 : 7;
    default:
      return 0;
  }
}
// Tokens per tile: zmm lanes on AVX-512 unless the call has <= 8 tokens (then ymm lanes).
int lanes_of(GemmIsa isa, int64_t n_tokens) { return isa == GemmIsa::Avx512Vnni && n_tokens > 8 ? 16 : 8; }
int rows_of(GemmIsa isa) { return isa == GemmIsa::Avx512Vnni ? kRowsAvx512 : kRowsAvx2; }

// ---- token panel --------------------------------------------------------------------------

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t pair16(int32_t lo, int32_t hi) {
  return static_cast<uint32_t>(static_cast<uint16_t>(lo)) | (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
}

// Token row x (converted Q8_0 blocks) into lane l of a panel tile.
void panel_q8_0_token(const uint8_t* x, int64_t nb, int L, int l, uint8_t* tile) {
  const size_t BB = q8_0_block_bytes(L);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bx = x + b * sizeof(BlockQ8_0);
    uint8_t* pb = tile + b * BB;
    int32_t sum = 0;
    for (int c = 0; c < 8; ++c) std::memcpy(pb + (c * L + l) * 4, bx + qdot::kQ8_0Qs + 4 * c, 4);
    for (int j = 0; j < QK8_0; ++j) sum += static_cast<int8_t>(bx[qdot::kQ8_0Qs + j]);
    uint16_t h;
    std::memcpy(&h, bx, 2);
    const float d = fp16_to_fp32(h);
    std::memcpy(pb + 32 * L + 4 * l, &d, 4);
    std::memcpy(pb + 36 * L + 4 * l, &sum, 4);
  }
}

// Token row x (converted Q8_K blocks) into lane l of a panel tile.
void panel_q8_k_token(const uint8_t* x, int64_t nb, int L, int l, uint8_t* tile) {
  const size_t BB = q8_k_block_bytes(L);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bx = x + b * sizeof(BlockQ8_K);
    uint8_t* pb = tile + b * BB;
    for (int c = 0; c < 64; ++c) std::memcpy(pb + (c * L + l) * 4, bx + qdot::kQ8_KQs + 4 * c, 4);
    std::memcpy(pb + 256 * L + 4 * l, bx, 4);  // d (f32)
    int16_t bs[16];
    std::memcpy(bs, bx + qdot::kQ8_KBsums, sizeof bs);
    for (int p = 0; p < 4; ++p)
      put_u32(pb + 260 * L + (p * L + l) * 4, pair16(bs[4 * p] + bs[4 * p + 1], bs[4 * p + 2] + bs[4 * p + 3]));
    for (int p = 0; p < 8; ++p) put_u32(pb + 276 * L + (p * L + l) * 4, pair16(bs[2 * p], bs[2 * p + 1]));
  }
}

// ---- row tiles ----------------------------------------------------------------------------

// Scratch of one row tile, carved out of one byte buffer (64-byte aligned parts).
struct TileScratch {
  std::vector<uint8_t> bytes;
  RowTile view;
  uint8_t* levels = nullptr;
  float* d = nullptr;
  float* dmin = nullptr;
  int32_t* sc = nullptr;
  int32_t* pairs = nullptr;

  void reserve(int rows, int64_t k, int64_t nb) {
    auto up = [](size_t n) { return (n + 63) & ~size_t{63}; };
    const size_t n_lv = up(static_cast<size_t>(rows * k));
    const size_t n_f = up(static_cast<size_t>(rows * nb) * 4);
    const size_t n_sc = up(static_cast<size_t>(rows * nb) * 16 * 4);
    const size_t n_pr = up(static_cast<size_t>(rows * nb) * 8 * 4);
    bytes.resize(n_lv + 2 * n_f + n_sc + n_pr + 64);
    uint8_t* base = bytes.data() + ((64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64);
    levels = base;
    d = reinterpret_cast<float*>(base + n_lv);
    dmin = reinterpret_cast<float*>(base + n_lv + n_f);
    sc = reinterpret_cast<int32_t*>(base + n_lv + 2 * n_f);
    pairs = reinterpret_cast<int32_t*>(base + n_lv + 2 * n_f + n_sc);
    view = RowTile{levels, k, nb, d, dmin, sc, pairs, 0};
  }
};

// Per-block scales of a K-quant row into row r of the tile: d, dmin (affine types), sc (one per
// sub-block) and pairs (the int16 pairs the kernels multiply with the activation sums: the mins
// of affine types; for symmetric ones the scales, which remove the level offset, or zero where
// the levels are stored signed).
void k_scales(GgmlType type, const uint8_t* src, int64_t nb, int r, bool signed_levels, TileScratch& s) {
  const size_t bb = ggml_row_bytes(type, QK_K);
  const int nsub = type == GgmlType::Q4_K || type == GgmlType::IQ4_XS ? 8 : 16;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* bw = src + b * bb;
    const int64_t rb = r * nb + b;
    int sc[16] = {}, pr[16] = {};  // pr: the values paired into `pairs`
    switch (type) {
      case GgmlType::Q4_K: {
        uint8_t u[8], m[8];
        qdot::unpack_q4_k_scales(bw + qdot::kQ4_KScales, u, m);
        for (int j = 0; j < 8; ++j) sc[j] = u[j], pr[j] = m[j];
        s.d[rb] = qdot::load_half(bw), s.dmin[rb] = qdot::load_half(bw + qdot::kQ4_KDmin);
        break;
      }
      case GgmlType::Q2_K:
        for (int j = 0; j < 16; ++j) sc[j] = bw[qdot::kQ2_KScales + j] & 0xF, pr[j] = bw[qdot::kQ2_KScales + j] >> 4;
        s.d[rb] = qdot::load_half(bw + qdot::kQ2_KD), s.dmin[rb] = qdot::load_half(bw + qdot::kQ2_KDmin);
        break;
      case GgmlType::Q6_K:
        for (int j = 0; j < 16; ++j) sc[j] = pr[j] = static_cast<int8_t>(bw[qdot::kQ6_KScales + j]);
        s.d[rb] = qdot::load_half(bw + qdot::kQ6_KD);
        break;
      case GgmlType::Q3_K: {
        int8_t v[16];
        q3_k_scales(bw + qdot::kQ3_KScales, v);
        for (int j = 0; j < 16; ++j) sc[j] = pr[j] = v[j];
        s.d[rb] = qdot::load_half(bw + qdot::kQ3_KD);
        break;
      }
      default: {  // IQ4_XS
        uint16_t h;
        std::memcpy(&h, bw + qdot::kIQ4_XSScalesH, 2);
        for (int j = 0; j < 8; ++j)
          sc[j] = iq4_xs_scale(j, bw + qdot::kIQ4_XSScalesL, h), pr[j] = signed_levels ? 0 : sc[j];
        s.d[rb] = qdot::load_half(bw);
      }
    }
    for (int j = 0; j < nsub; ++j) s.sc[rb * nsub + j] = sc[j];
    for (int p = 0; p < nsub / 2; ++p)
      s.pairs[rb * (nsub / 2) + p] = static_cast<int32_t>(pair16(pr[2 * p], pr[2 * p + 1]));
  }
}

// Unpacks weight row `src` as row r of the tile (levels by the AVX2 unpacker, scales here).
// signed_levels: AVX2 layout, else AVX-512 layout (see gemm_kernels.h).
void unpack_row(GgmlType type, const uint8_t* src, int64_t nb, int r, bool signed_levels, TileScratch& s) {
  unpack_levels(type, src, nb, signed_levels, s.levels + r * s.view.k);
  if (k_quant(type)) return k_scales(type, src, nb, r, signed_levels, s);
  // Q8_0, Q4_0, Q5_0, IQ4_NL: d is the first field of every block; MXFP4's is its E8M0 byte.
  const size_t bb = ggml_row_bytes(type, QK8_0);
  const bool e8m0 = type == GgmlType::MXFP4;
  for (int64_t b = 0; b < nb; ++b)
    s.d[r * nb + b] = e8m0 ? e8m0_to_fp32_half(src[b * bb]) : qdot::load_half(src + b * bb);
}

void zero_row(int64_t nb, int r, TileScratch& s) {
  std::memset(s.levels + r * s.view.k, 0, static_cast<size_t>(s.view.k));
  for (int64_t b = 0; b < nb; ++b) s.d[r * nb + b] = s.dmin[r * nb + b] = 0.0f;
  std::memset(s.sc + r * nb * 16, 0, static_cast<size_t>(nb) * 16 * 4);
  std::memset(s.pairs + r * nb * 8, 0, static_cast<size_t>(nb) * 8 * 4);
}

}  // namespace

GemmIsa gemm_best_isa() {
  static const GemmIsa isa = capped_isa();
  return isa;
}

bool gemm_isa_supported(GemmIsa isa) {
  static const GemmIsa hw = detect_isa();
  if (isa == GemmIsa::None) return true;
  if (isa == GemmIsa::Avx2) return hw != GemmIsa::None;
  return hw == GemmIsa::Avx512Vnni;
}

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::Avx512Vnni:
      return "avx512-vnni";
    case GemmIsa::Avx2:
      return "avx2";
    default:
      return "none";
  }
}

bool gemm_handles(GgmlType t) {
  return gemm_float_handles(t) || t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q5_0 ||
         t == GgmlType::IQ4_NL || t == GgmlType::MXFP4 || k_quant(t);
}

void gemm(GemmIsa isa, const TensorView& w, const uint8_t* xc, size_t x_row_bytes, int64_t n_tokens, float* y,
          ThreadPool& pool) {
  const GgmlType type = w.type();
  if (isa == GemmIsa::None || !gemm_isa_supported(isa))
    throw std::invalid_argument("gemm: ISA not available on this CPU");
  if (!gemm_handles(type)) throw std::invalid_argument("gemm: no kernels for this weight type");
  if (n_tokens <= 0) return;
  if (gemm_float_handles(type)) return gemm_float(w, xc, x_row_bytes, n_tokens, y, pool);
  const int64_t k = w.ne(0), n_out = w.rows();
  const size_t w_row_bytes = w.row_bytes();
  const bool kq = k_quant(type);
  const int64_t nb = k / (kq ? QK_K : QK8_0);
  const int L = lanes_of(isa, n_tokens), R = rows_of(isa);
  const size_t BB = kq ? q8_k_block_bytes(L) : q8_0_block_bytes(L);
  const int64_t n_tiles = (n_tokens + L - 1) / L;

  // Panel: the caller's thread owns it (reused across calls, so decode steps do not allocate).
  thread_local std::vector<uint8_t> panel_buf;
  const size_t tile_bytes = static_cast<size_t>(nb) * BB;
  panel_buf.resize(tile_bytes * static_cast<size_t>(n_tiles) + 64);
  uint8_t* panel = panel_buf.data() + ((64 - reinterpret_cast<uintptr_t>(panel_buf.data()) % 64) % 64);
  pool.parallel_for(n_tiles, [&](int64_t t0, int64_t t1, int) {
    for (int64_t tile = t0; tile < t1; ++tile) {
      uint8_t* pt = panel + tile * tile_bytes;
      std::memset(pt, 0, tile_bytes);
      for (int l = 0; l < L && tile * L + l < n_tokens; ++l) {
        const uint8_t* xt = xc + (tile * L + l) * x_row_bytes;
        if (kq)
          panel_q8_k_token(xt, nb, L, l, pt);
        else
          panel_q8_0_token(xt, nb, L, l, pt);
      }
    }
  });

  const bool signed_levels = isa == GemmIsa::Avx2;
  const int shift = level_shift(type, signed_levels);
  const int64_t n_row_tiles = (n_out + R - 1) / R;
  pool.parallel_for(n_row_tiles, [&](int64_t rt0, int64_t rt1, int) {
    thread_local TileScratch s;
    s.reserve(R, k, nb);
    s.view.offset_shift = shift;
    for (int64_t rt = rt0; rt < rt1; ++rt) {
      const int64_t r0 = rt * R;
      const int n_rows = static_cast<int>(n_out - r0 < R ? n_out - r0 : R);
      for (int r = 0; r < R; ++r) {
        if (r < n_rows)
          unpack_row(type, w.data + (r0 + r) * w_row_bytes, nb, r, signed_levels, s);
        else
          zero_row(nb, r, s);
      }
      for (int64_t tile = 0; tile < n_tiles; ++tile) {
        const int n_tok = static_cast<int>(n_tokens - tile * L < L ? n_tokens - tile * L : L);
        float* yt = y + tile * L * n_out + r0;
        if (isa == GemmIsa::Avx512Vnni)
          tile_avx512_vnni(type, s.view, panel + tile * tile_bytes, nb, L, n_rows, n_tok, yt, n_out);
        else
          tile_avx2(type, s.view, panel + tile * tile_bytes, nb, n_rows, n_tok, yt, n_out);
      }
    }
  });
}

}  // namespace kvscope
