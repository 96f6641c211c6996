// The GEMM kernels (cpu/gemm.h) against the vec-dot path they replace for n_tokens > 1.
//
// What is asserted, for every weight type with kernels, every ISA this CPU runs, odd shapes
// (rows not a multiple of the row tile, 1..17 tokens and more than one token tile) and 1 or 2
// threads:
//   * bit for bit equal to vec_dot_scalar, the reference kernel: the integer sum of every
//     block is exact in both and each block is scaled and added in block order with the same
//     float expression;
//   * bit for bit equal to the SIMD vec_dot for Q4_K / Q6_K (which reduces each super-block
//     exactly too); for Q8_0 / Q4_0 / Q5_0 the SIMD vec_dot keeps 8 float lanes per row and
//     adds the blocks in a different order, so there the bound is the float summation error of
//     the two orders: |gemm - vec_dot| <= (n_blocks + 8) * 2^-23 * sum_i |w_i * x_i|;
//   * thread count and ISA do not change a bit;
//   * matmul() picks the GEMM from kMatmulGemmMinTokens tokens on, the GEMV (cpu/gemv.h,
//     tests/cpu/test_gemv.cpp) for one token of its types, and stays on vec_dot otherwise;
//   * F32 / F16 / BF16 weights (any K, no blocks): bit for bit the sequential fma chain over the
//     widened weight and the ggml-rounded activation, and within the float summation bound
//     |gemm - vec_dot| <= (K + 32) * 2^-24 * sum_i |w_i * x_i| of the 32-lane SIMD vec_dot.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/ffn_activation.h"
#include "cpu/gemm.h"
#include "cpu/gemv.h"
#include "cpu/matmul.h"
#include "cpu/quant_dot.h"
#include "cpu/thread_pool.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf_file.h"

using namespace kvscope;

