// The one-token GEMV (cpu/gemv.h) against the vec-dot loop it replaces in decode.
//
// What is asserted, for Q8_0 / Q4_0 / Q5_0, even and odd block counts (the odd one's last
// block takes the tail path), row counts around the 4-row pass and the 64-row pool chunk, and
// 1 or 2 threads:
//   * where quant_dot_simd.cpp's AVX2 kernels are the vec_dot (a build for an AVX2 + FMA + F16C
//     target, e.g. the native build here): bit for bit equal to vec_dot, which is what keeps
//     decode's logits unchanged;
//   * always: |gemv - vec_dot_scalar| <= (n_blocks + 8) * 2^-23 * sum_i |w_i * x_i|, the float
//     summation bound between the scalar kernel's block order and the 2 x 8-lane order (the
//     same bound tests/cpu/test_gemm.cpp uses between those two orders), since a portable build's
//     vec_dot is the scalar kernel;
//   * the thread count does not change a bit; matmul() of one token gives gemv's bits;
//   * matmul_shared_input (Q, K, V in one pool call) gives each matmul()'s bits.
// The weights carry the corner cases: level -128 in a Q8_0 block (legal in a file, never
// written by the quantizer), an all-zero row, a huge outlier and a constant row.
#include <QtTest/QtTest>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/gemv.h"
#include "cpu/matmul.h"
#include "cpu/quant_dot.h"
#include "cpu/thread_pool.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf_file.h"

using namespace kvscope;

namespace {

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

// A quantized matrix one byte off alignment (rows sit anywhere in a GGUF file), sized exactly
// (the last row ends at the end of the buffer, as it can at the end of a mapped file).
struct Weights {
  GgufTensorInfo info;
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;
  TensorView view() const { return TensorView{&info, bytes.data() + 1}; }
  const uint8_t* row(int64_t r) const { return bytes.data() + 1 + r * ggml_row_bytes(info.type(), info.ne[0]); }
};

Weights make_weights(GgmlType t, int64_t in, int64_t out, uint32_t seed) {
  auto wf = random_normal(static_cast<size_t>(in * out), seed, 0.05f);
  if (out > 3) {
    for (int64_t i = 0; i < in; ++i) wf[static_cast<size_t>(in + i)] = 0.0f;
    wf[static_cast<size_t>(2 * in + 5)] = 40.0f;
    for (int64_t i = 0; i < in; ++i) wf[static_cast<size_t>(3 * in + i)] = 0.01f;
  }
  Weights w;
  const size_t rb = ggml_row_bytes(t, in);
  w.bytes.assign(rb * static_cast<size_t>(out) + 1, 0);
  for (int64_t r = 0; r < out; ++r) quantize_row(t, wf.data() + r * in, w.bytes.data() + 1 + r * rb, in);
  if (t == GgmlType::Q8_0)
    for (int j = 0; j < 32; j += 3) w.bytes[1 + 2 + static_cast<size_t>(j)] = 0x80;
  w.info.name = "w";
  w.info.ne = {in, out};
  w.info.raw_type = static_cast<uint32_t>(t);
  w.info.nbytes = rb * static_cast<size_t>(out);
  w.dequant.resize(static_cast<size_t>(in * out));
  for (int64_t r = 0; r < out; ++r) dequantize_row(t, w.row(r), w.dequant.data() + r * in, in);
  return w;
}

}  // namespace

class TestGemv : public QObject {
  Q_OBJECT

