// The CUDA kernels of the packed 4/2-bit KV formats against the CPU codecs, at the kernel level:
//  * device_codecs_match_cpu: kv_quant4_math.h run on the device (launch_packed_selftest) gives
//    the CPU encoders' bytes and decoders' floats (cpu/kv_quant4.h), bit for bit;
//  * store_read_back_matches_cpu: launch_qkv_rope_store (+ launch_kivi_complete) writes K/V rows
//    into a device pool; the tiles read back are byte-identical to what the CPU codecs make of
//    the same rows, and decode (with the CPU's decoders) to exactly what CpuKvStorage::load_rows
//    returns after storing the same rows on the CPU: a full block (KIVI: quantized) and a partial
//    one (KIVI: still in the f16 residual).
// Without a CUDA device (or without CUDA in the build) main() exits 77 (ctest: skipped).
#include <QtTest>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"

#ifdef KVSCOPE_WITH_CUDA
#include <cuda_runtime.h>

#include "cpu/cpu_kv_storage.h"
#include "cpu/kv_quant4.h"
#include "cuda_backend.h"
#include "cuda_kernels.cuh"
#include "gguf/ggml_types.h"

using namespace kvscope;

namespace {

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)) != cudaSuccess) qFatal("cudaMalloc failed");
  cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}
template <typename T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}
bool same_bits(float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}
float f16_round(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

cuda::PackedKv packed_of(KvDtype t) {
  switch (t) {
    case KvDtype::INT4:
      return cuda::PackedKv::INT4;
    case KvDtype::ROT4:
      return cuda::PackedKv::ROT4;
    case KvDtype::KIVI4:
      return cuda::PackedKv::KIVI4;
    case KvDtype::KIVI2:
      return cuda::PackedKv::KIVI2;
    default:
      return cuda::PackedKv::None;
  }
}

}  // namespace
#endif

class TestCudaPackedKv : public QObject {
  Q_OBJECT
 private slots:
  void device_codecs_match_cpu();
  void store_read_back_matches_cpu_data();
  void store_read_back_matches_cpu();
};

#ifdef KVSCOPE_WITH_CUDA

void TestCudaPackedKv::device_codecs_match_cpu() {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd;
  struct Shape {
    int32_t d, g, bits;
  };
  for (const Shape s : {Shape{128, 32, 4}, Shape{128, 32, 2}, Shape{64, 64, 4}, Shape{24, 8, 2}, Shape{40, 8, 4}}) {
    const int32_t n = 333;  // not a multiple of the 64-thread blocks
    std::vector<float> x(static_cast<size_t>(n) * s.d);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 12) - 6));
    const int64_t b4 = s.d / 2 + 2 * (s.d / s.g), ba = s.d * s.bits / 8 + 4 * (s.d / s.g);
    float* dx = to_device(x);
    uint8_t *r4, *ra;
    float *y4, *ya;
    QCOMPARE(cudaMalloc(&r4, n * b4), cudaSuccess);
    QCOMPARE(cudaMalloc(&ra, n * ba), cudaSuccess);
    QCOMPARE(cudaMalloc(&y4, x.size() * 4), cudaSuccess);
    QCOMPARE(cudaMalloc(&ya, x.size() * 4), cudaSuccess);
    cuda::launch_packed_selftest(dx, n, s.d, s.g, s.bits, r4, ra, y4, ya, nullptr);
    QCOMPARE(cudaDeviceSynchronize(), cudaSuccess);
    const auto h4 = to_host(r4, static_cast<size_t>(n * b4)), ha = to_host(ra, static_cast<size_t>(n * ba));
    const auto hy4 = to_host(y4, x.size()), hya = to_host(ya, x.size());
    for (void* p : {static_cast<void*>(dx), static_cast<void*>(r4), static_cast<void*>(ra), static_cast<void*>(y4),
                    static_cast<void*>(ya)})
      cudaFree(p);
    int bad = 0;
    std::vector<uint8_t> e4(static_cast<size_t>(b4)), ea(static_cast<size_t>(ba));
    std::vector<float> d4(static_cast<size_t>(s.d)), da(static_cast<size_t>(s.d));
    for (int32_t r = 0; r < n; ++r) {
      const float* row = x.data() + static_cast<int64_t>(r) * s.d;
      kvq4::encode_int4_row(row, s.d, s.g, e4.data());
      kvq4::encode_asym_row(row, s.d, s.g, s.bits, ea.data());
      kvq4::decode_int4_row_scalar(e4.data(), s.d, s.g, d4.data());
      kvq4::decode_asym_row_scalar(ea.data(), s.d, s.g, s.bits, da.data());
      bool ok = std::memcmp(e4.data(), h4.data() + r * b4, static_cast<size_t>(b4)) == 0 &&
                std::memcmp(ea.data(), ha.data() + r * ba, static_cast<size_t>(ba)) == 0;
      for (int32_t i = 0; i < s.d; ++i)
        ok = ok && same_bits(d4[static_cast<size_t>(i)], hy4[static_cast<size_t>(r) * s.d + i]) &&
             same_bits(da[static_cast<size_t>(i)], hya[static_cast<size_t>(r) * s.d + i]);
      if (!ok && bad++ < 3) qWarning("d %d g %d bits %d: row %d differs", s.d, s.g, s.bits, r);
    }
    QCOMPARE(bad, 0);
  }
}

