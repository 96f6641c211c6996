// Matrix-kernel benchmark: the GEMM (cpu/gemm.h) against the vec-dot loop it replaced, on the
// shapes of the benchmark models, plus the two machine limits the README compares them with:
//   int8 peak   measured: every thread runs 16 independent vpdpbusd zmm chains (64 multiply-adds
//               = 128 int8 ops each) for a fixed count; peak = ops / wall time, all threads;
//   bandwidth   STREAM-like read: every thread sums its part of a 1 GiB buffer (AVX2 loads),
//               best of 5 passes, GB/s.
// JSON on stdout. Built and run by benchmarks/run.sh (links build-*/core/libkvscope_core.a):
//   gemm_bench [--threads 2] [--reps 5] [--quick] [--low-bit]
// --low-bit runs only the Q2_K / Q3_K / IQ4_NL / IQ4_XS / MXFP4 cases (random blocks: kvscope has no
// quantizer for them) beside Q4_K on the same shape, so their speed can be read against it.
// Alternating runs: old and new are timed in turn, rep by rep, and the medians reported.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <immintrin.h>

#include "cpu/gemm.h"
#include "cpu/matmul.h"
#include "cpu/thread_pool.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf_file.h"

using namespace kvscope;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

__attribute__((target("avx512f,avx512vnni"))) uint64_t dpbusd_loop(int64_t iters) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) {
      acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
      asm volatile("" : "+v"(acc[i]));
    }
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  return static_cast<uint64_t>(_mm512_reduce_add_epi32(s));
}

double int8_peak_gops(int threads) {
  if (!gemm_isa_supported(GemmIsa::Avx512Vnni)) return 0;
  const int64_t iters = 20'000'000;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<std::thread> th;
    std::atomic<uint64_t> sink{0};
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t) th.emplace_back([&] { sink += dpbusd_loop(iters); });
    for (auto& t : th) t.join();
    const double s = seconds_since(t0);
    best = std::max(best, double(threads) * iters * 16 * 128 / s / 1e9);
  }
  return best;
}

