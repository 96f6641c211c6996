// The dot kernels, GEMM, GEMV and matmul of the 2-, 3- and non-linear 4-bit weight types (Q2_K,
// Q3_K, IQ4_XS against Q8_K activations, IQ4_NL and MXFP4 against Q8_0), on random blocks: random
// bytes with finite f16 scales (MXFP4: E8M0 scales 2^-8 .. 2^7, far from float's limits), so every
// level, scale and min pattern shows up, including Q3_K / IQ4_XS scales of -32 and 31 and Q8_K
// activation levels of -128.
//
// Asserted, per type:
//   * vec_dot_scalar is the exact dot of the dequantized weights and activations up to float
//     rounding: |scalar - exact| <= (n_blocks + 8) * 2^-20 * sum_i |w_i * x_i| (the kernel
//     rounds once per block; the slack covers Q2_K's d * q - dmin * m cancellation);
//   * the SIMD vec_dot equals vec_dot_scalar bit for bit for the Q8_K types (both reduce each
//     super-block to one int32); IQ4_NL's and MXFP4's are Q8_0-family kernels with 2 x 8 float lanes, within
//     the float summation bound (n_blocks + 8) * 2^-23 * sum_i |w_i * x_i| of it;
//   * the GEMM of every ISA this CPU runs equals vec_dot_scalar bit for bit, for odd row counts,
//     1..33 tokens and 1 or 3 threads; matmul() gives the GEMM's bits from kMatmulGemmMinTokens
//     tokens on and vec_dot's (or, for IQ4_NL and MXFP4 on AVX-512 VNNI, the GEMV's) below;
//   * IQ4_NL's and MXFP4's GEMV equals vec_dot bit for bit (where vec_dot is the AVX2 kernel), stays within
//     the summation bound of the scalar kernel and so of the GEMM, and matmul_shared_input gives
//     the GEMV's bits.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemv.h"
#include "cpu/matmul.h"
#include "cpu/quant_dot.h"
#include "cpu/thread_pool.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf_file.h"

using namespace kvscope;

namespace {

constexpr GgmlType kTypes[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

// Types paired with Q8_0 activations, whose SIMD dot keeps 2 x 8 float lanes.
bool q8_0_family(GgmlType t) { return t == GgmlType::IQ4_NL || t == GgmlType::MXFP4; }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Byte offsets of a block's f16 fields (ggml-common.h layouts).
std::vector<size_t> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q2_K:
      return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case GgmlType::Q3_K:
      return {offsetof(BlockQ3_K, d)};
    case GgmlType::MXFP4:
      return {};  // its scale is one E8M0 byte (random_weights)
    default:
      return {0};  // IQ4_NL, IQ4_XS: d first
  }
}

// A weight matrix of random blocks, held one byte off alignment (rows sit anywhere in a file).
struct Weights {
  GgufTensorInfo info;
  std::vector<uint8_t> bytes;
  TensorView view() const { return TensorView{&info, bytes.data() + 1}; }
  const uint8_t* row(int64_t r) const { return bytes.data() + 1 + r * ggml_row_bytes(info.type(), info.ne[0]); }
};

Weights random_weights(GgmlType t, int64_t in, int64_t out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> scale(0.0f, 0.01f);
  const GgmlTypeInfo ti = ggml_type_info(t);
  const size_t rb = ggml_row_bytes(t, in);
  Weights w;
  w.bytes.resize(rb * static_cast<size_t>(out) + 1);
  for (auto& b : w.bytes) b = static_cast<uint8_t>(rng() & 0xFF);
  const size_t n_blocks = rb * static_cast<size_t>(out) / ti.block_bytes;
  for (size_t b = 0; b < n_blocks; ++b)
    for (size_t off : half_fields(t)) {
      const uint16_t h = fp32_to_fp16(scale(rng));
      std::memcpy(w.bytes.data() + 1 + b * ti.block_bytes + off, &h, 2);
    }
  if (t == GgmlType::MXFP4)
    for (size_t b = 0; b < n_blocks; ++b) w.bytes[1 + b * ti.block_bytes] = static_cast<uint8_t>(120 + rng() % 16);
  w.info.name = "w";
  w.info.ne = {in, out};
  w.info.raw_type = static_cast<uint32_t>(t);
  w.info.nbytes = rb * static_cast<size_t>(out);
  return w;
}

