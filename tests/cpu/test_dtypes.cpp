// Element types: half/bfloat conversions, quantize/dequantize error bounds, agreement with the
// files llama-quantize wrote, SIMD vs scalar dot kernels, and the threaded matmul.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/quant_dot.h"
#include "cpu/thread_pool.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf_file.h"
#include "test_support.h"

#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

using namespace kvscope;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantize(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(ggml_row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> dequantize(GgmlType t, const uint8_t* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(t, data, out.data(), n);
  return out;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / v.size());
}
double rms_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / a.size());
}

std::filesystem::path synth(const std::string& name) {
  return kvscope::test::models_dir() / "synthetic" / ("synth-llama-" + name + ".gguf");
}

std::vector<float> tensor_f32(const GgufFile& f, const GgufTensorInfo& t) {
  return dequantize(t.type(), f.view(t).data, t.n_elements());
}

// Quantization step that applies to each value of a K-quant block (d * sub-block scale).
std::vector<float> k_quant_steps(GgmlType t, const uint8_t* block) {
  std::vector<float> steps(QK_K);
  if (t == GgmlType::Q6_K) {
    BlockQ6_K b;
    std::memcpy(&b, block, sizeof b);
    for (int i = 0; i < QK_K; ++i) steps[i] = std::fabs(fp16_to_fp32(b.d) * b.scales[i / 16]);
  } else {
    BlockQ4_K b;
    std::memcpy(&b, block, sizeof b);
    for (int j = 0; j < 8; ++j) {
      const int sc = j < 4 ? (b.scales[j] & 63) : ((b.scales[j + 4] & 0xF) | ((b.scales[j - 4] >> 6) << 4));
      for (int l = 0; l < 32; ++l) steps[32 * j + l] = fp16_to_fp32(b.d) * sc;
    }
  }
  return steps;
}

constexpr GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                     GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                     GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Q4_1 / Q5_1 dots take the min term as m * s, where the activation block's s = f16(d * sum(q))
// is rounded on its own (as ggml does), not as d_f16 * sum(q) as the dequantized oracle has it.
// Returns what to add to the dequantized oracle to account for that.
double q8_1_min_term_correction(GgmlType t, const uint8_t* w, const uint8_t* xc, int64_t n) {
  if (t != GgmlType::Q4_1 && t != GgmlType::Q5_1) return 0.0;
  const size_t bw = ggml_type_info(t).block_bytes;
  double corr = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t m;
    std::memcpy(&m, w + b * bw + 2, 2);  // both blocks are {d, m, ...}
    BlockQ8_1 x;
    std::memcpy(&x, xc + b * sizeof(BlockQ8_1), sizeof x);
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += x.qs[i];
    corr += double(fp16_to_fp32(m)) * (double(fp16_to_fp32(x.s)) - double(fp16_to_fp32(x.d)) * sum);
  }
  return corr;
}

// Types ggml defines that kvscope refuses by name (no dequantizer, no dot kernel).
constexpr GgmlType kRefusedTypes[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_XXS,
                                      GgmlType::IQ1_S,   GgmlType::IQ3_S,  GgmlType::IQ2_S,
                                      GgmlType::IQ1_M,   GgmlType::TQ1_0,  GgmlType::TQ2_0};

// Optional directory of files llama-quantize wrote from synth-llama-f32 in the types that
// ../shared/models/synthetic lacks (tests/tools/make_quant_refs.py writes them).
std::filesystem::path quant_ref_dir() {
  const char* d = std::getenv("KVSCOPE_QUANT_REF_DIR");
  return d ? std::filesystem::path(d) : std::filesystem::path();
}

}  // namespace

class TestDtypes : public QObject {
  Q_OBJECT