void TestCudaPackedKv::store_read_back_matches_cpu_data() {
  QTest::addColumn<int>("kv");
  QTest::addColumn<int>("group");
  for (const char* n : {"int4", "rot4", "kivi4", "kivi2"})
    for (int g : {0, 16})
      QTest::newRow((std::string(n) + " group " + std::to_string(g)).c_str())
          << static_cast<int>(*parse_kv_dtype(n)) << g;
}

void TestCudaPackedKv::store_read_back_matches_cpu() {
  QFETCH(int, kv);
  QFETCH(int, group);
  const KvDtype dtype = static_cast<KvDtype>(kv);
  const int32_t D = 64, n_kv = 2, n_head = 4, bs = 16, n_blocks = 4;
  const int32_t Q = n_head * D, KV = n_kv * D, W = Q + 2 * KV;
  // Block 2 filled completely (KIVI: quantized by launch_kivi_complete), block 0 partly (5 slots).
  std::vector<int64_t> slot_ids;
  for (int32_t i = 0; i < bs; ++i) slot_ids.push_back(2 * bs + i);
  for (int32_t i = 0; i < 5; ++i) slot_ids.push_back(i);
  const int32_t n = static_cast<int32_t>(slot_ids.size());
  std::mt19937_64 rng(static_cast<uint64_t>(kv * 31 + group));
  std::normal_distribution<float> nd;
  std::vector<float> qkv(static_cast<size_t>(n) * W);
  for (float& v : qkv) v = nd(rng);
  for (int32_t c = 0; c < D; c += 7)  // a few outlier channels: KIVI's per-channel keys care
    for (int32_t t = 0; t < n; ++t) qkv[static_cast<size_t>(t) * W + Q + c] *= 20.0f;

  const KvLayout L{1, n_kv, D, bs, n_blocks, dtype, group};
  int64_t row_bytes[2], tile_bytes[2];
  for (int v = 0; v < 2; ++v) {
    row_bytes[v] = kv_row_bytes(dtype, v, D, group);
    tile_bytes[v] = row_bytes[v] * bs + kv_tile_extra_bytes(dtype, v, D, bs);
  }
  const bool kivi = kv_dtype_kivi(dtype);
  const int64_t res_stride = 2LL * n_kv * bs * D;  // one layer: [K, V][head][slot][D]
  std::vector<int32_t> positions(static_cast<size_t>(n)), res_slot(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) {
    positions[static_cast<size_t>(t)] = t;
    res_slot[static_cast<size_t>(t)] = slot_ids[static_cast<size_t>(t)] / bs == 2 ? 0 : 1;
  }
  const std::vector<int32_t> res_of_block = {1, -1, -1, -1}, complete = {2, 0};
  float* d_qkv = to_device(qkv);
  int64_t* d_slots = to_device(slot_ids);
  int32_t* d_pos = to_device(positions);
  int32_t* d_res_slot = to_device(res_slot);
  int32_t* d_map = to_device(res_of_block);
  int32_t* d_complete = to_device(complete);
  int32_t* d_err = to_device(std::vector<int32_t>{0});
  uint8_t* d_k = to_device(std::vector<uint8_t>(static_cast<size_t>(n_blocks * n_kv * tile_bytes[0]), 0));
  uint8_t* d_v = to_device(std::vector<uint8_t>(static_cast<size_t>(n_blocks * n_kv * tile_bytes[1]), 0));
  uint16_t* d_res = to_device(std::vector<uint16_t>(static_cast<size_t>(2 * res_stride), 0));

  cuda::QkvParams p;
  p.qkv = d_qkv;
  p.positions = d_pos;
  p.slot_mapping = d_slots;
  p.res_slot = kivi ? d_res_slot : nullptr;
  p.n_tokens = n;
  p.n_head = n_head;
  p.rope_dim = D;
  p.rope = false;  // raw rows: what is stored is exactly the input
  p.kv.n_head_kv = n_kv;
  p.kv.head_dim = D;
  p.kv.block_size = bs;
  p.kv.num_blocks = n_blocks;
  p.kv.packed = packed_of(dtype);
  p.kv.group = kv_effective_group(group, D);
  for (int v = 0; v < 2; ++v) p.kv.row_bytes[v] = row_bytes[v], p.kv.tile_bytes[v] = tile_bytes[v];
  p.kv.res_of_block = d_map;
  p.kv.res_stride = res_stride;
  p.k.data = d_k;
  p.v.data = d_v;
  p.k.residual = d_res;
  p.v.residual = d_res + n_kv * bs * D;
  p.error = d_err;
  cuda::launch_qkv_rope_store(p, nullptr);
  cuda::StepPtrs sp;
  sp.kivi_complete = d_complete;
  sp.n_complete = 1;
  cuda::launch_kivi_complete(p.kv, p.k, p.v, sp, nullptr);
  QCOMPARE(cudaDeviceSynchronize(), cudaSuccess);
  QCOMPARE(to_host(d_err, 1)[0], 0);
  const auto hk = to_host(d_k, static_cast<size_t>(n_blocks * n_kv * tile_bytes[0]));
  const auto hv = to_host(d_v, static_cast<size_t>(n_blocks * n_kv * tile_bytes[1]));
  const auto hres = to_host(d_res, static_cast<size_t>(2 * res_stride));
  for (void* q :
       {static_cast<void*>(d_qkv), static_cast<void*>(d_slots), static_cast<void*>(d_pos),
        static_cast<void*>(d_res_slot), static_cast<void*>(d_map), static_cast<void*>(d_complete),
        static_cast<void*>(d_err), static_cast<void*>(d_k), static_cast<void*>(d_v), static_cast<void*>(d_res)})
    cudaFree(q);

  CpuKvStorage cpu;
  cpu.init(L);
  for (int32_t t = 0; t < n; ++t)
    for (int32_t h = 0; h < n_kv; ++h)
      for (bool v : {false, true})
        cpu.store(0, v, slot_ids[static_cast<size_t>(t)], h,
                  qkv.data() + static_cast<size_t>(t) * W + Q + (v ? KV : 0) + h * D);

  const int32_t g = kv_effective_group(group, D), bits = kv_code_bits(dtype);
  auto row_of = [&](int32_t t, bool v, int32_t h) {
    return qkv.data() + static_cast<size_t>(t) * W + Q + (v ? KV : 0) + h * D;
  };
  std::vector<float> want(static_cast<size_t>(bs) * D), got(static_cast<size_t>(bs) * D);
  for (int32_t h = 0; h < n_kv; ++h)
    for (bool v : {false, true}) {
      const auto& tiles = v ? hv : hk;
      // Block 2, complete: the CPU codec's bytes of the same rows (KIVI: of their f16 values).
      const uint8_t* tile = tiles.data() + (2 * n_kv + h) * tile_bytes[v];
      std::vector<uint8_t> expect(static_cast<size_t>(tile_bytes[v]), 0);
      std::vector<float> rows(static_cast<size_t>(bs) * D);
      for (int32_t s = 0; s < bs; ++s)
        for (int32_t e = 0; e < D; ++e)
          rows[static_cast<size_t>(s) * D + e] = kivi ? f16_round(row_of(s, v, h)[e]) : row_of(s, v, h)[e];
      if (dtype == KvDtype::ROT4)
        for (int32_t s = 0; s < bs; ++s) kvq4::rotate(rows.data() + static_cast<size_t>(s) * D, D);
      if (!kivi) {
        for (int32_t s = 0; s < bs; ++s)
          kvq4::encode_int4_row(rows.data() + static_cast<size_t>(s) * D, D, g, expect.data() + s * row_bytes[v]);
      } else if (!v) {
        kvq4::encode_channel_tile(rows.data(), bs, D, bits, expect.data(), row_bytes[0],
                                  expect.data() + bs * row_bytes[0]);
      } else {
        for (int32_t s = 0; s < bs; ++s)
          kvq4::encode_asym_row(rows.data() + static_cast<size_t>(s) * D, D, g, bits, expect.data() + s * row_bytes[1]);
      }
      QVERIFY2(
          std::memcmp(expect.data(), tile, static_cast<size_t>(tile_bytes[v])) == 0,
          qPrintable(QString("head %1 %2: device tile bytes differ from the CPU codec's").arg(h).arg(v ? "V" : "K")));
      // ... and decode to what the CPU storage reads back.
      if (!kivi) {
        for (int32_t s = 0; s < bs; ++s)
          kvq4::decode_int4_row_scalar(tile + s * row_bytes[v], D, g, got.data() + static_cast<size_t>(s) * D);
      } else if (!v) {
        kvq4::decode_channel_rows_scalar(tile, row_bytes[0], tile + bs * row_bytes[0], bs, D, bits, got.data());
      } else {
        for (int32_t s = 0; s < bs; ++s)
          kvq4::decode_asym_row_scalar(tile + s * row_bytes[1], D, g, bits, got.data() + static_cast<size_t>(s) * D);
      }
      const float* ref = cpu.load_rows(0, v, 2, h, 0, bs, want.data());
      for (int32_t i = 0; i < bs * D; ++i) QVERIFY(same_bits(got[static_cast<size_t>(i)], ref[i]));
      // Block 0, 5 slot_ids: int4/rot4 rows as above; KIVI rows still f16 in the residual.
      const float* ref0 = cpu.load_rows(0, v, 0, h, 0, 5, want.data());
      for (int32_t s = 0; s < 5; ++s)
        for (int32_t e = 0; e < D; ++e) {
          float y;
          if (kivi) {
            QVERIFY(cpu.in_residual(0, v, 0, h));
            y = fp16_to_fp32(hres[static_cast<size_t>(res_stride + (v ? n_kv * bs * D : 0) + (h * bs + s) * D + e)]);
          } else {
            std::vector<float> dec(static_cast<size_t>(D));
            kvq4::decode_int4_row_scalar(tiles.data() + h * tile_bytes[v] + s * row_bytes[v], D, g, dec.data());
            y = dec[static_cast<size_t>(e)];
          }
          QVERIFY(same_bits(y, ref0[s * D + e]));
        }
    }
}

#else  // built without CUDA: main() exits 77 before any of these run

void TestCudaPackedKv::device_codecs_match_cpu() { QSKIP("built without CUDA"); }
void TestCudaPackedKv::store_read_back_matches_cpu_data() {}
void TestCudaPackedKv::store_read_back_matches_cpu() { QSKIP("built without CUDA"); }

#endif

int main(int argc, char** argv) {
#ifndef KVSCOPE_WITH_CUDA
  (void)argc;
  (void)argv;
  std::printf("SKIP: kvscope was built without CUDA (no nvcc at configure time); GPU tests not run\n");
  return 77;
#else
  std::string why;
  if (!kvscope::cuda_device_available(&why)) {
    std::printf("SKIP: %s; GPU tests not run\n", why.c_str());
    return 77;
  }
  std::printf("CUDA device: %s\n", why.c_str());
  TestCudaPackedKv t;
  return QTest::qExec(&t, argc, argv);
#endif
}

#include "test_cuda_packed_kv.moc"
