// The __host__ __device__ arithmetic of the CUDA backend (cuda/kv_math.h), run on the CPU: fp8
// and int8 codecs, slot addressing, RoPE angles, window/sink visibility and block-table walking.
// Built everywhere (no CUDA needed): kv_math.h compiles as plain C++ without nvcc.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "../cuda/kv_math.h"
#include "cpu/ops.h"
#include "kv/kv_layout.h"
#if __has_include("kv/kv_quant.h")
#include "kv/kv_quant.h"  // the CPU backend's codecs: the GPU must encode exactly as they do
#define KVSCOPE_HAVE_KV_QUANT 1
#endif

using namespace kvscope;
using namespace kvscope::kvmath;

namespace {

using Decode = float (*)(uint8_t);
using Encode = uint8_t (*)(float, Fp8Overflow);

struct Fp8Format {
  const char* name;
  Decode decode;
  Encode encode;
  uint8_t max_code;  // largest finite positive code
  int mant_bits;
  bool is_nan_code(uint8_t c) const {
    const uint8_t a = c & 0x7F;
    return mant_bits == 3 ? a == 0x7F : a > 0x7C;
  }
  bool is_inf_code(uint8_t c) const { return mant_bits == 2 && (c & 0x7F) == 0x7C; }
};

const Fp8Format kE4M3{"e4m3", fp8_e4m3_to_f32, f32_to_fp8_e4m3, 0x7E, 3};
const Fp8Format kE5M2{"e5m2", fp8_e5m2_to_f32, f32_to_fp8_e5m2, 0x7B, 2};

// Reference encoder by exhaustive search: the nearest finite code, ties to the even code; a
// "virtual" next code above max finite stands for overflow (what RNE would round to if the
// exponent range went on), after which the overflow mode decides.
uint8_t reference_encode(const Fp8Format& f, float x, Fp8Overflow mode) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  const double max = f.decode(f.max_code);
  const double ulp_at_max = max - f.decode(f.max_code - 1);
  const double virt = max + ulp_at_max;
  const uint8_t overflow = mode == Fp8Overflow::Saturate ? f.max_code : (f.mant_bits == 3 ? 0x7F : 0x7C);
  if (std::isinf(x) || a >= virt) return sign | overflow;
  int best = 0;
  double best_d = a;
  for (int c = 1; c <= f.max_code + 1; ++c) {
    const double v = c <= f.max_code ? f.decode(static_cast<uint8_t>(c)) : virt;
    const double d = std::fabs(a - v);
    if (d < best_d || (d == best_d && (c % 2) == 0)) {
      best = c;
      best_d = d;
    }
  }
  if (best == f.max_code + 1) return sign | overflow;
  return sign | static_cast<uint8_t>(best);
}

bool same_code(const Fp8Format& f, uint8_t a, uint8_t b) {
  if (f.is_nan_code(a) || f.is_nan_code(b)) return f.is_nan_code(a) && f.is_nan_code(b) && (a & 0x80) == (b & 0x80);
  return a == b;
}

// Visibility straight from the definition: k <= pos and (no window, or inside the window, or a sink).
bool brute_visible(int32_t pos, int32_t k, int32_t window, int32_t sinks) {
  if (k < 0 || k > pos) return false;
  if (window <= 0) return true;
  return k >= pos - window + 1 || k < sinks;
}

}  // namespace