__attribute__((target("avx2"))) uint64_t sum_bytes(const uint8_t* p, size_t n) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    acc0 = _mm256_add_epi64(acc0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_add_epi64(acc1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    acc2 = _mm256_add_epi64(acc2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    acc3 = _mm256_add_epi64(acc3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(acc0, acc1), _mm256_add_epi64(acc2, acc3));
  alignas(32) uint64_t v[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
  return v[0] + v[1] + v[2] + v[3];
}

double read_bandwidth_gbs(int threads) {
  const size_t n = size_t{1} << 30;
  std::vector<uint8_t> buf(n, 1);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<std::thread> th;
    std::atomic<uint64_t> sink{0};
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t)
      th.emplace_back([&, t] { sink += sum_bytes(buf.data() + n / threads * t, n / threads); });
    for (auto& t : th) t.join();
    best = std::max(best, double(n) / seconds_since(t0) / 1e9);
  }
  return best;
}

struct Case {
  const char* what;
  GgmlType type;
  int64_t k, n;  // in features, out rows
};

// Random blocks with finite f16 scales for the types kvscope cannot quantize (its reference
// quantizers stop at Q6_K); the kernels' speed does not depend on the values.
std::vector<uint8_t> random_weights(GgmlType type, int64_t k, int64_t n, std::mt19937& rng) {
  const GgmlTypeInfo ti = ggml_type_info(type);
  std::vector<uint8_t> w(ggml_row_bytes(type, k) * static_cast<size_t>(n));
  for (auto& b : w) b = static_cast<uint8_t>(rng() & 0xFF);
  std::vector<size_t> halves = {0};
  if (type == GgmlType::Q2_K) halves = {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
  if (type == GgmlType::Q3_K) halves = {offsetof(BlockQ3_K, d)};
  if (type == GgmlType::MXFP4) halves = {};  // one E8M0 byte, set below
  std::normal_distribution<float> scale(0.0f, 0.01f);
  for (size_t b = 0; b < w.size() / ti.block_bytes; ++b)
    for (size_t off : halves) {
      const uint16_t h = fp32_to_fp16(scale(rng));
      std::memcpy(w.data() + b * ti.block_bytes + off, &h, 2);
    }
  if (type == GgmlType::MXFP4)
    for (size_t b = 0; b < w.size() / ti.block_bytes; ++b) w[b * ti.block_bytes] = 121;  // 2^-6
  return w;
}

bool quantizable(GgmlType t) {
  return t != GgmlType::Q2_K && t != GgmlType::Q3_K && t != GgmlType::IQ4_NL && t != GgmlType::IQ4_XS &&
         t != GgmlType::MXFP4;
}

// The case's weight matrix: quantized normal values, or random blocks where kvscope has no quantizer.
std::vector<uint8_t> case_weights(const Case& c, std::mt19937& rng) {
  if (!quantizable(c.type)) return random_weights(c.type, c.k, c.n, rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(c.k * c.n));
  for (auto& v : wf) v = 0.05f * dist(rng);
  const size_t rb = ggml_row_bytes(c.type, c.k);
  std::vector<uint8_t> wq(rb * static_cast<size_t>(c.n));
  for (int64_t r = 0; r < c.n; ++r) quantize_row(c.type, wf.data() + r * c.k, wq.data() + r * rb, c.k);
  return wq;
}

std::vector<Case> bench_cases(bool low_bit) {
  // gemma-3-270m (E 640, FFN 2048, 4 x 256 q heads, 1 x 256 kv) and the 110M llama (E 768, FFN 2048).
  const std::vector<Case> low_bit_cases = {
      {"ffn_down 2048->640 q4_K", GgmlType::Q4_K, 2048, 640},
      {"ffn_down 2048->640 q2_K", GgmlType::Q2_K, 2048, 640},
      {"ffn_down 2048->640 q3_K", GgmlType::Q3_K, 2048, 640},
      {"ffn_down 2048->640 iq4_xs", GgmlType::IQ4_XS, 2048, 640},
      {"ffn_down 2048->640 iq4_nl", GgmlType::IQ4_NL, 2048, 640},
      {"ffn_down 2048->640 mxfp4", GgmlType::MXFP4, 2048, 640},
  };
  const std::vector<Case> all_cases = {
      {"gemma ffn_up/gate 640->2048 q5_0", GgmlType::Q5_0, 640, 2048},
      {"gemma attn_q 640->1024 q8_0", GgmlType::Q8_0, 640, 1024},
      {"gemma ffn_down 2048->640 q4_K", GgmlType::Q4_K, 2048, 640},
      {"gemma ffn_down 2048->640 q6_K", GgmlType::Q6_K, 2048, 640},
      {"llama110m ffn_up 768->2048 q8_0", GgmlType::Q8_0, 768, 2048},
      {"llama110m ffn_down 2048->768 q8_0", GgmlType::Q8_0, 2048, 768},
      {"q4_0 1024->1024", GgmlType::Q4_0, 1024, 1024},
  };
  return low_bit ? low_bit_cases : all_cases;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  bool quick = false, low_bit = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc)
      threads = std::stoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc)
      reps = std::stoi(argv[++i]);
    else if (a == "--quick")
      quick = true;
    else if (a == "--low-bit")
      low_bit = true;
    else {
      std::fprintf(stderr, "usage: gemm_bench [--threads N] [--reps N] [--quick] [--low-bit]\n");
      return 2;
    }
  }
  ThreadPool pool(threads);
  const std::vector<Case> cases = bench_cases(low_bit);
  const std::vector<int64_t> token_counts =
      quick ? std::vector<int64_t>{1, 2, 4, 16, 128} : std::vector<int64_t>{1, 2, 3, 4, 8, 16, 32, 128, 512};
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);

  std::printf("{\n  \"isa\": \"%s\", \"threads\": %d, \"reps\": %d,\n", gemm_isa_name(gemm_best_isa()), threads, reps);
  const double peak = int8_peak_gops(threads);
  const double bw = read_bandwidth_gbs(threads);
  std::printf(
      "  \"int8_peak_gops\": %.1f,\n  \"int8_peak_how\": \"%d threads x 16 independent vpdpbusd zmm chains, 128 ops each, best of 3\",\n",
      peak, threads);
  std::printf(
      "  \"read_bandwidth_gbs\": %.2f,\n  \"bandwidth_how\": \"%d threads sum a 1 GiB buffer with 256-bit loads, best of 5\",\n",
      bw, threads);
  std::printf("  \"cases\": [\n");
  bool first = true;
  for (const Case& c : cases) {
    const std::vector<uint8_t> wq = case_weights(c, rng);
    GgufTensorInfo info;
    info.name = "w";
    info.ne = {c.k, c.n};
    info.raw_type = static_cast<uint32_t>(c.type);
    info.nbytes = wq.size();
    const TensorView view{&info, wq.data()};
    for (int64_t t : token_counts) {
      std::vector<float> x(static_cast<size_t>(c.k * t)), y(static_cast<size_t>(c.n * t));
      for (auto& v : x) v = dist(rng);
      const double ops = 2.0 * double(c.k) * double(c.n) * double(t);
      // Each timed sample runs for >= ~20 ms of work.
      const int inner = std::max<int>(1, static_cast<int>(4e8 / ops));
      auto time_one = [&](bool gemm_path) {
        const auto t0 = Clock::now();
        for (int i = 0; i < inner; ++i) {
          if (gemm_path)
            matmul(view, x.data(), t, y.data(), pool);
          else
            matmul_vec_dot(view, x.data(), t, y.data(), pool);
        }
        return seconds_since(t0) / inner;
      };
      time_one(true);
      time_one(false);
      std::vector<double> tn, to;
      for (int r = 0; r < reps; ++r) {
        if (r % 2) {
          to.push_back(time_one(false));
          tn.push_back(time_one(true));
        } else {
          tn.push_back(time_one(true));
          to.push_back(time_one(false));
        }
      }
      std::sort(tn.begin(), tn.end());
      std::sort(to.begin(), to.end());
      const double mn = tn[tn.size() / 2], mo = to[to.size() / 2];
      std::printf(
          "%s    {\"case\": \"%s\", \"tokens\": %lld, \"new_us\": %.1f, \"old_us\": %.1f, \"new_gops\": %.1f, "
          "\"old_gops\": %.1f, \"speedup\": %.2f, \"new_share_of_peak\": %.3f}",
          first ? "" : ",\n", c.what, static_cast<long long>(t), mn * 1e6, mo * 1e6, ops / mn / 1e9, ops / mo / 1e9,
          mo / mn, peak > 0 ? ops / mn / 1e9 / peak : 0.0);
      std::fflush(stdout);
      first = false;
    }
  }
  std::printf("\n  ]\n}\n");
  return 0;
}