namespace {

constexpr GgmlType kTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> random_normal(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

bool k_quant(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q6_K; }

// A quantized weight matrix held one byte off alignment (rows sit anywhere in a GGUF file).
struct Weights {
  GgufTensorInfo info;
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;
  TensorView view() const { return TensorView{&info, bytes.data() + 1}; }
  const uint8_t* row(int64_t r) const { return bytes.data() + 1 + r * ggml_row_bytes(info.type(), info.ne[0]); }
};

Weights make_weights(GgmlType t, int64_t in, int64_t out, uint32_t seed) {
  auto wf = random_normal(static_cast<size_t>(in * out), seed, 0.05f);
  // Edge rows: all zero, one huge outlier (block scales far apart), and a constant row.
  if (out > 2) {
    for (int64_t i = 0; i < in; ++i) wf[static_cast<size_t>(in + i)] = 0.0f;
    wf[static_cast<size_t>(2 * in + 5)] = 40.0f;
  }
  if (out > 3)
    for (int64_t i = 0; i < in; ++i) wf[static_cast<size_t>(3 * in + i)] = 0.01f;
  Weights w;
  const size_t rb = ggml_row_bytes(t, in);
  w.bytes.assign(rb * static_cast<size_t>(out) + 1, 0);
  for (int64_t r = 0; r < out; ++r) quantize_row(t, wf.data() + r * in, w.bytes.data() + 1 + r * rb, in);
  if (t == GgmlType::Q8_0) {
    // Level -128 is legal in a file though the quantizer never writes it (it is the AVX2
    // sign trick's corner case): put some into row 0.
    uint8_t* b0 = w.bytes.data() + 1;
    for (int j = 0; j < 32; j += 3) b0[2 + j] = 0x80;
  }
  if (t == GgmlType::Q6_K && out > 4) {
    // Extreme sub-block scales (-128 and 127) in row 4.
    uint8_t* b = w.bytes.data() + 1 + 4 * rb;
    b[offsetof(BlockQ6_K, scales) + 0] = 0x80;
    b[offsetof(BlockQ6_K, scales) + 1] = 0x7F;
  }
  w.info.name = "w";
  w.info.ne = {in, out};
  w.info.raw_type = static_cast<uint32_t>(t);
  w.info.nbytes = rb * static_cast<size_t>(out);
  w.dequant.resize(static_cast<size_t>(in * out));
  for (int64_t r = 0; r < out; ++r) dequantize_row(t, w.row(r), w.dequant.data() + r * in, in);
  return w;
}

std::vector<uint8_t> convert(GgmlType t, const std::vector<float>& x, int64_t in, int64_t n_tokens) {
  const size_t xb = vec_dot_row_bytes(t, in);
  std::vector<uint8_t> xc(xb * static_cast<size_t>(n_tokens));
  for (int64_t k = 0; k < n_tokens; ++k) convert_activations(t, x.data() + k * in, xc.data() + k * xb, in);
  return xc;
}

std::vector<GemmIsa> isas_here() {
  std::vector<GemmIsa> out;
  for (GemmIsa i : {GemmIsa::Avx512Vnni, GemmIsa::Avx2})
    if (gemm_isa_supported(i)) out.push_back(i);
  return out;
}

}  // namespace

class TestGemm : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    const auto isas = isas_here();
    QString names;
    for (GemmIsa i : isas) names += QString(" ") + gemm_isa_name(i);
    qInfo("GEMM kernels on this CPU:%s (matmul uses %s)", isas.empty() ? " none" : qPrintable(names),
          gemm_isa_name(gemm_best_isa()));
  }

  void gemm_matches_vec_dot() {
    const auto isas = isas_here();
    if (isas.empty()) QSKIP("no x86 SIMD GEMM kernels on this CPU");
    ThreadPool one(1), two(2);
    struct Shape {
      int64_t in, out;
    };
    for (GgmlType t : kTypes) {
      const std::vector<Shape> shapes = k_quant(t)
                                            ? std::vector<Shape>{{256, 1}, {256, 13}, {512, 37}, {768, 8}}
                                            : std::vector<Shape>{{32, 1}, {96, 13}, {640, 37}, {256, 8}, {512, 67}};
      for (const Shape s : shapes) {
        const Weights w = make_weights(t, s.in, s.out, static_cast<uint32_t>(s.in * 7 + s.out));
        for (int64_t n_tokens : {1, 2, 3, 5, 8, 9, 15, 16, 17, 33}) {
          auto x = random_normal(static_cast<size_t>(s.in * n_tokens), static_cast<uint32_t>(n_tokens + s.out), 1.5f);
          if (n_tokens > 2)
            for (int64_t i = 0; i < s.in; ++i) x[static_cast<size_t>(s.in + i)] = 0.0f;  // an all-zero token
          const auto xc = convert(t, x, s.in, n_tokens);
          const size_t xb = vec_dot_row_bytes(t, s.in);
          std::vector<float> ref(static_cast<size_t>(s.out * n_tokens));
          std::vector<float> fast(ref.size());
          for (int64_t k = 0; k < n_tokens; ++k)
            for (int64_t r = 0; r < s.out; ++r) {
              ref[static_cast<size_t>(k * s.out + r)] = vec_dot_scalar(t, s.in, w.row(r), xc.data() + k * xb);
              fast[static_cast<size_t>(k * s.out + r)] = vec_dot(t, s.in, w.row(r), xc.data() + k * xb);
            }
          for (GemmIsa isa : isas)
            for (ThreadPool* pool : {&one, &two}) {
              std::vector<float> y(ref.size(), -1.0f);
              gemm(isa, w.view(), xc.data(), xb, n_tokens, y.data(), *pool);
              for (int64_t k = 0; k < n_tokens; ++k)
                for (int64_t r = 0; r < s.out; ++r) {
                  const size_t i = static_cast<size_t>(k * s.out + r);
                  const QString what =
                      QString("%1 %2 %3x%4 tokens %5 threads %6: y[%7][%8] gemm %9 scalar %10 simd %11")
                          .arg(ggml_type_name(uint32_t(t)).c_str())
                          .arg(gemm_isa_name(isa))
                          .arg(s.in)
                          .arg(s.out)
                          .arg(n_tokens)
                          .arg(pool->size())
                          .arg(k)
                          .arg(r)
                          .arg(double(y[i]), 0, 'g', 9)
                          .arg(double(ref[i]), 0, 'g', 9)
                          .arg(double(fast[i]), 0, 'g', 9);
                  if (bits(y[i]) != bits(ref[i])) QFAIL(qPrintable("not bit-equal to vec_dot_scalar: " + what));
                  if (k_quant(t)) {
                    if (bits(y[i]) != bits(fast[i])) QFAIL(qPrintable("not bit-equal to vec_dot: " + what));
                  } else {
                    const auto xd = [&] {
                      std::vector<float> v(static_cast<size_t>(s.in));
                      dequantize_row(vec_dot_type(t), xc.data() + k * xb, v.data(), s.in);
                      return v;
                    }();
                    double mag = 0;
                    for (int64_t j = 0; j < s.in; ++j) mag += std::fabs(double(w.dequant[r * s.in + j]) * xd[j]);
                    const double bound = double(s.in / 32 + 8) * std::ldexp(1.0, -23) * mag;
                    if (std::fabs(double(y[i]) - fast[i]) > bound)
                      QFAIL(qPrintable(QString("beyond %1 of vec_dot: ").arg(bound) + what));
                  }
                }
            }
        }
      }
    }
  }

  void float_gemm_matches_fma_chain() {
    if (!gemm_isa_supported(GemmIsa::Avx2)) QSKIP("no AVX2 on this CPU");
    ThreadPool one(1), two(2);
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16})
      for (const auto& [in, out] : {std::pair<int64_t, int64_t>{7, 3}, {17, 5}, {100, 13}, {640, 37}, {33, 67}}) {
        const Weights w = make_weights(t, in, out, static_cast<uint32_t>(in + out));
        for (int64_t n_tokens : {2, 7, 16, 17, 40}) {
          const auto x = random_normal(static_cast<size_t>(in * n_tokens), static_cast<uint32_t>(n_tokens), 1.5f);
          const auto xc = convert(t, x, in, n_tokens);
          const size_t xb = vec_dot_row_bytes(t, in);
          std::vector<float> xd(static_cast<size_t>(in));
          for (ThreadPool* pool : {&one, &two}) {
            std::vector<float> y(static_cast<size_t>(out * n_tokens), -1.0f), via_matmul(y.size());
            gemm(GemmIsa::Avx2, w.view(), xc.data(), xb, n_tokens, y.data(), *pool);
            matmul(w.view(), x.data(), n_tokens, via_matmul.data(), *pool);
            for (int64_t k = 0; k < n_tokens; ++k) {
              dequantize_row(vec_dot_type(t), xc.data() + k * xb, xd.data(), in);
              for (int64_t r = 0; r < out; ++r) {
                float chain = 0.0f;
                double mag = 0;
                for (int64_t j = 0; j < in; ++j) {
                  chain = std::fma(w.dequant[static_cast<size_t>(r * in + j)], xd[static_cast<size_t>(j)], chain);
                  mag += std::fabs(double(w.dequant[static_cast<size_t>(r * in + j)]) * xd[static_cast<size_t>(j)]);
                }
                const size_t i = static_cast<size_t>(k * out + r);
                const QString what = QString("%1 %2x%3 tokens %4 threads %5 y[%6][%7]: gemm %8 chain %9")
                                         .arg(ggml_type_name(uint32_t(t)).c_str())
                                         .arg(in)
                                         .arg(out)
                                         .arg(n_tokens)
                                         .arg(pool->size())
                                         .arg(k)
                                         .arg(r)
                                         .arg(double(y[i]), 0, 'g', 9)
                                         .arg(double(chain), 0, 'g', 9);
                if (bits(y[i]) != bits(chain)) QFAIL(qPrintable("not the fma chain: " + what));
                if (n_tokens >= kMatmulGemmMinTokens && bits(via_matmul[i]) != bits(chain))
                  QFAIL(qPrintable("matmul did not take the GEMM: " + what));
                const double bound = double(in + 32) * std::ldexp(1.0, -24) * mag;
                if (std::fabs(double(y[i]) - vec_dot(t, in, w.row(r), xc.data() + k * xb)) > bound)
                  QFAIL(qPrintable(QString("beyond %1 of vec_dot: ").arg(bound) + what));
              }
            }
          }
        }
      }
  }

  void matmul_dispatch() {
    // Through matmul(): the f32 activations are converted as for vec-dot, then from
    // kMatmulGemmMinTokens on it goes to the GEMM (bit-equal to vec_dot_scalar), below to vec_dot.
    ThreadPool pool(2);
    const int64_t in = 512, out = 45;
    for (GgmlType t : kTypes) {
      const Weights w = make_weights(t, in, out, 5);
      for (int64_t n_tokens : {1, 2, 4, 9, 19}) {
        const auto x = random_normal(static_cast<size_t>(in * n_tokens), 11, 1.0f);
        std::vector<float> y(static_cast<size_t>(out * n_tokens));
        matmul(w.view(), x.data(), n_tokens, y.data(), pool);
        const auto xc = convert(t, x, in, n_tokens);
        const size_t xb = vec_dot_row_bytes(t, in);
        const bool via_gemm = n_tokens >= kMatmulGemmMinTokens && gemm_best_isa() != GemmIsa::None;
        if (n_tokens == 1 && gemv_handles(t)) {
          std::vector<float> want(y.size());
          gemv(w.view(), xc.data(), want.data(), pool);
          for (int64_t r = 0; r < out; ++r)
            QCOMPARE(bits(y[static_cast<size_t>(r)]), bits(want[static_cast<size_t>(r)]));
          continue;
        }
        for (int64_t k = 0; k < n_tokens; ++k)
          for (int64_t r = 0; r < out; ++r) {
            const float want = via_gemm ? vec_dot_scalar(t, in, w.row(r), xc.data() + k * xb)
                                        : vec_dot(t, in, w.row(r), xc.data() + k * xb);
            QCOMPARE(bits(y[static_cast<size_t>(k * out + r)]), bits(want));
          }
      }
    }
  }

  void activation_rounding_matches_scalar() {
    // The AVX-512 Q8_0 / Q8_K activation quantizers against the scalar rounding, byte for byte.
    const int64_t n = 256 * 6;
    std::vector<float> x = random_normal(static_cast<size_t>(n), 3, 2.0f);
    for (int i = 0; i < 256; ++i) x[static_cast<size_t>(256 + i)] = 0.0f;                         // an all-zero block
    for (int i = 0; i < 256; ++i) x[static_cast<size_t>(512 + i)] = float(i % 255 - 127) + 0.5f;  // ties
    x[512 + 7] = 127.0f;
    x[768 + 3] = -50.0f;  // +-amax twice: the first one sets the Q8_K sign
    x[768 + 200] = 50.0f;
    x[1024 + 1] = std::numeric_limits<float>::quiet_NaN();
    x[1280 + 9] = std::numeric_limits<float>::infinity();
    x[1280 + 40] = 1e-40f;  // subnormal
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
      std::vector<uint8_t> fast(vec_dot_row_bytes(t, n)), ref(fast.size());
      convert_activations(t, x.data(), fast.data(), n);
      convert_activations_scalar(t, x.data(), ref.data(), n);
      QVERIFY2(fast == ref, ggml_type_name(uint32_t(vec_dot_type(t))).c_str());
    }
  }

  void ffn_activation_is_accurate() {
    // The prefill's other hot loop (cpu/ffn_activation.h): against float64 silu / tanh-GELU,
    // over ordinary and extreme inputs (odd length: the scalar tail runs too).
    std::vector<float> x;
    for (int i = -2000; i <= 2000; ++i) x.push_back(float(i) * 0.01f);
    for (float v : {-1e30f, -200.0f, -88.0f, -30.0f, -9.0f, 9.0f, 30.0f, 88.0f, 200.0f, 1e30f, 1e-30f, -1e-30f, 0.0f})
      x.push_back(v);
    const std::vector<float> up(x.size(), 1.0f);
    for (FfnActivation act : {FfnActivation::Silu, FfnActivation::GeluTanh}) {
      std::vector<float> g = x;
      ffn_activation_mul(act, g.data(), up.data(), static_cast<int64_t>(g.size()));
      for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        const double want = act == FfnActivation::Silu
                                ? v / (1.0 + std::exp(-v))
                                : v / (1.0 + std::exp(-2.0 * 0.79788456080286535588 *
                                                      (v + 0.044715 * v * v * v)));  // = 0.5 v (1 + tanh u)
        const double err = std::fabs(double(g[i]) - want);
        // The exp argument z (x, or 2u for GELU) is itself computed in f32 (u: ~6 roundings of
        // 2^-24), so exp(z) cannot be closer than ~6 |z| 2^-24 relative.
        const double z = act == FfnActivation::Silu ? v : 2.0 * 0.79788456080286535588 * (v + 0.044715 * v * v * v);
        // Without AVX-512 the scalar tanh form runs: 1 + tanh(u) is rounded to ~2^-24 absolute
        // before the product, so the negative tail keeps only 0.5 |x| 2^-23 absolute accuracy.
        const double tail =
            act == FfnActivation::GeluTanh && !ffn_activation_vectorised() ? 0.5 * std::fabs(v) * 0x1p-23 : 0.0;
        if (!(err <= (4e-7 + 4e-7 * std::fmin(std::fabs(z), 90.0)) * std::fabs(want) + 1e-30 + tail))
          QFAIL(qPrintable(QString("act %1 x=%2: got %3 want %4")
                               .arg(int(act))
                               .arg(double(x[i]), 0, 'g', 9)
                               .arg(double(g[i]), 0, 'g', 9)
                               .arg(want, 0, 'g', 9)));
      }
    }
  }

  void bad_input_is_refused() {
    ThreadPool pool(1);
    const Weights w = make_weights(GgmlType::Q4_1, 64, 3, 1);
    std::vector<uint8_t> xc(vec_dot_row_bytes(GgmlType::Q4_1, 64) * 2);
    std::vector<float> y(6);
    QVERIFY(!gemm_handles(GgmlType::Q4_1));
    for (GemmIsa isa : {GemmIsa::None, GemmIsa::Avx2, GemmIsa::Avx512Vnni})
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gemm(isa, w.view(), xc.data(), xc.size() / 2, 2, y.data(), pool));
  }
};

QTEST_APPLESS_MAIN(TestGemm)
#include "test_gemm.moc"