std::vector<float> random_normal(size_t n, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> convert(GgmlType t, const std::vector<float>& x, int64_t in, int64_t n_tokens) {
  const size_t xb = vec_dot_row_bytes(t, in);
  std::vector<uint8_t> xc(xb * static_cast<size_t>(n_tokens));
  for (int64_t k = 0; k < n_tokens; ++k) convert_activations(t, x.data() + k * in, xc.data() + k * xb, in);
  return xc;
}

int64_t block_elems(GgmlType t) { return ggml_type_info(t).block_elems; }

// An IQ4_NL or MXFP4 GEMV result y for row r: vec_dot's bits where vec_dot is the AVX2 kernel, and always
// within the 2 x 8-lane summation bound of vec_dot_scalar, whose bits the GEMM returns (checked
// in gemm_and_matmul_match_scalar): the one-token and the batched path agree.
bool gemv_agrees(const Weights& w, int64_t r, const std::vector<uint8_t>& xc, float y, bool simd_vec_dot) {
  const GgmlType t = w.info.type();
  const int64_t in = w.info.ne[0];
  if (simd_vec_dot && bits(y) != bits(vec_dot(t, in, w.row(r), xc.data()))) return false;
  std::vector<float> wd(static_cast<size_t>(in)), xd(static_cast<size_t>(in));
  dequantize_row(t, w.row(r), wd.data(), in);
  dequantize_row(vec_dot_type(t), xc.data(), xd.data(), in);
  double mag = 0;
  for (int64_t i = 0; i < in; ++i) mag += std::fabs(double(wd[i]) * xd[i]);
  const double bound = double(in / QK4_NL + 8) * std::ldexp(1.0, -23) * mag;
  return std::fabs(double(y) - vec_dot_scalar(t, in, w.row(r), xc.data())) <= bound;
}

QString label(GgmlType t, int64_t in, int64_t out) {
  return QString("%1 %2x%3").arg(ggml_type_name(uint32_t(t)).c_str()).arg(in).arg(out);
}

}  // namespace

class TestLowBitQuants : public QObject {
  Q_OBJECT

 private slots:
  void types_are_supported() {
    for (GgmlType t : kTypes) {
      QVERIFY(ggml_type_supported(t));
      QCOMPARE(vec_dot_type(t), q8_0_family(t) ? GgmlType::Q8_0 : GgmlType::Q8_K);
    }
  }

  void vec_dot_matches_dequantized_dot() {
    for (GgmlType t : kTypes)
      for (int64_t in : {256, 512, 2048}) {
        const int64_t out = 7;
        const Weights w = random_weights(t, in, out, static_cast<uint32_t>(in + int(t)));
        const auto x = random_normal(static_cast<size_t>(in), static_cast<uint32_t>(in), 2.0f);
        const auto xc = convert(t, x, in, 1);
        std::vector<float> xd(static_cast<size_t>(in)), wd(static_cast<size_t>(in));
        dequantize_row(vec_dot_type(t), xc.data(), xd.data(), in);
        for (int64_t r = 0; r < out; ++r) {
          dequantize_row(t, w.row(r), wd.data(), in);
          double exact = 0, mag = 0;
          for (int64_t i = 0; i < in; ++i) {
            exact += double(wd[i]) * xd[i];
            mag += std::fabs(double(wd[i]) * xd[i]);
          }
          const float scalar = vec_dot_scalar(t, in, w.row(r), xc.data());
          const float fast = vec_dot(t, in, w.row(r), xc.data());
          const double bound = double(in / block_elems(t) + 8) * std::ldexp(1.0, -20) * mag;
          const double lanes_bound = double(in / block_elems(t) + 8) * std::ldexp(1.0, -23) * mag;
          const QString what = label(t, in, out) + QString(" row %1: scalar %2 exact %3 simd %4")
                                                       .arg(r)
                                                       .arg(double(scalar), 0, 'g', 9)
                                                       .arg(exact, 0, 'g', 9)
                                                       .arg(double(fast), 0, 'g', 9);
          QVERIFY2(mag > 0, qPrintable(what));
          QVERIFY2(std::fabs(scalar - exact) <= bound, qPrintable(what));
          if (q8_0_family(t))
            QVERIFY2(std::fabs(double(fast) - scalar) <= lanes_bound, qPrintable("simd beyond bound: " + what));
          else
            QVERIFY2(bits(fast) == bits(scalar), qPrintable("simd != scalar: " + what));
        }
      }
  }