 private slots:
  void type_table() {
    QCOMPARE(std::string(ggml_type_info(GgmlType::Q4_K).name), std::string("q4_K"));
    QCOMPARE(ggml_type_info(GgmlType::Q6_K).block_bytes, sizeof(BlockQ6_K));
    QCOMPARE(ggml_type_info(GgmlType::IQ2_XXS).block_bytes, size_t{66});
    QVERIFY(!ggml_type_info(GgmlType::IQ2_XXS).supported);
    QCOMPARE(ggml_type_name(4), std::string("unknown type 4"));  // removed q4_2
    QCOMPARE(ggml_type_name(77), std::string("unknown type 77"));
    QCOMPARE(ggml_type_info(1000u).block_elems, int64_t{0});
    QCOMPARE(ggml_row_bytes(GgmlType::Q8_0, 64), size_t{68});
    QCOMPARE(ggml_row_bytes(GgmlType::BF16, 3), size_t{6});
    for (GgmlType t : kWeightTypes) QVERIFY(ggml_type_supported(t));
    QCOMPARE(ggml_type_info(GgmlType::Q5_K).block_bytes, sizeof(BlockQ5_K));
    QCOMPARE(ggml_type_info(GgmlType::Q5_0).block_bytes, sizeof(BlockQ5_0));
    QCOMPARE(ggml_type_info(GgmlType::Q5_1).block_bytes, sizeof(BlockQ5_1));
    QCOMPARE(ggml_type_info(GgmlType::Q4_1).block_bytes, sizeof(BlockQ4_1));
    QCOMPARE(ggml_type_info(GgmlType::Q8_1).block_bytes, sizeof(BlockQ8_1));
    QVERIFY(!ggml_type_supported(GgmlType::Q8_1));  // activations only, never a weight
  }

  void unsupported_types_are_refused_by_name() {
    std::vector<float> x(256, 1.0f), y(256);
    std::vector<uint8_t> buf(1024);
    for (GgmlType t : kRefusedTypes) {
      const std::string name = ggml_type_name(uint32_t(t));
      QVERIFY(!ggml_type_supported(t));
      QVERIFY(name.find("unknown") == std::string::npos);
      auto says_name = [&](auto fn) {
        try {
          fn();
        } catch (const std::invalid_argument& e) { return std::string(e.what()).find(name) != std::string::npos; }
        return false;
      };
      QVERIFY2(says_name([&] { dequantize_row(t, buf.data(), y.data(), 256); }), name.c_str());
      QVERIFY2(says_name([&] { quantize_row(t, x.data(), buf.data(), 256); }), name.c_str());
      QVERIFY2(says_name([&] { (void)vec_dot_type(t); }), name.c_str());
    }
  }

  // Bit layouts written out by hand: a wrong nibble or fifth-bit position shows up here even if
  // quantize and dequantize agree with each other.
  void q5_layouts_by_hand() {
    BlockQ5_0 b0{};
    b0.d = fp32_to_fp16(0.5f);
    b0.qs[0] = 0x3A;   // element 0: low nibble 0xA, element 16: high nibble 0x3
    b0.qh[0] = 0x01;   // fifth bit of element 0
    b0.qh[2] = 0x01;   // fifth bit of element 16
    b0.qs[15] = 0x0F;  // element 15: 0xF, no fifth bit; element 31: 0
    auto y = dequantize(GgmlType::Q5_0, reinterpret_cast<const uint8_t*>(&b0), 32);
    QCOMPARE(y[0], (0x1A - 16) * 0.5f);
    QCOMPARE(y[16], (0x13 - 16) * 0.5f);
    QCOMPARE(y[15], (0x0F - 16) * 0.5f);
    QCOMPARE(y[31], -16 * 0.5f);

    BlockQ5_1 b1{};
    b1.d = fp32_to_fp16(2.0f);
    b1.m = fp32_to_fp16(-1.0f);
    b1.qs[1] = 0xF2;
    b1.qh[3] = 0x80;  // bit 31: element 31
    b1.qs[15] = 0x10;
    y = dequantize(GgmlType::Q5_1, reinterpret_cast<const uint8_t*>(&b1), 32);
    QCOMPARE(y[1], 2 * 2.0f - 1.0f);
    QCOMPARE(y[17], 15 * 2.0f - 1.0f);
    QCOMPARE(y[31], (16 + 1) * 2.0f - 1.0f);

    BlockQ4_1 b4{};
    b4.d = fp32_to_fp16(0.25f);
    b4.m = fp32_to_fp16(3.0f);
    b4.qs[2] = 0x9C;
    y = dequantize(GgmlType::Q4_1, reinterpret_cast<const uint8_t*>(&b4), 32);
    QCOMPARE(y[2], 12 * 0.25f + 3.0f);
    QCOMPARE(y[18], 9 * 0.25f + 3.0f);

    // Q5_K: scale 1 / min 0 for every sub-block; qh byte l bit j is the fifth bit of value l of
    // sub-block j (low nibbles of chunk j/2 for even j, high nibbles for odd j).
    BlockQ5_K k{};
    k.d = fp32_to_fp16(1.0f);
    k.dmin = fp32_to_fp16(0.0f);
    for (int j = 0; j < 4; ++j) k.scales[j] = 1;      // scales 0-3 (mins 0-3 stay 0)
    for (int j = 8; j < 12; ++j) k.scales[j] = 0x01;  // scales 4-7 low bits; mins 4-7 = 0
    k.qs[32 * 2 + 5] = 0x73;                          // chunk 2, l = 5: sub-block 4 value 3, sub-block 5 value 7
    k.qh[5] = 0x30;                                   // bits 4, 5: fifth bits of both
    y = dequantize(GgmlType::Q5_K, reinterpret_cast<const uint8_t*>(&k), QK_K);
    QCOMPARE(y[128 + 5], 19.0f);
    QCOMPARE(y[160 + 5], 23.0f);
    QCOMPARE(y[5], 0.0f);
  }