class TestCudaHostMath : public QObject {
  Q_OBJECT
 private slots:
  void fp8_known_values() {
    QCOMPARE(fp8_e4m3_to_f32(0x38), 1.0f);
    QCOMPARE(fp8_e4m3_to_f32(0x7E), 448.0f);
    QCOMPARE(fp8_e4m3_to_f32(0xFE), -448.0f);
    QCOMPARE(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
    QCOMPARE(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    QCOMPARE(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
    QVERIFY(std::isnan(fp8_e4m3_to_f32(0x7F)) && std::isnan(fp8_e4m3_to_f32(0xFF)));
    QVERIFY(std::signbit(fp8_e4m3_to_f32(0x80)) && fp8_e4m3_to_f32(0x80) == 0.0f);
    QCOMPARE(fp8_e5m2_to_f32(0x3C), 1.0f);
    QCOMPARE(fp8_e5m2_to_f32(0x7B), 57344.0f);
    QCOMPARE(fp8_e5m2_to_f32(0x04), std::ldexp(1.0f, -14));
    QCOMPARE(fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
    QVERIFY(std::isinf(fp8_e5m2_to_f32(0x7C)) && fp8_e5m2_to_f32(0xFC) < 0);
    for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) QVERIFY(std::isnan(fp8_e5m2_to_f32(c)));
    // e5m2 is the top byte of IEEE binary16: check against that definition for every code.
    for (int c = 0; c < 256; ++c) {
      const uint16_t h = static_cast<uint16_t>(c << 8);
      const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
      double v = e == 0 ? std::ldexp(m, -24) : (e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1024 + m, e - 25));
      if (h & 0x8000) v = -v;
      const float got = fp8_e5m2_to_f32(static_cast<uint8_t>(c));
      if (std::isnan(v))
        QVERIFY(std::isnan(got));
      else
        QCOMPARE(static_cast<double>(got), v);
    }
  }

  // Every code decodes to a value that encodes back to the same code (NaN to a NaN code).
  void fp8_roundtrip_all_codes_data() {
    QTest::addColumn<int>("fmt");
    QTest::newRow("e4m3") << 0;
    QTest::newRow("e5m2") << 1;
  }
  void fp8_roundtrip_all_codes() {
    QFETCH(int, fmt);
    const Fp8Format& f = fmt == 0 ? kE4M3 : kE5M2;
    int checked = 0;
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float v = f.decode(code);
      for (Fp8Overflow mode : {Fp8Overflow::Saturate, Fp8Overflow::Ieee}) {
        const uint8_t back = f.encode(v, mode);
        if (f.is_nan_code(code)) {
          QVERIFY2(f.is_nan_code(back) && (back & 0x80) == (code & 0x80), qPrintable(QString::number(c, 16)));
        } else if (f.is_inf_code(code)) {
          QCOMPARE(back, static_cast<uint8_t>((code & 0x80) | (mode == Fp8Overflow::Saturate ? f.max_code : 0x7C)));
        } else {
          QVERIFY2(back == code,
                   qPrintable(QString("%1: code %2 -> %3 -> %4").arg(f.name).arg(c, 0, 16).arg(v).arg(back, 0, 16)));
        }
        ++checked;
      }
    }
    QCOMPARE(checked, 512);
  }

  // Midpoints between neighbouring representable values go to the even code; a hair off the
  // midpoint goes to the nearer value.
  void fp8_midpoints_tie_to_even_data() { fp8_roundtrip_all_codes_data(); }
  void fp8_midpoints_tie_to_even() {
    QFETCH(int, fmt);
    const Fp8Format& f = fmt == 0 ? kE4M3 : kE5M2;
    for (int c = 0; c < f.max_code; ++c) {
      for (uint8_t sign : {uint8_t(0), uint8_t(0x80)}) {
        const uint8_t lo = sign | static_cast<uint8_t>(c), hi = sign | static_cast<uint8_t>(c + 1);
        const float a = f.decode(lo), b = f.decode(hi);
        const float mid = (a + b) * 0.5f;  // exact: few mantissa bits
        QCOMPARE(static_cast<double>(mid), (static_cast<double>(a) + b) / 2);
        const uint8_t want = (c % 2 == 0) ? lo : hi;
        QCOMPARE(f.encode(mid, Fp8Overflow::Saturate), want);
        QCOMPARE(f.encode(std::nextafter(mid, a), Fp8Overflow::Saturate), lo);
        QCOMPARE(f.encode(std::nextafter(mid, b), Fp8Overflow::Saturate), hi);
      }
    }
  }

  void fp8_saturation_and_nan() {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // e4m3: 448 max; 464 is the tie between 448 (even) and the would-be 480 -> 448; above -> overflow.
    QCOMPARE(f32_to_fp8_e4m3(464.0f, Fp8Overflow::Ieee), uint8_t(0x7E));
    QCOMPARE(f32_to_fp8_e4m3(std::nextafter(464.0f, 1e9f), Fp8Overflow::Ieee), uint8_t(0x7F));
    QCOMPARE(f32_to_fp8_e4m3(std::nextafter(464.0f, 1e9f), Fp8Overflow::Saturate), uint8_t(0x7E));
    QCOMPARE(f32_to_fp8_e4m3(1e30f, Fp8Overflow::Saturate), uint8_t(0x7E));
    QCOMPARE(f32_to_fp8_e4m3(-1e30f, Fp8Overflow::Saturate), uint8_t(0xFE));
    QCOMPARE(f32_to_fp8_e4m3(std::numeric_limits<float>::max(), Fp8Overflow::Saturate), uint8_t(0x7E));
    QCOMPARE(f32_to_fp8_e4m3(inf, Fp8Overflow::Saturate), uint8_t(0x7E));
    QCOMPARE(f32_to_fp8_e4m3(-inf, Fp8Overflow::Ieee), uint8_t(0xFF));
    QCOMPARE(f32_to_fp8_e4m3(nan, Fp8Overflow::Saturate), uint8_t(0x7F));
    QCOMPARE(f32_to_fp8_e4m3(-nan, Fp8Overflow::Saturate), uint8_t(0xFF));
    // e5m2: 57344 max (odd code); the tie at 61440 goes to the even overflow code.
    QCOMPARE(f32_to_fp8_e5m2(61440.0f, Fp8Overflow::Ieee), uint8_t(0x7C));
    QCOMPARE(f32_to_fp8_e5m2(61440.0f, Fp8Overflow::Saturate), uint8_t(0x7B));
    QCOMPARE(f32_to_fp8_e5m2(std::nextafter(61440.0f, 0.0f), Fp8Overflow::Ieee), uint8_t(0x7B));
    QCOMPARE(f32_to_fp8_e5m2(-1e30f, Fp8Overflow::Ieee), uint8_t(0xFC));
    QCOMPARE(f32_to_fp8_e5m2(inf, Fp8Overflow::Saturate), uint8_t(0x7B));
    QCOMPARE(f32_to_fp8_e5m2(inf, Fp8Overflow::Ieee), uint8_t(0x7C));
    QVERIFY(std::isnan(fp8_e5m2_to_f32(f32_to_fp8_e5m2(nan, Fp8Overflow::Saturate))));
    // Underflow: below half the smallest subnormal -> signed zero; exactly half -> zero (even).
    QCOMPARE(f32_to_fp8_e4m3(std::ldexp(1.0f, -10), Fp8Overflow::Saturate), uint8_t(0x00));
    QCOMPARE(f32_to_fp8_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f), Fp8Overflow::Saturate), uint8_t(0x01));
    QCOMPARE(f32_to_fp8_e4m3(-1e-30f, Fp8Overflow::Saturate), uint8_t(0x80));
    QCOMPARE(f32_to_fp8_e5m2(std::ldexp(1.0f, -17), Fp8Overflow::Saturate), uint8_t(0x00));
    QCOMPARE(f32_to_fp8_e5m2(std::ldexp(3.0f, -17), Fp8Overflow::Saturate), uint8_t(0x02));
  }

  // Random floats over the whole range (and the exact f32 neighbourhood of every code) against
  // the exhaustive-search reference, both overflow modes.
  void fp8_encode_matches_reference_data() { fp8_roundtrip_all_codes_data(); }
  void fp8_encode_matches_reference() {
    QFETCH(int, fmt);
    const Fp8Format& f = fmt == 0 ? kE4M3 : kE5M2;
    std::vector<float> xs;
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> expo(-24.0f, 18.0f), unit(0.0f, 1.0f);
    for (int i = 0; i < 60000; ++i) {
      float x = std::exp2(expo(rng)) * (unit(rng) < 0.5f ? -1.0f : 1.0f);
      xs.push_back(x);
    }
    for (int c = 0; c < 256; ++c) {
      const float v = f.decode(static_cast<uint8_t>(c));
      if (!std::isfinite(v)) continue;
      xs.push_back(v);
      xs.push_back(std::nextafter(v, INFINITY));
      xs.push_back(std::nextafter(v, -INFINITY));
    }
    std::uniform_int_distribution<uint32_t> bits;  // raw bit patterns: denormals, huge, NaN, inf
    for (int i = 0; i < 20000; ++i) {
      const uint32_t u = bits(rng);
      xs.push_back(f32_from_bits(u));
    }
    int bad = 0;
    for (float x : xs)
      for (Fp8Overflow mode : {Fp8Overflow::Saturate, Fp8Overflow::Ieee}) {
        const uint8_t got = f.encode(x, mode), want = reference_encode(f, x, mode);
        if (!same_code(f, got, want) && bad++ < 5)
          qWarning("%s: %.9g -> %02x, reference %02x", f.name, static_cast<double>(x), got, want);
      }
    QCOMPARE(bad, 0);
  }

  // Same codes as the CPU backend's quantized KV (core/kv/kv_quant.h): E4M3 saturating, E5M2
  // IEEE overflow, int8 round-half-even, and the same absmax / qmax scale.
  void codecs_match_cpu_kv_quant() {
#ifndef KVSCOPE_HAVE_KV_QUANT
    QSKIP("core has no kv/kv_quant.h in this build");
#else
    std::vector<float> xs;
    for (int c = 0; c < 256; ++c)
      for (float v : {fp8_e4m3_to_f32(static_cast<uint8_t>(c)), fp8_e5m2_to_f32(static_cast<uint8_t>(c))}) {
        xs.push_back(v);
        xs.push_back(std::nextafter(v, INFINITY));
        xs.push_back(std::nextafter(v, -INFINITY));
        xs.push_back(v * 1.0625f);
      }
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 400000; ++i) xs.push_back(f32_from_bits(bits(rng)));
    std::uniform_real_distribution<float> small(-300.0f, 300.0f);
    for (int i = 0; i < 100000; ++i) xs.push_back(small(rng));
    int bad = 0;
    for (float x : xs) {
      const uint8_t a4 = f32_to_fp8_e4m3(x, Fp8Overflow::Saturate), b4 = kvq::f32_to_fp8_e4m3(x);
      const uint8_t a5 = f32_to_fp8_e5m2(x, Fp8Overflow::Ieee), b5 = kvq::f32_to_fp8_e5m2(x);
      const bool i8_ok = !(std::fabs(x) < 4e6f) || f32_to_int8(x, 1.0f) == kvq::f32_to_int8(x);
      if ((a4 != b4 || a5 != b5 || !i8_ok) && bad++ < 5)
        qWarning("%.9g: e4m3 %02x vs %02x, e5m2 %02x vs %02x", static_cast<double>(x), a4, b4, a5, b5);
    }
    QCOMPARE(bad, 0);
    for (int c = 0; c < 256; ++c) {
      const float a = fp8_e4m3_to_f32(static_cast<uint8_t>(c)), b = kvq::fp8_e4m3_to_f32(static_cast<uint8_t>(c));
      QVERIFY(a == b || (std::isnan(a) && std::isnan(b)));
      const float a5 = fp8_e5m2_to_f32(static_cast<uint8_t>(c)), b5 = kvq::fp8_e5m2_to_f32(static_cast<uint8_t>(c));
      QVERIFY(a5 == b5 || (std::isnan(a5) && std::isnan(b5)));
    }
    // Scale convention.
    const float v[4] = {0.5f, -3.0f, 2.0f, 0.0f};
    QCOMPARE(kv_quant_scale(3.0f, kInt8Max), kvq::kv_scale(v, 4, kvq::kInt8Max));
    QCOMPARE(kv_quant_scale(3.0f, kFp8E4M3Max), kvq::kv_scale(v, 4, kvq::kE4M3Max));
    const float z[2] = {0.0f, -0.0f};
    QCOMPARE(kv_quant_scale(0.0f, kFp8E5M2Max), kvq::kv_scale(z, 2, kvq::kE5M2Max));