  void gemm_and_matmul_match_scalar() {
    std::vector<GemmIsa> isas;
    for (GemmIsa i : {GemmIsa::Avx512Vnni, GemmIsa::Avx2})
      if (gemm_isa_supported(i) && gemm_handles(GgmlType::Q2_K)) isas.push_back(i);
    ThreadPool one(1), three(3);
    for (GgmlType t : kTypes)
      for (auto [in, out] : {std::pair<int64_t, int64_t>{256, 1}, {256, 13}, {512, 37}, {768, 8}}) {
        const Weights w = random_weights(t, in, out, static_cast<uint32_t>(in * 7 + out));
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9, 16, 17, 33}) {
          const auto x = random_normal(static_cast<size_t>(in * n_tokens), static_cast<uint32_t>(n_tokens), 1.5f);
          const auto xc = convert(t, x, in, n_tokens);
          const size_t xb = vec_dot_row_bytes(t, in);
          std::vector<float> ref(static_cast<size_t>(out * n_tokens)), fast(ref.size());
          for (int64_t k = 0; k < n_tokens; ++k)
            for (int64_t r = 0; r < out; ++r) {
              ref[static_cast<size_t>(k * out + r)] = vec_dot_scalar(t, in, w.row(r), xc.data() + k * xb);
              fast[static_cast<size_t>(k * out + r)] = vec_dot(t, in, w.row(r), xc.data() + k * xb);
            }
          const bool via_gemm = n_tokens >= kMatmulGemmMinTokens && gemm_best_isa() != GemmIsa::None;
          // One IQ4_NL or MXFP4 token goes to the GEMV where the CPU has it (its own test is below).
          std::vector<float> below_gemm = fast;
          if (n_tokens == 1 && gemv_handles(t)) gemv(w.view(), xc.data(), below_gemm.data(), one);
          // The first difference from `want`, or an empty string.
          auto mismatch = [&](const std::vector<float>& y, const QString& path, const std::vector<float>& want) {
            for (size_t i = 0; i < want.size(); ++i)
              if (bits(y[i]) != bits(want[i]))
                return label(t, in, out) + QString(" %1 tokens %2: y[%3] %4 != expected %5")
                                               .arg(n_tokens)
                                               .arg(path)
                                               .arg(i)
                                               .arg(double(y[i]), 0, 'g', 9)
                                               .arg(double(want[i]), 0, 'g', 9);
            return QString();
          };
          for (ThreadPool* pool : {&one, &three}) {
            const QString th = QString(" threads %1").arg(pool->size());
            for (GemmIsa isa : isas) {
              std::vector<float> y(ref.size(), -1.0f);
              gemm(isa, w.view(), xc.data(), xb, n_tokens, y.data(), *pool);
              const QString bad = mismatch(y, QString("gemm ") + gemm_isa_name(isa) + th, ref);
              if (!bad.isEmpty()) QFAIL(qPrintable(bad));
            }
            std::vector<float> y(ref.size(), -1.0f);
            matmul(w.view(), x.data(), n_tokens, y.data(), *pool);
            const QString bad = mismatch(y, "matmul" + th, via_gemm ? ref : below_gemm);
            if (!bad.isEmpty()) QFAIL(qPrintable(bad));
          }
        }
      }
  }

  void gemm_handles_the_types_where_it_has_kernels() {
    if (gemm_best_isa() == GemmIsa::None) QSKIP("no SIMD GEMM on this CPU");
    for (GgmlType t : kTypes) QVERIFY2(gemm_handles(t), ggml_type_name(uint32_t(t)).c_str());
  }

  void q8_0_family_gemv_matches_vec_dot() {
    if (!gemv_handles(GgmlType::IQ4_NL)) QSKIP("no AVX-512 VNNI GEMV on this CPU");
      // The GEMV has vec_dot's bits where vec_dot is the AVX2 kernel (a native build); a portable
      // build's vec_dot is the scalar kernel, and there the summation bound applies instead.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    const bool simd_vec_dot = true;
#else
    const bool simd_vec_dot = false;
#endif
    ThreadPool one(1), three(3);
    for (GgmlType t : {GgmlType::IQ4_NL, GgmlType::MXFP4})
      for (auto [in, out] : {std::pair<int64_t, int64_t>{32, 1}, {96, 13}, {640, 37}, {4096, 67}}) {
        const Weights a = random_weights(t, in, out, static_cast<uint32_t>(in + out));
        const Weights b = random_weights(t, in, out + 2, static_cast<uint32_t>(in * 3 + out));
        const auto x = random_normal(static_cast<size_t>(in), static_cast<uint32_t>(out), 1.0f);
        const auto xc = convert(t, x, in, 1);
        for (ThreadPool* pool : {&one, &three}) {
          std::vector<float> ya(static_cast<size_t>(out)), yb(static_cast<size_t>(out + 2)), ma(ya.size()),
              mb(yb.size());
          gemv(a.view(), xc.data(), ya.data(), *pool);
          gemv(b.view(), xc.data(), yb.data(), *pool);
          const TensorView va = a.view(), vb = b.view();
          const MatmulTarget targets[] = {{&va, ma.data()}, {&vb, mb.data()}};
          matmul_shared_input(targets, x.data(), 1, *pool);
          for (int64_t r = 0; r < out + 2; ++r) {
            const QString what = label(t, in, out) + QString(" row %1 threads %2").arg(r).arg(pool->size());
            QVERIFY2(bits(mb[r]) == bits(yb[r]), qPrintable("shared input != gemv: " + what));
            QVERIFY2(gemv_agrees(b, r, xc, yb[r], simd_vec_dot), qPrintable(what));
            if (r >= out) continue;
            QVERIFY2(bits(ma[r]) == bits(ya[r]), qPrintable("shared input != gemv: " + what));
            QVERIFY2(gemv_agrees(a, r, xc, ya[r], simd_vec_dot), qPrintable(what));
          }
        }
      }
  }
};

QTEST_APPLESS_MAIN(TestLowBitQuants)
#include "test_low_bit_quants.moc"
