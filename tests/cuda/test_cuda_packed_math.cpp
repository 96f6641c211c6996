// The __host__ __device__ math of the CUDA backend's packed KV formats (cuda/kv_quant4_math.h),
// run on the CPU against the CPU backend's own codecs (cpu/kv_quant4.h): the same bytes
// (codes, f16 parameters, packing order) from the same rows, and the same decoded floats, for
// int4, rot4, kivi4 and kivi2, over random rows with odd row counts, groups and head dims where
// the layout allows, plus rows with ties, zeros, huge and non-finite values. Built everywhere
// (no CUDA needed): the header compiles as plain C++. The last test runs the kernels' per-thread
// work (tile addressing, store, KIVI completion, element reads) over a host copy of the pool
// against CpuKvStorage.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "../cuda/kv_quant4_math.h"
#include "cpu/cpu_kv_storage.h"
#include "cpu/kv_quant4.h"
#include "gguf/ggml_types.h"
#include "kv/kv_dtype.h"

using namespace kvscope;
namespace m4 = kvscope::kvq4math;

namespace {

// Rows of d values of a few flavours: gaussian, a wide dynamic range, ties on the code grid,
// constant (zero range), all zero, and (flavour 5) a few huge / inf / NaN entries.
std::vector<float> make_rows(int32_t n, int32_t d, int flavour, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n) * d);
  for (size_t i = 0; i < x.size(); ++i) {
    switch (flavour) {
      case 0:
        x[i] = nd(rng);
        break;
      case 1:
        x[i] = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20));
        break;
      case 2:
        x[i] = 0.5f * static_cast<float>(static_cast<int>(rng() % 31) - 15);
        break;  // ties
      case 3:
        x[i] = 1.25f;
        break;
      case 4:
        x[i] = 0.0f;
        break;
      default: {
        const uint64_t r = rng() % 23;
        x[i] = r == 0 ? INFINITY : r == 1 ? -INFINITY : r == 2 ? NAN : r == 3 ? 1e30f : r == 4 ? -7e4f : nd(rng);
      }
    }
  }
  return x;
}

bool same_bits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub || (std::isnan(a) && std::isnan(b));
}

struct Shape {
  int32_t d, g;
};
// head dims / groups the layout allows (g divides d, d * bits whole bytes); odd counts of groups.
const Shape kShapes[] = {{8, 8},    {24, 8},    {40, 8},   {64, 32}, {96, 32},
                         {128, 32}, {128, 128}, {256, 64}, {48, 16}, {12, 4}};

}  // namespace

class TestCudaPackedMath : public QObject {
  Q_OBJECT
 private slots:
  void f16_matches_core() {
    for (uint32_t h = 0; h < 65536; ++h)
      QVERIFY2(same_bits(m4::f16_bits_to_f32(static_cast<uint16_t>(h)), fp16_to_fp32(static_cast<uint16_t>(h))),
               qPrintable(QString::number(h, 16)));
    std::mt19937_64 rng(3);
    for (int i = 0; i < 2000000; ++i) {
      const auto u = static_cast<uint32_t>(rng());
      float f;
      std::memcpy(&f, &u, 4);
      QCOMPARE(m4::f32_to_f16_bits(f), fp32_to_fp16(f));
    }
    for (float f : {0.0f, -0.0f, 65504.0f, 65519.996f, 65520.0f, 5.9604645e-8f, 2.9802322e-8f, 8.940697e-8f, INFINITY,
                    -INFINITY, NAN, 6.1035156e-5f, 6.1035152e-5f})
      QCOMPARE(m4::f32_to_f16_bits(f), fp32_to_fp16(f));
  }

  void rounding_matches_lround() {
    std::mt19937_64 rng(5);
    for (float v : {0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 0.49999997f, 7.5f, -7.5f, 8.0f, 1e10f, -1e10f, 3e9f, 9.3e18f, 1e30f,
                    INFINITY, -INFINITY, NAN})
      for (int32_t hi : {7, 15, 3}) {
        const int32_t lo = hi == 7 ? -7 : 0;
        const auto r = static_cast<int32_t>(std::lround(v));
        QCOMPARE(m4::round_clamp(v, lo, hi), r < lo ? lo : (r > hi ? hi : r));
      }
    for (int i = 0; i < 200000; ++i) {
      const float v = std::ldexp(static_cast<float>(static_cast<int64_t>(rng() % 2000001) - 1000000), -16);
      const auto r = static_cast<int32_t>(std::lround(v));
      QCOMPARE(m4::round_clamp(v, -7, 7), r < -7 ? -7 : (r > 7 ? 7 : r));
    }
  }