#endif
  }

  void int8_roundtrip_bounds() {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int trial = 0; trial < 200; ++trial) {
      const int d = 8 << (trial % 6);
      const float spread = std::exp2(static_cast<float>(trial % 40) - 20.0f);
      std::vector<float> x(static_cast<size_t>(d));
      float absmax = 0;
      for (auto& v : x) {
        v = n(rng) * spread;
        absmax = std::max(absmax, std::fabs(v));
      }
      const float scale = kv_quant_scale(absmax, kInt8Max);
      for (float v : x) {
        const int8_t q = f32_to_int8(v, scale);
        QVERIFY(q >= -127 && q <= 127);
        const float err = std::fabs(int8_to_f32(q, scale) - v);
        QVERIFY2(err <= 0.5f * scale * (1.0f + 1e-5f), qPrintable(QString("%1 vs scale %2").arg(err).arg(scale)));
        if (std::fabs(v) == absmax) QCOMPARE(std::abs(static_cast<int>(q)), 127);
      }
      // The same scale convention with fp8 e4m3: relative error <= 2^-4 on normal values.
      const float s8 = kv_quant_scale(absmax, kFp8E4M3Max);
      for (float v : x) {
        const float back = fp8_e4m3_to_f32(f32_to_fp8_e4m3(v / s8)) * s8;
        const float tol = std::max(std::fabs(v) * 0.0625f, s8 * std::ldexp(1.0f, -10)) * 1.0001f;
        QVERIFY(std::fabs(back - v) <= tol);
      }
    }
    QCOMPARE(kv_quant_scale(0.0f, kInt8Max), 1.0f);
    QCOMPARE(f32_to_int8(0.0f, 1.0f), int8_t(0));
    QCOMPARE(f32_to_int8(1e9f, 1.0f), int8_t(127));
    QCOMPARE(f32_to_int8(-1e9f, 1.0f), int8_t(-127));
    QCOMPARE(f32_to_int8(2.5f, 1.0f), int8_t(2));  // ties to even
    QCOMPARE(f32_to_int8(-3.5f, 1.0f), int8_t(-4));
  }

  void slot_addressing_matches_kv_layout() {
    for (int32_t bs : {1, 8, 16, 32}) {
      KvLayout L;
      L.n_layer = 2;
      L.n_head_kv = 3;
      L.head_dim = 24;
      L.block_size = bs;
      L.num_blocks = 11;
      for (int64_t slot = 0; slot < static_cast<int64_t>(L.num_blocks) * bs; ++slot) {
        const int32_t b = slot_block(slot, bs), o = slot_offset(slot, bs);
        QCOMPARE(static_cast<int64_t>(b) * bs + o, slot);
        QVERIFY(o >= 0 && o < bs);
        for (int32_t h = 0; h < L.n_head_kv; ++h) {
          QCOMPARE(tile_offset(b, h, o, L.n_head_kv, bs, L.head_dim), L.tile_offset(b, h, o));
          QCOMPARE(vector_index(b, h, o, L.n_head_kv, bs) * L.head_dim, L.tile_offset(b, h, o));
        }
      }
    }
  }

  // rope_angle reproduces the CPU's angle recurrence bit for bit (multiplications only, so no
  // FMA contraction can differ), and rotating with it matches rope_inplace to rounding (the
  // rotation itself may be FMA-contracted differently by each compiler, as nvcc does).
  void rope_matches_cpu() {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int32_t n_rot : {8, 64, 128})
      for (bool neox : {false, true})
        for (float base : {10000.0f, 500000.0f, 1000000.0f})
          for (float fs : {1.0f, 0.25f})
            for (int32_t pos : {0, 1, 7, 100, 4095, 32767}) {
              // The recurrence of cpu/ops.cpp rope_inplace, copied.
              const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
              float theta = static_cast<float>(pos);
              for (int32_t i = 0; i < n_rot / 2; ++i) {
                const float want_angle = fs * theta;
                QCOMPARE(rope_angle(pos, i, n_rot, base, fs), want_angle);
                theta *= theta_scale;
              }
              std::vector<float> cs(static_cast<size_t>(n_rot));
              kvmath::rope_cos_sin(n_rot, pos, base, fs, cs.data());
              for (int32_t i = 0; i < n_rot / 2; ++i) {
                QCOMPARE(cs[static_cast<size_t>(2 * i)], std::cos(rope_angle(pos, i, n_rot, base, fs)));
                QCOMPARE(cs[static_cast<size_t>(2 * i + 1)], std::sin(rope_angle(pos, i, n_rot, base, fs)));
              }
              const int32_t d = n_rot + 16;  // rope_dim may be < head_dim: the tail is untouched
              std::vector<float> x(static_cast<size_t>(d)), want;
              for (auto& v : x) v = n(rng);
              want = x;
              rope_inplace(want.data(), n_rot, pos, base, fs, neox ? RopeStyle::Neox : RopeStyle::Normal);
              std::vector<float> got = x;
              std::vector<float> bound(static_cast<size_t>(d), 0.0f);
              for (int32_t i = 0; i < n_rot / 2; ++i) {
                const float ang = rope_angle(pos, i, n_rot, base, fs);
                const float c = std::cos(ang), s = std::sin(ang);
                int32_t a, b;
                rope_pair(i, n_rot, neox, &a, &b);
                const float x0 = x[static_cast<size_t>(a)], x1 = x[static_cast<size_t>(b)];
                got[static_cast<size_t>(a)] = x0 * c - x1 * s;
                got[static_cast<size_t>(b)] = x0 * s + x1 * c;
                bound[static_cast<size_t>(a)] = bound[static_cast<size_t>(b)] =
                    4 * std::numeric_limits<float>::epsilon() * (std::fabs(x0) + std::fabs(x1));
              }
              for (size_t i = 0; i < static_cast<size_t>(d); ++i) {
                if (static_cast<int32_t>(i) >= n_rot) QCOMPARE(got[i], want[i]);
                QVERIFY2(
                    std::fabs(got[i] - want[i]) <= bound[i],
                    qPrintable(
                        QString("n_rot %1 pos %2 i %3: %4 vs %5").arg(n_rot).arg(pos).arg(i).arg(got[i]).arg(want[i])));
              }
            }
  }

  void visible_ranges_match_brute_force() {
    for (int32_t window : {0, 1, 2, 5, 16, 32})
      for (int32_t sinks : {0, 1, 4, 40})
        for (int32_t pos = 0; pos < 120; ++pos) {
          const VisibleRange r = visible_range(pos, window, sinks);
          std::vector<int32_t> got, want;
          for (int32_t i = 0; i < r.count(); ++i) got.push_back(r.position(i));
          for (int32_t k = 0; k <= pos; ++k)
            if (brute_visible(pos, k, window, sinks)) want.push_back(k);
          QVERIFY2(got == want, qPrintable(QString("window %1 sinks %2 pos %3").arg(window).arg(sinks).arg(pos)));
          for (size_t i = 0; i < want.size(); ++i) QCOMPARE(cache_position(r, want[i]), static_cast<int32_t>(i));
          for (int32_t k = -1; k <= pos + 1; ++k)
            QCOMPARE(is_visible(pos, k, window, sinks), brute_visible(pos, k, window, sinks));
          QVERIFY(r.n_sink <= r.lo);
        }
    // The union over a chunk of queries [pf, pl] (what a prefill tile loads).
    for (int32_t window : {0, 3, 16})
      for (int32_t sinks : {0, 2, 20})
        for (int32_t pf = 0; pf < 60; pf += 3)
          for (int32_t len : {1, 2, 7, 16, 40}) {
            const int32_t pl = pf + len - 1;
            std::set<int32_t> want;
            for (int32_t p = pf; p <= pl; ++p)
              for (int32_t k = 0; k <= p; ++k)
                if (brute_visible(p, k, window, sinks)) want.insert(k);
            const VisibleRange u = visible_union(pf, pl, window, sinks);
            std::vector<int32_t> got;
            for (int32_t i = 0; i < u.count(); ++i) got.push_back(u.position(i));
            QVERIFY2(got == std::vector<int32_t>(want.begin(), want.end()),
                     qPrintable(QString("union window %1 sinks %2 [%3, %4]").arg(window).arg(sinks).arg(pf).arg(pl)));
          }
    // layer_window mirrors CpuBackend::layer_window.
    QCOMPARE(layer_window(0, false, 32), 0);
    QCOMPARE(layer_window(0, true, 32), 32);
    QCOMPARE(layer_window(16, true, 32), 16);
    QCOMPARE(layer_window(64, true, 32), 32);
    QCOMPARE(layer_window(64, false, 32), 64);
    QCOMPARE(layer_window(8, true, 0), 8);
    QCOMPARE(num_partitions(1, 512), 1);
    QCOMPARE(num_partitions(512, 512), 1);
    QCOMPARE(num_partitions(513, 512), 2);
  }

  // Walking a block table run by run visits exactly the visible positions' slots, each run
  // inside one physical block, never touching a dropped block.
  void block_table_walk_matches_brute_force() {
    std::mt19937_64 rng(11);
    for (int32_t bs : {1, 4, 16})
      for (int32_t window : {0, 8, 33})
        for (int32_t sinks : {0, 3, 20})
          for (int32_t pos : {0, 5, 47, 130}) {
            const int32_t n_logical = pos / bs + 1;
            std::vector<int32_t> perm(static_cast<size_t>(n_logical + 8));
            for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
            std::shuffle(perm.begin(), perm.end(), rng);
            std::vector<int32_t> table(perm.begin(), perm.begin() + n_logical);
            const VisibleRange r = visible_range(pos, window, sinks);
            // Blocks holding no visible position were dropped by the window policy.
            for (int32_t lb = 0; lb < n_logical; ++lb) {
              bool any = false;
              for (int32_t p = lb * bs; p < (lb + 1) * bs && p <= pos; ++p) any |= brute_visible(pos, p, window, sinks);
              if (!any) table[static_cast<size_t>(lb)] = -1;
            }
            std::vector<int64_t> want, got;
            for (int32_t p = 0; p <= pos; ++p)
              if (brute_visible(pos, p, window, sinks)) {
                const int64_t s = static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs;
                QVERIFY(table[static_cast<size_t>(p / bs)] >= 0);
                want.push_back(s);
              }
            for (int32_t i = 0; i < r.count();) {
              const int32_t n = visible_run_length(r, i, bs);
              QVERIFY(n >= 1);
              const int64_t first = position_slot(table.data(), n_logical, bs, r.position(i));
              QVERIFY(first >= 0);
              for (int32_t j = 0; j < n; ++j) {
                QCOMPARE(r.position(i + j), r.position(i) + j);              // contiguous positions ...
                QCOMPARE(slot_block(first + j, bs), slot_block(first, bs));  // ... in one block
                QCOMPARE(position_slot(table.data(), n_logical, bs, r.position(i + j)), first + j);
                got.push_back(first + j);
              }
              i += n;
            }
            QCOMPARE(got, want);
            QCOMPARE(position_slot(table.data(), n_logical, bs, n_logical * bs), int64_t(-1));
          }
  }
};

QTEST_APPLESS_MAIN(TestCudaHostMath)
#include "test_cuda_host_math.moc"