  void fp16_exhaustive_round_trip() {
    int finite = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float f = fp16_to_fp32(static_cast<uint16_t>(h));
      if (std::isnan(f)) {
        QVERIFY(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
        continue;
      }
      ++finite;
      if (fp32_to_fp16(f) != h) QFAIL(qPrintable(QString("f16 0x%1 does not round-trip").arg(h, 4, 16, QChar('0'))));
#if defined(__F16C__)
      QCOMPARE(bits(f), bits(_cvtsh_ss(static_cast<unsigned short>(h))));
#endif
    }
    QCOMPARE(finite, 65536 - 2 * 1023);  // every code but the NaNs (inf included)
  }

  void fp16_rounding() {
    QCOMPARE(fp32_to_fp16(65504.0f), uint16_t{0x7BFF});
    QCOMPARE(fp32_to_fp16(65519.99f), uint16_t{0x7BFF});
    QCOMPARE(fp32_to_fp16(65520.0f), uint16_t{0x7C00});  // tie rounds to even = infinity
    QCOMPARE(fp32_to_fp16(std::ldexp(1.0f, -24)), uint16_t{0x0001});
    QCOMPARE(fp32_to_fp16(std::ldexp(1.0f, -25)), uint16_t{0x0000});         // tie to even (0)
    QCOMPARE(fp32_to_fp16(std::ldexp(3.0f, -25)), uint16_t{0x0002});         // tie to even (2)
    QCOMPARE(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), uint16_t{0x3C00});  // tie down to even
    QCOMPARE(fp32_to_fp16(1.0f + std::ldexp(3.0f, -11)), uint16_t{0x3C02});  // tie up to even
    QCOMPARE(fp32_to_fp16(-0.0f), uint16_t{0x8000});
#if defined(__F16C__)
    // Random bit patterns against the hardware converter (round-to-nearest-even).
    std::mt19937 rng(7);
    for (int i = 0; i < 2000000; ++i) {
      const float f = from_bits(rng());
      if (std::isnan(f)) continue;
      const uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
      if (fp32_to_fp16(f) != hw) QFAIL(qPrintable(QString("fp32_to_fp16(%1) != hardware").arg(double(f))));
    }
#endif
  }

  void bf16_conversions() {
    for (uint32_t h = 0; h < 65536; ++h) {
      const float f = bf16_to_fp32(static_cast<uint16_t>(h));
      if (std::isnan(f)) {
        const uint16_t back = fp32_to_bf16(f);
        QVERIFY(std::isnan(bf16_to_fp32(back)));
        QVERIFY(back & 0x40);  // quiet
        continue;
      }
      QCOMPARE(fp32_to_bf16(f), static_cast<uint16_t>(h));
    }
    QCOMPARE(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), uint16_t{0x3F80});  // tie to even (down)
    QCOMPARE(fp32_to_bf16(1.0f + std::ldexp(3.0f, -8)), uint16_t{0x3F82});  // tie to even (up)
    QCOMPARE(fp32_to_bf16(from_bits(0x7F800001u)), uint16_t{0x7FC0});       // signalling NaN made quiet
  }

  void bf16_activation_rounding() {
    // ggml rounds whole groups of 32 with vcvtneps2bf16 (subnormals become zero), the tail in C.
    std::vector<float> x = random_normal(40, 3);
    x[0] = std::ldexp(1.0f, -130);
    x[35] = std::ldexp(1.0f, -130);
    std::vector<uint16_t> out(40);
    convert_activations(GgmlType::BF16, x.data(), out.data(), 40);
    QCOMPARE(out[0], uint16_t{0});
    QCOMPARE(out[35], fp32_to_bf16(x[35]));
    QVERIFY(out[35] != 0);
    for (int i = 1; i < 32; ++i) QCOMPARE(out[i], fp32_to_bf16(x[i]));
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
    std::mt19937 rng(11);
    std::vector<float> r(4096);
    for (auto& v : r) {
      v = from_bits(rng());
      if (std::isnan(v)) v = 1.0f;
    }
    for (int i = 0; i < 64; ++i) r[i] = std::ldexp(float(i + 1), -140);  // subnormals
    std::vector<uint16_t> ours(r.size()), hw(r.size());
    convert_activations(GgmlType::BF16, r.data(), ours.data(), static_cast<int64_t>(r.size()));
    for (size_t i = 0; i < r.size(); i += 16) {
      const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(r.data() + i));
      std::memcpy(hw.data() + i, &h, 32);
    }
    QVERIFY(ours == hw);