 private slots:
  void gemv_matches_vec_dot() {
    if (!gemv_handles(GgmlType::Q8_0)) QSKIP("no AVX-512 VNNI on this CPU (or KVSCOPE_GEMV=off)");
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    const bool simd_vec_dot = true;
#else
    const bool simd_vec_dot = false;
#endif
    qInfo("vec_dot here is the %s kernel", simd_vec_dot ? "AVX2 (bit-equality checked)" : "scalar (bound checked)");
    ThreadPool one(1), two(2);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q5_0})
      for (int64_t in : {32, 64, 96, 640, 768, 2080})
        for (int64_t out : {1, 3, 4, 5, 8, 9, 13, 67, 133}) {
          const Weights w = make_weights(t, in, out, static_cast<uint32_t>(in * 7 + out));
          const auto x = random_normal(static_cast<size_t>(in), static_cast<uint32_t>(in + out), 1.5f);
          std::vector<uint8_t> xc(vec_dot_row_bytes(t, in));
          convert_activations(t, x.data(), xc.data(), in);
          std::vector<float> xd(static_cast<size_t>(in));
          dequantize_row(vec_dot_type(t), xc.data(), xd.data(), in);
          std::vector<float> y1(static_cast<size_t>(out), -1.0f), y2(y1.size(), -2.0f), via_matmul(y1.size());
          gemv(w.view(), xc.data(), y1.data(), one);
          gemv(w.view(), xc.data(), y2.data(), two);
          matmul(w.view(), x.data(), 1, via_matmul.data(), two);
          for (int64_t r = 0; r < out; ++r) {
            const size_t i = static_cast<size_t>(r);
            const float fast = vec_dot(t, in, w.row(r), xc.data());
            const float ref = vec_dot_scalar(t, in, w.row(r), xc.data());
            const QString what = QString("%1 %2x%3 row %4: gemv %5 vec_dot %6 scalar %7")
                                     .arg(ggml_type_name(uint32_t(t)).c_str())
                                     .arg(in)
                                     .arg(out)
                                     .arg(r)
                                     .arg(double(y1[i]), 0, 'g', 9)
                                     .arg(double(fast), 0, 'g', 9)
                                     .arg(double(ref), 0, 'g', 9);
            if (bits(y1[i]) != bits(y2[i])) QFAIL(qPrintable("1 and 2 threads differ: " + what));
            if (bits(via_matmul[i]) != bits(y1[i])) QFAIL(qPrintable("matmul did not take the GEMV: " + what));
            if (simd_vec_dot && bits(y1[i]) != bits(fast)) QFAIL(qPrintable("not bit-equal to vec_dot: " + what));
            double mag = 0;
            for (int64_t j = 0; j < in; ++j)
              mag += std::fabs(double(w.dequant[static_cast<size_t>(r * in + j)]) * xd[static_cast<size_t>(j)]);
            const double bound = double(in / 32 + 8) * std::ldexp(1.0, -23) * mag;
            if (std::fabs(double(y1[i]) - ref) > bound)
              QFAIL(qPrintable(QString("beyond %1 of vec_dot_scalar: ").arg(bound) + what));
          }
        }
  }

  void shared_input_matches_one_by_one() {
    // Q, K, V (or gate, up) in one call, mixed types and row counts as in gemma's layers, plus a
    // K-quant target that sends the whole call down the one-by-one path: every output is
    // bit-equal to matmul() on that weight alone, for 1 token (fused) and 3 (not fused).
    // One thread runs the whole call as one chunk range spanning every target; two threads
    // claim ranges that cross from one target into the next (36 units of 64 rows, 32 claims).
    ThreadPool one(1), two(2);
    const int64_t in = 640;
    const Weights wq = make_weights(GgmlType::Q5_0, in, 2100, 1), wk = make_weights(GgmlType::Q8_0, in, 67, 2),
                  wv = make_weights(GgmlType::Q4_0, in, 5, 3), wkq = make_weights(GgmlType::Q4_K, in, 9, 4);
    for (ThreadPool* pool : {&one, &two})
      for (bool with_k_quant : {false, true})
        for (int64_t n_tokens : {1, 3}) {
          const auto x = random_normal(static_cast<size_t>(in * n_tokens), 9, 1.0f);
          std::vector<const Weights*> ws = {&wq, &wk, &wv};
          if (with_k_quant) ws.push_back(&wkq);
          std::vector<TensorView> views;
          for (const Weights* w : ws) views.push_back(w->view());
          std::vector<std::vector<float>> got, want;
          std::vector<MatmulTarget> targets;
          for (size_t i = 0; i < ws.size(); ++i) {
            got.emplace_back(static_cast<size_t>(views[i].rows() * n_tokens), -1.0f);
            want.emplace_back(got.back().size());
          }
          for (size_t i = 0; i < ws.size(); ++i) targets.push_back({&views[i], got[i].data()});
          matmul_shared_input(targets, x.data(), n_tokens, *pool);
          for (size_t i = 0; i < ws.size(); ++i) {
            matmul(views[i], x.data(), n_tokens, want[i].data(), *pool);
            for (size_t j = 0; j < want[i].size(); ++j)
              if (bits(got[i][j]) != bits(want[i][j]))
                QFAIL(qPrintable(QString("target %1 tokens %2 k-quant %3: y[%4] %5 vs %6")
                                     .arg(i)
                                     .arg(n_tokens)
                                     .arg(with_k_quant)
                                     .arg(j)
                                     .arg(double(got[i][j]), 0, 'g', 9)
                                     .arg(double(want[i][j]), 0, 'g', 9)));
          }
        }
  }

  void other_types_stay_on_vec_dot() {
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K})
      QVERIFY(!gemv_handles(t));
  }
};

QTEST_APPLESS_MAIN(TestGemv)
#include "test_gemv.moc"
