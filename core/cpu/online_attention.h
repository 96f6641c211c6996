#pragma once
// The decode-attention kernel shared by the paged path (CpuBackend walking block tables) and the
// contiguous reference (contiguous_attention.h): a single pass of online softmax (as in
// FlashAttention / flash-decoding) over the keys of ONE KV head, for all the query heads that
// share it (GQA). Callers hand it chunks of consecutive key/value rows; the only thing that
// differs between the two layouts is where those rows are, so timing one against the other
// measures the cost of paging and nothing else.
//
// Per query head it keeps the running max m, the running sum l of exp(score - m) and the output
// accumulator (unnormalised). A chunk whose max exceeds m rescales l and the accumulator once
// by exp(m_old - m_new); with scores in any order that happens O(log n) times on average, so
// small chunks (block size 16) cost almost no extra work. Scores of a chunk live in a stack
// buffer: no per-sequence score array, no second pass over the values.
#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace kvscope {

class OnlineAttention {
 public:
  static constexpr int32_t kMaxChunk = 64;    // rows per add() call
  static constexpr int32_t kMaxGroup = 64;    // query heads per KV head

  // q, out: [n_q][d] (the query heads of one KV head, consecutive). out doubles as the
  // accumulator until finish().
  OnlineAttention(const float* q, int32_t n_q, int32_t d, float scale, float* out)
      : q_(q), out_(out), n_q_(n_q), d_(d), scale_(scale) {
    if (n_q < 1 || n_q > kMaxGroup) throw std::invalid_argument("attention: too many query heads per KV head");
    for (int32_t h = 0; h < n_q; ++h) {
      m_[h] = -INFINITY;
      l_[h] = 0.0;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(n_q) * d; ++i) out[i] = 0.0f;
  }

  // n (<= kMaxChunk) positions: key row j at k + j * k_stride, value row j at v + j * v_stride.
  void add(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int32_t n) {
    float s[kMaxChunk];
    const int32_t d = d_;
    for (int32_t h = 0; h < n_q_; ++h) {
      const float* qh = q_ + static_cast<int64_t>(h) * d;
      float* __restrict acc = out_ + static_cast<int64_t>(h) * d;
      float cmax = -INFINITY;
      for (int32_t j = 0; j < n; ++j) {
        s[j] = dot(qh, k + j * k_stride, d) * scale_;
        cmax = s[j] > cmax ? s[j] : cmax;
      }
      if (cmax > m_[h]) {  // new running max: rescale what was summed so far
        const float c = std::exp(m_[h] - cmax);  // 0 on the first chunk (m = -inf, acc = 0)
        l_[h] *= c;
        for (int32_t i = 0; i < d; ++i) acc[i] *= c;
        m_[h] = cmax;
      }
      const float m = m_[h];
      double lsum = 0.0;
      for (int32_t j = 0; j < n; ++j) {
        const float p = std::exp(s[j] - m);
        lsum += p;
        const float* __restrict vj = v + j * v_stride;
        for (int32_t i = 0; i < d; ++i) acc[i] += p * vj[i];
      }
      l_[h] += lsum;
    }
  }

  // Normalises the accumulators into the attention output.
  void finish() {
    for (int32_t h = 0; h < n_q_; ++h) {
      const float inv = l_[h] > 0.0 ? static_cast<float>(1.0 / l_[h]) : 0.0f;
      float* acc = out_ + static_cast<int64_t>(h) * d_;
      for (int32_t i = 0; i < d_; ++i) acc[i] *= inv;
    }
  }

 private:
  // 16 independent partial sums (one AVX-512 register) and a pairwise reduction, so the
  // compiler vectorises it without -ffast-math and the reduction is not a serial chain.
  static float dot(const float* __restrict a, const float* __restrict b, int32_t n) {
    float acc[16] = {0};
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < 16; ++k) acc[k] += a[i + k] * b[i + k];
    for (int k = 0; k < 8; ++k) acc[k] += acc[k + 8];
    for (int k = 0; k < 4; ++k) acc[k] += acc[k + 4];
    float r = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
  }

  const float* q_;
  float* out_;
  int32_t n_q_, d_;
  float scale_;
  float m_[kMaxGroup];
  double l_[kMaxGroup];
};

}  // namespace kvscope