#endif
  }

  void quantize_round_trip_bounds() {
    const int64_t n = 8192;
    std::vector<float> x = random_normal(n, 42);
    x[100] = 0;  // a few exact zeros and an all-zero block
    for (int i = 256; i < 512; ++i) x[i] = 0;

    {  // F16 / BF16: relative error within half an ulp of the format
      const auto f16 = dequantize(GgmlType::F16, quantize(GgmlType::F16, x).data(), n);
      const auto bf = dequantize(GgmlType::BF16, quantize(GgmlType::BF16, x).data(), n);
      for (int64_t i = 0; i < n; ++i) {
        QVERIFY(std::fabs(f16[i] - x[i]) <= std::fabs(x[i]) * std::ldexp(1.0f, -11) + 1e-7f);
        QVERIFY(std::fabs(bf[i] - x[i]) <= std::fabs(x[i]) * std::ldexp(1.0f, -8));
      }
    }
    // Q8_0 / Q8_K: half a step (amax/127) plus the f16 rounding of the scale.
    // Q4_0: one step (amax/8): the positive extreme clamps at +7 when the max is negative.
    struct Case {
      GgmlType t;
      int block;
      float steps_per_amax;
      float bound_in_steps;
    };
    for (const Case c : {Case{GgmlType::Q8_0, 32, 127, 0.57f}, Case{GgmlType::Q8_K, 256, 127, 0.501f},
                         Case{GgmlType::Q4_0, 32, 8, 1.01f}}) {
      const auto y = dequantize(c.t, quantize(c.t, x).data(), n);
      for (int64_t b = 0; b < n / c.block; ++b) {
        float amax = 0;
        for (int i = 0; i < c.block; ++i) amax = std::max(amax, std::fabs(x[b * c.block + i]));
        const float bound = amax / c.steps_per_amax * c.bound_in_steps + 1e-7f;
        for (int i = 0; i < c.block; ++i) {
          const int64_t k = b * c.block + i;
          if (std::fabs(y[k] - x[k]) > bound)
            QFAIL(qPrintable(QString("%1: |%2 - %3| > %4")
                                 .arg(ggml_type_name(uint32_t(c.t)).c_str())
                                 .arg(y[k])
                                 .arg(x[k])
                                 .arg(bound)));
        }
      }
    }
    // Q4_1 / Q5_1: half a step of (max - min) / levels, plus the f16 rounding of d and the min.
    for (const auto& [t, levels] : {std::pair{GgmlType::Q4_1, 15}, std::pair{GgmlType::Q5_1, 31}}) {
      const auto y = dequantize(t, quantize(t, x).data(), n);
      for (int64_t b = 0; b < n / 32; ++b) {
        float lo = x[b * 32], hi = x[b * 32];
        for (int i = 0; i < 32; ++i) lo = std::min(lo, x[b * 32 + i]), hi = std::max(hi, x[b * 32 + i]);
        const float bound = (hi - lo) / levels * 0.5f + (std::fabs(lo) + std::fabs(hi)) * 2e-3f + 1e-7f;
        for (int i = 0; i < 32; ++i)
          if (std::fabs(y[b * 32 + i] - x[b * 32 + i]) > bound)
            QFAIL(qPrintable(QString("%1 value %2: %3 vs %4")
                                 .arg(ggml_type_name(uint32_t(t)).c_str())
                                 .arg(b * 32 + i)
                                 .arg(y[b * 32 + i])
                                 .arg(x[b * 32 + i])));
      }
    }
    {  // Q5_0: one step (amax/16), as Q4_0
      const auto y = dequantize(GgmlType::Q5_0, quantize(GgmlType::Q5_0, x).data(), n);
      for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
        for (int i = 0; i < 32; ++i) QVERIFY(std::fabs(y[b * 32 + i] - x[b * 32 + i]) <= amax / 16 * 1.01f + 1e-7f);
      }
    }
    const auto q5k = dequantize(GgmlType::Q5_K, quantize(GgmlType::Q5_K, x).data(), n);
    const double e5 = rms_diff(q5k, x) / rms(x);
    qInfo("relative RMS error: q5_K %.4f", e5);
    QVERIFY(e5 < 0.045);
    for (int i = 256; i < 512; ++i) QCOMPARE(q5k[i], 0.0f);
    // K-quants: relative RMS error of Gaussian data (measured ~0.066 for Q4_K, ~0.015 for Q6_K).
    const auto q4k = dequantize(GgmlType::Q4_K, quantize(GgmlType::Q4_K, x).data(), n);
    const auto q6k = dequantize(GgmlType::Q6_K, quantize(GgmlType::Q6_K, x).data(), n);
    const double e4 = rms_diff(q4k, x) / rms(x), e6 = rms_diff(q6k, x) / rms(x);
    qInfo("relative RMS error: q4_K %.4f, q6_K %.4f", e4, e6);
    QVERIFY(e4 < 0.09);
    QVERIFY(e6 < 0.025);
    for (int i = 256; i < 512; ++i) QCOMPARE(q4k[i], 0.0f);
    for (int i = 256; i < 512; ++i) QCOMPARE(q6k[i], 0.0f);
  }

  void q8_activation_rounding_is_half_even() {
    // amax = 127 makes the scale exactly 1, so the inputs below sit exactly on .5 ties.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = 0.5f;
    BlockQ8_0 act, ref;
    convert_activations(GgmlType::Q4_0, x.data(), &act, 32);
    quantize_row(GgmlType::Q8_0, x.data(), &ref, 32);
    QCOMPARE(fp16_to_fp32(act.d), 1.0f);
    QCOMPARE(int(act.qs[0]), 127);
    QCOMPARE(int(act.qs[1]), 2);  // CPU backend: half to even
    QCOMPARE(int(act.qs[2]), 4);
    QCOMPARE(int(act.qs[3]), -2);
    QCOMPARE(int(act.qs[4]), 0);
    QCOMPARE(int(ref.qs[1]), 3);  // reference quantizer: roundf, half away from zero
    // Q8_1 activations (for Q4_1 / Q5_1): the same quants as Q8_0 plus s = f16(d * sum(qs)).
    const std::vector<float> z = random_normal(64, 9);
    BlockQ8_1 a1[2];
    BlockQ8_0 a0[2];
    convert_activations(GgmlType::Q5_1, z.data(), a1, 64);
    convert_activations(GgmlType::Q5_0, z.data(), a0, 64);
    for (int b = 0; b < 2; ++b) {
      QCOMPARE(a1[b].d, a0[b].d);
      QVERIFY(std::memcmp(a1[b].qs, a0[b].qs, 32) == 0);
      int sum = 0;
      float amax = 0;
      for (int i = 0; i < 32; ++i) sum += a1[b].qs[i], amax = std::max(amax, std::fabs(z[32 * b + i]));
      QCOMPARE(a1[b].s, fp32_to_fp16(amax / 127.0f * float(sum)));
    }
    // Q8_K activations carry the sums of each 16 quants.
    const std::vector<float> y = random_normal(512, 5);
    std::vector<BlockQ8_K> k(2);
    convert_activations(GgmlType::Q6_K, y.data(), k.data(), 512);
    for (const auto& b : k)
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += b.qs[16 * g + i];
        QCOMPARE(int(b.bsums[g]), s);
      }
  }

  // llama-quantize made the synthetic files from synth-llama-f32; our reference quantizers
  // must give the same bytes.
  void quantizers_match_llama_quantize() {
    const auto f32 = GgufFile::open(synth("f32").string());
    for (const char* name : {"f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q6_k"}) {
      KVSCOPE_REQUIRE_FILE(synth(name));
      const auto q = GgufFile::open(synth(name).string());
      for (const auto& t : q->tensors()) {
        if (t.type() == GgmlType::F32) continue;
        const auto* src = f32->find_tensor(t.name);
        QVERIFY(src);
        const auto x = tensor_f32(*f32, *src);
        std::vector<uint8_t> ours(t.nbytes);
        quantize_row(t.type(), x.data(), ours.data(), t.n_elements());
        const size_t bb = ggml_type_info(t.raw_type).block_bytes;
        const uint8_t* theirs = q->view(t).data;
        int64_t differing = 0;
        for (size_t b = 0; b < t.nbytes / bb; ++b) differing += std::memcmp(&ours[b * bb], theirs + b * bb, bb) != 0;
        if (differing)
          QFAIL(qPrintable(QString("%1 %2 (%3): %4 of %5 blocks differ")
                               .arg(name)
                               .arg(t.name.c_str())
                               .arg(ggml_type_name(t.raw_type).c_str())
                               .arg(differing)
                               .arg(t.nbytes / bb)));
      }
    }
  }

  // The same check for the types added later, against files made by llama.cpp's quantizer
  // (llama-cpp-python's llama_model_quantize) when KVSCOPE_QUANT_REF_DIR points at them.
  void quantizers_match_llama_quantize_extra() {
    if (quant_ref_dir().empty()) QSKIP("KVSCOPE_QUANT_REF_DIR not set (see tests/tools/make_quant_refs.py)");
    const auto f32 = GgufFile::open(synth("f32").string());
    std::map<std::string, int64_t> blocks_per_type;
    for (const char* name : {"q4_1", "q5_0", "q5_1", "q5_k_m"}) {
      const auto path = quant_ref_dir() / ("synth-llama-" + std::string(name) + ".gguf");
      QVERIFY2(std::filesystem::exists(path), qPrintable(QString::fromStdString(path.string())));
      const auto q = GgufFile::open(path.string());
      for (const auto& t : q->tensors()) {
        if (t.type() == GgmlType::F32) continue;
        const auto* src = f32->find_tensor(t.name);
        QVERIFY(src);
        const auto x = tensor_f32(*f32, *src);
        std::vector<uint8_t> ours(t.nbytes);
        quantize_row(t.type(), x.data(), ours.data(), t.n_elements());
        const size_t bb = ggml_type_info(t.raw_type).block_bytes;
        const uint8_t* theirs = q->view(t).data;
        int64_t differing = 0;
        for (size_t b = 0; b < t.nbytes / bb; ++b) differing += std::memcmp(&ours[b * bb], theirs + b * bb, bb) != 0;
        blocks_per_type[ggml_type_name(t.raw_type)] += static_cast<int64_t>(t.nbytes / bb);
        if (differing)
          QFAIL(qPrintable(QString("%1 %2 (%3): %4 of %5 blocks differ")
                               .arg(name)
                               .arg(t.name.c_str())
                               .arg(ggml_type_name(t.raw_type).c_str())
                               .arg(differing)
                               .arg(t.nbytes / bb)));
      }
    }
    for (const auto& [type, blocks] : blocks_per_type)
      qInfo("%-5s %lld blocks identical to llama.cpp's", type.c_str(), (long long)blocks);
    for (const char* type : {"q4_1", "q5_0", "q5_1", "q5_K"}) QVERIFY2(blocks_per_type[type] > 0, type);
  }

  void synthetic_dequant_vs_f32() {
    const auto f32 = GgufFile::open(synth("f32").string());
    struct Case {
      const char* file;
      double max_rel_rms;
    };
    for (const Case c : {Case{"f16", 5e-4}, Case{"bf16", 4e-3}, Case{"q8_0", 0.01}, Case{"q6_k", 0.025},
                         Case{"q4_k_m", 0.09}, Case{"q4_0", 0.12}}) {
      const auto q = GgufFile::open(synth(c.file).string());
      double worst = 0;
      for (const auto& t : q->tensors()) {
        const auto* src = f32->find_tensor(t.name);
        QVERIFY(src);
        QCOMPARE(src->ne, t.ne);
        const auto a = tensor_f32(*q, t), b = tensor_f32(*f32, *src);
        const double rel = rms_diff(a, b) / rms(b);
        if (t.type() == GgmlType::F32) QCOMPARE(rel, 0.0);
        worst = std::max(worst, rel);
        QVERIFY2(rel < c.max_rel_rms,
                 qPrintable(QString("%1 %2: relative RMS %3").arg(c.file).arg(t.name.c_str()).arg(rel)));
      }
      qInfo("%-7s worst relative RMS error vs f32: %.5f", c.file, worst);
    }
  }

  // dequantize(file) -> quantize_row -> compare with the file: a dequantized Q8_0/Q4_0 block is
  // a fixed point of the quantizer; K-quants re-fit their scales, so only closeness is required.
  void requantize_dequantized_file() {
    std::map<std::string, std::pair<int64_t, int64_t>> per_type;  // type -> (differing, blocks)
    for (const char* name : {"q8_0", "q4_0", "q4_k_m", "q6_k"}) {
      const auto q = GgufFile::open(synth(name).string());
      for (const auto& t : q->tensors()) {
        if (t.type() == GgmlType::F32) continue;
        const TensorView v = q->view(t);
        const auto x = tensor_f32(*q, t);
        std::vector<uint8_t> again(t.nbytes);
        quantize_row(t.type(), x.data(), again.data(), t.n_elements());
        const size_t bb = ggml_type_info(t.raw_type).block_bytes;
        auto& [differing, blocks] = per_type[ggml_type_name(t.raw_type)];
        for (size_t b = 0; b < t.nbytes / bb; ++b, ++blocks) {
          if (std::memcmp(&again[b * bb], v.data + b * bb, bb) == 0) continue;
          ++differing;
          QVERIFY2(t.type() == GgmlType::Q4_K || t.type() == GgmlType::Q6_K,
                   qPrintable(QString("%1 %2 block %3 is not reproduced").arg(name).arg(t.name.c_str()).arg(b)));
          const auto steps = k_quant_steps(t.type(), v.data + b * bb);
          const auto y = dequantize(t.type(), &again[b * bb], QK_K);
          for (int i = 0; i < QK_K; ++i) {
            const float orig = x[b * QK_K + i];
            if (std::fabs(y[i] - orig) > steps[i] * 1.0001f + 1e-7f)
              QFAIL(qPrintable(QString("%1 %2 block %3 value %4: %5 vs %6, step %7")
                                   .arg(name)
                                   .arg(t.name.c_str())
                                   .arg(b)
                                   .arg(i)
                                   .arg(y[i])
                                   .arg(orig)
                                   .arg(steps[i])));
          }
        }
      }
    }
    for (const auto& [type, counts] : per_type)
      qInfo("%-5s dequantized then re-quantized: %lld of %lld blocks differ from the file", type.c_str(),
            (long long)counts.first, (long long)counts.second);
    QCOMPARE(per_type["q8_0"].first, int64_t{0});
    QCOMPARE(per_type["q4_0"].first, int64_t{0});
  }

  void vec_dot_simd_matches_scalar() {
    for (GgmlType t : kWeightTypes) {
      for (int64_t n : {256, 512, 4096}) {
        const auto w = random_normal(n, static_cast<uint32_t>(n) + 17, 0.05f);
        auto x = random_normal(n, static_cast<uint32_t>(n) + 99, 2.0f);
        x[3] = 0;
        // Weight rows sit at arbitrary offsets in a file: test a misaligned one.
        const auto packed = quantize(t, w);
        std::vector<uint8_t> wbuf(packed.size() + 1);
        std::memcpy(wbuf.data() + 1, packed.data(), packed.size());
        const uint8_t* wrow = wbuf.data() + 1;
        std::vector<uint8_t> xc(vec_dot_row_bytes(t, n));
        convert_activations(t, x.data(), xc.data(), n);

        const float fast = vec_dot(t, n, wrow, xc.data());
        const float scalar = vec_dot_scalar(t, n, wrow, xc.data());
        // The oracle for both: float64 dot of the dequantized weights and activations.
        const auto wd = dequantize(t, packed.data(), n);
        const auto xd = dequantize(vec_dot_type(t), xc.data(), n);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          exact += double(wd[i]) * xd[i];
          mag += std::fabs(double(wd[i]) * xd[i]);
        }
        exact += q8_1_min_term_correction(t, packed.data(), xc.data(), n);
        const double tol = 5e-6 * mag + 1e-30;
        const QString what = QString("%1 n=%2: fast %3 scalar %4 exact %5")
                                 .arg(ggml_type_name(uint32_t(t)).c_str())
                                 .arg(n)
                                 .arg(fast)
                                 .arg(scalar)
                                 .arg(exact);
        QVERIFY2(std::fabs(scalar - exact) <= tol, qPrintable(what));
        QVERIFY2(std::fabs(fast - exact) <= tol, qPrintable(what));
        if (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K)
          QVERIFY2(bits(fast) == bits(scalar), qPrintable(what));
      }
    }
  }

  void vec_dot_speed() {
    // Not a pass/fail check: a record of what the fast path buys on this machine.
    const int64_t n = 4096, rows = 256;
    for (GgmlType t : kWeightTypes) {
      const auto w = quantize(t, random_normal(n * rows, 1, 0.05f));
      const auto x = random_normal(n, 2);
      std::vector<uint8_t> xc(vec_dot_row_bytes(t, n));
      convert_activations(t, x.data(), xc.data(), n);
      const size_t rb = ggml_row_bytes(t, n);
      auto time = [&](auto dot, int reps) {
        volatile float sink = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r)
          for (int64_t i = 0; i < rows; ++i) sink = sink + dot(t, n, w.data() + i * rb, xc.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return double(reps) * rows * n / s / 1e9;  // Gelem/s
      };
      double fast = 0, slow = 0;  // best of a few short runs: the machine is shared
      for (int k = 0; k < 5; ++k) {
        fast = std::max(fast, time(vec_dot, 8));
        slow = std::max(slow, time(vec_dot_scalar, 1));
      }
      qInfo("vec_dot %-5s n=4096: fast %.2f Gelem/s, scalar %.2f Gelem/s (x%.1f)", ggml_type_name(uint32_t(t)).c_str(),
            fast, slow, fast / slow);
    }
  }

  void matmul_matches_naive() {
    ThreadPool pool(2), single(1);
    struct Shape {
      int64_t in, out;
    };
    for (GgmlType t : kWeightTypes) {
      for (const Shape s : {Shape{256, 37}, Shape{512, 64}, Shape{1024, 5}}) {
        const auto wf = random_normal(s.in * s.out, static_cast<uint32_t>(s.in + s.out), 0.05f);
        const auto wq = quantize(t, wf);
        GgufTensorInfo info;
        info.name = "w";
        info.ne = {s.in, s.out};
        info.raw_type = static_cast<uint32_t>(t);
        info.nbytes = wq.size();
        const TensorView view{&info, wq.data()};
        const auto wd = dequantize(t, wq.data(), s.in * s.out);
        for (int64_t n_tokens : {1, 3, 17}) {
          const auto x = random_normal(s.in * n_tokens, static_cast<uint32_t>(n_tokens), 1.5f);
          std::vector<float> y(s.out * n_tokens), y1(s.out * n_tokens);
          matmul(view, x.data(), n_tokens, y.data(), pool);
          matmul(view, x.data(), n_tokens, y1.data(), single);
          QVERIFY(std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)) == 0);  // threads don't change bits
          std::vector<uint8_t> xc(vec_dot_row_bytes(t, s.in));
          for (int64_t tok = 0; tok < n_tokens; ++tok) {
            convert_activations(t, x.data() + tok * s.in, xc.data(), s.in);
            const auto xd = dequantize(vec_dot_type(t), xc.data(), s.in);
            for (int64_t r = 0; r < s.out; ++r) {
              double exact = 0, mag = 0;
              for (int64_t i = 0; i < s.in; ++i) {
                exact += double(wd[r * s.in + i]) * xd[i];
                mag += std::fabs(double(wd[r * s.in + i]) * xd[i]);
              }
              exact += q8_1_min_term_correction(t, wq.data() + r * ggml_row_bytes(t, s.in), xc.data(), s.in);
              const float got = y[tok * s.out + r];
              if (std::fabs(got - exact) > 5e-6 * mag + 1e-30)
                QFAIL(qPrintable(QString("%1 %2x%3 tokens %4: y[%5][%6] = %7, expected %8")
                                     .arg(ggml_type_name(uint32_t(t)).c_str())
                                     .arg(s.in)
                                     .arg(s.out)
                                     .arg(n_tokens)
                                     .arg(tok)
                                     .arg(r)
                                     .arg(got)
                                     .arg(exact)));
            }
          }
        }
      }
    }
  }
};

QTEST_APPLESS_MAIN(TestDtypes)
#include "test_dtypes.moc"