  void rotation_matches_core() {
    for (int32_t i = 0; i < 4096; ++i) QCOMPARE(m4::rotation_sign(i), kvq4::rotation_sign(i));
    std::mt19937_64 rng(7);
    for (int32_t d : {8, 16, 64, 128, 256, 512}) {
      std::vector<float> a = make_rows(1, d, 1, rng), b = a;
      m4::rotate(a.data(), d);
      kvq4::rotate(b.data(), d);
      for (int32_t i = 0; i < d; ++i) QVERIFY(same_bits(a[i], b[i]));
      m4::unrotate(a.data(), d);
      kvq4::unrotate(b.data(), d);
      for (int32_t i = 0; i < d; ++i) QVERIFY(same_bits(a[i], b[i]));
    }
  }

  // int4 (and rot4, which is int4 of the rotated row): same bytes, same decoded values.
  void int4_rows_match_core() {
    std::mt19937_64 rng(11);
    for (const Shape& s : kShapes)
      for (int flavour = 0; flavour < 6; ++flavour)
        for (bool rot : {false, true}) {
          if (rot && (s.d & (s.d - 1)) != 0) continue;
          std::vector<float> x = make_rows(5, s.d, flavour, rng);
          const int32_t bytes = s.d / 2 + 2 * (s.d / s.g);
          for (int32_t r = 0; r < 5; ++r) {
            std::vector<float> a(x.begin() + r * s.d, x.begin() + (r + 1) * s.d), b = a;
            if (rot) m4::rotate(a.data(), s.d), kvq4::rotate(b.data(), s.d);
            std::vector<uint8_t> ra(static_cast<size_t>(bytes), 0xAB), rb(static_cast<size_t>(bytes), 0xCD);
            m4::encode_int4_row(a.data(), s.d, s.g, ra.data());
            kvq4::encode_int4_row(b.data(), s.d, s.g, rb.data());
            QVERIFY2(ra == rb,
                     qPrintable(QString("d %1 g %2 flavour %3 rot %4").arg(s.d).arg(s.g).arg(flavour).arg(rot)));
            std::vector<float> y(static_cast<size_t>(s.d));
            kvq4::decode_int4_row_scalar(rb.data(), s.d, s.g, y.data());
            for (int32_t i = 0; i < s.d; ++i)
              QVERIFY(same_bits(m4::int4_row_value(ra.data(), s.d, s.g, i), y[static_cast<size_t>(i)]));
          }
        }
  }

  // KIVI values: asymmetric per token, 4 and 2 bits.
  void kivi_value_rows_match_core() {
    std::mt19937_64 rng(13);
    for (const Shape& s : kShapes)
      for (int32_t bits : {4, 2}) {
        if ((s.d * bits) % 8 != 0) continue;
        for (int flavour = 0; flavour < 6; ++flavour) {
          std::vector<float> x = make_rows(3, s.d, flavour, rng);
          const int32_t bytes = s.d * bits / 8 + 4 * (s.d / s.g);
          for (int32_t r = 0; r < 3; ++r) {
            const float* row = x.data() + r * s.d;
            std::vector<uint8_t> ra(static_cast<size_t>(bytes), 0x11), rb(static_cast<size_t>(bytes), 0x22);
            m4::encode_asym_row(row, s.d, s.g, bits, ra.data());
            kvq4::encode_asym_row(row, s.d, s.g, bits, rb.data());
            QVERIFY2(ra == rb,
                     qPrintable(QString("d %1 g %2 bits %3 flavour %4").arg(s.d).arg(s.g).arg(bits).arg(flavour)));
            std::vector<float> y(static_cast<size_t>(s.d));
            kvq4::decode_asym_row_scalar(rb.data(), s.d, s.g, bits, y.data());
            for (int32_t i = 0; i < s.d; ++i)
              QVERIFY(same_bits(m4::asym_row_value(ra.data(), s.d, s.g, bits, i), y[static_cast<size_t>(i)]));
          }
        }
      }
  }

  // KIVI keys: per channel over a block's rows, every block size, a code stride with padding.
  void kivi_key_tiles_match_core() {
    std::mt19937_64 rng(17);
    for (int32_t d : {8, 12, 64, 128, 256})
      for (int32_t bits : {4, 2})
        for (int32_t n : {2, 8, 16, 32, 128})
          for (int flavour = 0; flavour < 6; ++flavour) {
            if ((d * bits) % 8 != 0) continue;
            const std::vector<float> x = make_rows(n, d, flavour, rng);
            const int64_t stride = d * bits / 8 + 3;  // padding bytes must be left alone
            std::vector<uint8_t> ca(static_cast<size_t>(n * stride), 0x5A), cb = ca;
            std::vector<uint8_t> pa(static_cast<size_t>(4 * d), 0), pb(static_cast<size_t>(4 * d), 1);
            m4::encode_channel_tile(x.data(), n, d, bits, ca.data(), stride, pa.data());
            kvq4::encode_channel_tile(x.data(), n, d, bits, cb.data(), stride, pb.data());
            QVERIFY2(ca == cb && pa == pb,
                     qPrintable(QString("d %1 bits %2 n %3 flavour %4").arg(d).arg(bits).arg(n).arg(flavour)));
            // The device's parallel form: each channel's parameters from channel_params alone.
            // The device's parallel form: each channel's parameters from channel_params alone,
            // each code byte from channel_code_byte alone.
            const int32_t levels = (1 << bits) - 1;
            auto val = [&](int32_t r, int32_t c) { return x[static_cast<size_t>(r) * d + c]; };
            std::vector<float> ss(static_cast<size_t>(d)), mns(static_cast<size_t>(d));
            for (int32_t c = 0; c < d; ++c) {
              m4::channel_params(val, n, c, levels, &ss[static_cast<size_t>(c)], &mns[static_cast<size_t>(c)]);
              QCOMPARE(m4::param_f16(ss[static_cast<size_t>(c)]),
                       static_cast<uint16_t>(pb[4 * c] | pb[4 * c + 1] << 8));
              QCOMPARE(m4::param_f16(mns[static_cast<size_t>(c)]),
                       static_cast<uint16_t>(pb[4 * c + 2] | pb[4 * c + 3] << 8));
            }
            for (int32_t r = 0; r < n; ++r)
              for (int32_t j = 0; j < d * bits / 8; ++j)
                QCOMPARE(m4::channel_code_byte(val, r, j, bits, ss.data(), mns.data()),
                         cb[static_cast<size_t>(r * stride + j)]);
            std::vector<float> y(static_cast<size_t>(n) * d);
            kvq4::decode_channel_rows_scalar(cb.data(), stride, pb.data(), n, d, bits, y.data());
            for (int32_t r = 0; r < n; ++r)
              for (int32_t c = 0; c < d; ++c)
                QVERIFY(same_bits(m4::channel_value(ca.data(), stride, pa.data(), bits, r, c),
                                  y[static_cast<size_t>(r) * d + c]));
          }
  }

  // The residual (f16 rows until a KIVI block completes) decodes as the CPU's decode_f16_rows.
  void residual_rows_match_core() {
    std::mt19937_64 rng(19);
    const std::vector<float> x = make_rows(4, 64, 1, rng);
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = m4::f32_to_f16_bits(x[i]);
    std::vector<float> y(x.size());
    kvq4::decode_f16_rows_scalar(h.data(), 4, 64, y.data());
    for (size_t i = 0; i < x.size(); ++i) QVERIFY(same_bits(m4::f16_bits_to_f32(h[i]), y[i]));
  }

  // The CUDA kernels' per-thread work (store_int4_row, complete_key_channel / complete_key_byte /
  // complete_value_row over the f16 residual, tile_value reads), run serially over a host copy
  // of the device pool laid out as CudaBackend lays it out (kv_row_bytes / kv_tile_extra_bytes
  // tiles, residual [kv_head][slot][head_dim]), reads back exactly what CpuKvStorage::load_rows
  // returns for the same rows: full blocks, and (KIVI) a partial block still in the residual.
  void kernel_work_reads_back_like_cpu_storage_data() {
    QTest::addColumn<QString>("kv");
    QTest::addColumn<int>("group");
    QTest::addColumn<int>("block_size");
    for (const char* k : {"int4", "rot4", "kivi4", "kivi2"})
      for (int g : {0, 16, 8})
        for (int bs : {8, 16})
          QTest::newRow(qPrintable(QString("%1 g%2 bs%3").arg(k).arg(g).arg(bs))) << QString(k) << g << bs;
  }
  void kernel_work_reads_back_like_cpu_storage() {
    QFETCH(QString, kv);
    QFETCH(int, group);
    QFETCH(int, block_size);
    const KvDtype t = *parse_kv_dtype(kv.toStdString());
    const int32_t D = 64, n_kv = 2, bs = block_size, n_blocks = 3;
    m4::PackedGeom g;
    g.n_head_kv = n_kv, g.head_dim = D, g.block_size = bs, g.group = kv_effective_group(group, D);
    g.bits = kv_code_bits(t), g.kivi = kv_dtype_kivi(t), g.rot = kv_dtype_rotated(t);
    for (int v = 0; v < 2; ++v) {
      g.row_bytes[v] = kv_row_bytes(t, v, D, group);
      g.tile_bytes[v] = g.row_bytes[v] * bs + kv_tile_extra_bytes(t, v, D, bs);
    }
    CpuKvStorage cpu;
    cpu.init(KvLayout{1, n_kv, D, bs, n_blocks, t, group});
    std::vector<uint8_t> pool[2] = {std::vector<uint8_t>(static_cast<size_t>(n_blocks * n_kv * g.tile_bytes[0])),
                                    std::vector<uint8_t>(static_cast<size_t>(n_blocks * n_kv * g.tile_bytes[1]))};
    std::vector<uint16_t> res[2][3];  // [K/V][block]: [kv_head][slot][D] f16 while the block fills
    std::mt19937_64 rng(static_cast<uint64_t>(group * 7 + bs));
    // Blocks 2 and 0 filled completely, block 1 to 3 slots (in that order: shuffled tables).
    std::vector<int64_t> slot_ids;
    for (int32_t i = 0; i < bs; ++i) slot_ids.push_back(2 * bs + i);
    for (int32_t i = 0; i < bs; ++i) slot_ids.push_back(i);
    for (int32_t i = 0; i < 3; ++i) slot_ids.push_back(bs + i);
    for (int64_t slot : slot_ids) {
      const int32_t b = static_cast<int32_t>(slot / bs), off = static_cast<int32_t>(slot % bs);
      for (int v = 0; v < 2; ++v)
        for (int32_t h = 0; h < n_kv; ++h) {
          std::vector<float> x = make_rows(1, D, static_cast<int>(rng() % 3), rng);
          cpu.store(0, v, slot, h, x.data());
          uint8_t* tile = pool[v].data() + m4::tile_offset_bytes(g, v, b, h);
          if (!g.kivi) {
            m4::store_int4_row(g, x.data(), tile, v, off);
            continue;
          }
          auto& r = res[v][b];
          if (r.empty()) r.assign(static_cast<size_t>(n_kv * bs * D), 0);
          for (int32_t e = 0; e < D; ++e)
            r[static_cast<size_t>(m4::residual_offset(g, h, off) + e)] = m4::f32_to_f16_bits(x[static_cast<size_t>(e)]);
        }
      if (g.kivi && off == bs - 1)  // launch_kivi_complete's grid: every (K/V, head) tile of the block
        for (int v = 0; v < 2; ++v) {
          for (int32_t h = 0; h < n_kv; ++h) {
            const uint16_t* rr = res[v][b].data() + m4::residual_offset(g, h, 0);
            uint8_t* tile = pool[v].data() + m4::tile_offset_bytes(g, v, b, h);
            if (!v) {
              std::vector<float> s(static_cast<size_t>(D)), mn(static_cast<size_t>(D));
              for (int32_t c = 0; c < D; ++c)
                m4::complete_key_channel(g, rr, tile, c, &s[static_cast<size_t>(c)], &mn[static_cast<size_t>(c)]);
              for (int32_t i = 0; i < bs * D * g.bits / 8; ++i)
                m4::complete_key_byte(g, rr, tile, i, s.data(), mn.data());
            } else {
              for (int32_t row = 0; row < bs; ++row) m4::complete_value_row(g, rr, tile, row);
            }
          }
          res[v][b].clear();
        }
    }
    std::vector<float> want(static_cast<size_t>(bs) * D);
    for (int32_t b = 0; b < n_blocks; ++b)
      for (int v = 0; v < 2; ++v)
        for (int32_t h = 0; h < n_kv; ++h) {
          const int32_t n = b == 1 ? 3 : bs;
          QCOMPARE(g.kivi && b == 1, cpu.in_residual(0, v, b, h));
          const float* ref = cpu.load_rows(0, v, b, h, 0, n, want.data());
          const uint8_t* tile = pool[v].data() + m4::tile_offset_bytes(g, v, b, h);
          for (int32_t sl = 0; sl < n; ++sl)
            for (int32_t e = 0; e < D; ++e) {
              const float got =
                  g.kivi && b == 1
                      ? m4::f16_bits_to_f32(res[v][b][static_cast<size_t>(m4::residual_offset(g, h, sl) + e)])
                      : m4::tile_value(g, tile, v, sl, e);
              QVERIFY2(same_bits(got, ref[sl * D + e]),
                       qPrintable(QString("block %1 %2 head %3 slot %4 elem %5: %6 vs cpu %7")
                                      .arg(b)
                                      .arg(v ? "V" : "K")
                                      .arg(h)
                                      .arg(sl)
                                      .arg(e)
                                      .arg(got)
                                      .arg(ref[sl * D + e])));
            }
        }
  }
};

QTEST_APPLESS_MAIN(TestCudaPackedMath)
#include "test_cuda_packed_math.moc"
