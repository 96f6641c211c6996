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
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace kvscope {

class OnlineAttention {
 public:
  static constexpr int32_t kMaxChunk = 64;   // rows per add() call
  static constexpr int32_t kMaxGroup = 128;  // query heads per KV head (DeepSeek-V3: 128 on one latent)

  // q: [n_q][d], out: [n_q][d_v] (the query heads of one KV head, consecutive). out doubles as
  // the accumulator until finish(). d_v: the width of a value row, d when < 0 (latent attention
  // sums the first d_v values of each key row: model_config.h MlaConfig).
  OnlineAttention(const float* q, int32_t n_q, int32_t d, float scale, float* out, int32_t d_v = -1)
      : q_(q), out_(out), n_q_(n_q), d_(d), dv_(d_v < 0 ? d : d_v), scale_(scale) {
    if (n_q < 1 || n_q > kMaxGroup) throw std::invalid_argument("attention: too many query heads per KV head");
    for (int32_t h = 0; h < n_q; ++h) {
      m_[h] = -INFINITY;
      l_[h] = 0.0;
    }
    for (int64_t i = 0; i < static_cast<int64_t>(n_q) * dv_; ++i) out[i] = 0.0f;
  }

  // Consecutive key/value rows at one place: key row j at k + j * k_stride, value row j at
  // v + j * v_stride.
  struct Rows {
    const float* k;
    int64_t k_stride;
    const float* v;
    int64_t v_stride;
    int32_t n;
  };

  // Appends n rows (key row j at k + j * d, value row j at v + j * d) to a chunk's runs; rows
  // that continue the previous run in memory (rows decoded one after the other into a scratch
  // tile, or physically adjacent blocks) extend it: fewer, longer runs for the kernel.
  static void append_run(Rows* runs, int32_t& n_runs, const float* k, const float* v, int32_t n, int32_t d) {
    if (n_runs > 0 && runs[n_runs - 1].k + static_cast<int64_t>(runs[n_runs - 1].n) * d == k &&
        runs[n_runs - 1].v + static_cast<int64_t>(runs[n_runs - 1].n) * d == v)
      runs[n_runs - 1].n += n;
    else
      runs[n_runs++] = {k, d, v, d, n};
  }

  // n (<= kMaxChunk) positions in one run.
  [[gnu::always_inline]] void add(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int32_t n) {
    const Rows r{k, k_stride, v, v_stride, n};
    add(&r, 1);
  }

  // One chunk made of several runs (e.g. the tiles of consecutive blocks of a block table),
  // at most kMaxChunk rows in all. A chunk costs one max/rescale per query head however many
  // runs it has, so a paged caller with 16-row blocks does the same softmax bookkeeping as a
  // contiguous one with 64-row chunks.
  [[gnu::always_inline]] void add(const Rows* runs, int32_t n_runs) { add_impl<false>(runs, n_runs, nullptr, 0); }

  // The same, also requesting into L2 the memory the caller needs next (the paged path: the
  // blocks of its next chunk, which no hardware prefetcher can guess), spread over this chunk's
  // work. A separate instantiation, so that the contiguous path's code carries none of it.
  struct Prefetch {
    const uint8_t* p;
    int64_t bytes;
  };
  [[gnu::always_inline]] void add(const Rows* runs, int32_t n_runs, const Prefetch* pf, int32_t n_pf) {
    add_impl<true>(runs, n_runs, pf, n_pf);
  }

  // For a pass over part of the keys (split-KV, cpu/attention_split.h): leaves the
  // unnormalised accumulators in `out` and hands over each head's running max and sum, which
  // merge_attention_parts() combines with the other parts' into the exact softmax.
  void finish_partial(float* m, double* l) const {
    for (int32_t h = 0; h < n_q_; ++h) {
      m[h] = m_[h];
      l[h] = l_[h];
    }
  }

  // Token eviction (H2O, SnapKV) needs each key's softmax weight, which an online pass only
  // knows once it has seen every key: with a buffer given, add() also keeps every scaled score,
  // head h's row j at rec[h * stride + j] (rows in the order added, stride >= rows), and
  // add_probabilities() turns them into exact weights after the last add(). Off (nullptr) costs
  // one untaken branch per head and chunk.
  void record_scores(float* rec, int32_t stride) {
    rec_ = rec;
    rec_stride_ = stride;
  }
  int32_t recorded_rows() const { return rec_n_; }
  // w[j] = sum over the query heads of the softmax weight of recorded row j.
  void add_probabilities(float* w) const {
    for (int32_t j = 0; j < rec_n_; ++j) w[j] = 0.0f;
    for (int32_t h = 0; h < n_q_; ++h) {
      if (!(l_[h] > 0.0)) continue;
      const float* r = rec_ + static_cast<int64_t>(h) * rec_stride_;
      const double inv = 1.0 / l_[h];
      for (int32_t j = 0; j < rec_n_; ++j)
        w[j] += static_cast<float>(std::exp(static_cast<double>(r[j]) - m_[h]) * inv);
    }
  }

  // 16 independent partial sums (one AVX-512 register) and a pairwise reduction, so the
  // compiler vectorises it without -ffast-math and the reduction is not a serial chain.
  // (Public for tests/cpu/test_paged_attention.cpp, which holds dot4 to it bit for bit.)
  static float dot(const float* __restrict a, const float* __restrict b, int32_t n) {
    float acc[16] = {0};
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < 16; ++k) acc[k] += a[i + k] * b[i + k];
    return reduce16(acc, a, b, i, n);
  }
  // dot(a, b_r, n) for four rows b_r at once, each with the very same operations in the same
  // order (so bit for bit the same scores): a's lanes are loaded once for four rows instead of
  // once per row, which is what bounded the score loop (two loads per multiply-add).
  static void dot4(const float* __restrict a, const float* __restrict b0, const float* __restrict b1,
                   const float* __restrict b2, const float* __restrict b3, int32_t n, float* out) {
    float acc0[16] = {0}, acc1[16] = {0}, acc2[16] = {0}, acc3[16] = {0};
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int k = 0; k < 16; ++k) {
        acc0[k] += a[i + k] * b0[i + k];
        acc1[k] += a[i + k] * b1[i + k];
        acc2[k] += a[i + k] * b2[i + k];
        acc3[k] += a[i + k] * b3[i + k];
      }
    out[0] = reduce16(acc0, a, b0, i, n);
    out[1] = reduce16(acc1, a, b1, i, n);
    out[2] = reduce16(acc2, a, b2, i, n);
    out[3] = reduce16(acc3, a, b3, i, n);
  }

  // gpt-oss's learned sinks: one more score per head (sink[h], already in logit units) whose
  // value is zero, so it only takes its share of the softmax's denominator. Call once per query,
  // after or between the add() calls (in a split pass: in one part only).
  void add_sink_logits(const float* sink) {
    for (int32_t h = 0; h < n_q_; ++h) {
      if (sink[h] > m_[h]) {
        const float c = std::exp(m_[h] - sink[h]);
        l_[h] *= c;
        float* acc = out_ + static_cast<int64_t>(h) * dv_;
        for (int32_t i = 0; i < dv_; ++i) acc[i] *= c;
        m_[h] = sink[h];
      }
      l_[h] += std::exp(static_cast<double>(sink[h]) - m_[h]);
    }
  }

  // Normalises the accumulators into the attention output.
  void finish() {
    for (int32_t h = 0; h < n_q_; ++h) {
      const float inv = l_[h] > 0.0 ? static_cast<float>(1.0 / l_[h]) : 0.0f;
      float* acc = out_ + static_cast<int64_t>(h) * dv_;
      for (int32_t i = 0; i < dv_; ++i) acc[i] *= inv;
    }
  }

 private:
  // Walks the prefetch ranges a cache line at a time, in step with the rows computed.
  class PrefetchCursor {
   public:
    PrefetchCursor(const Prefetch* pf, int32_t n_pf, const Rows* runs, int32_t n_runs, int32_t n_heads)
        : pf_(pf), n_pf_(n_pf) {
      int64_t lines = 0;
      for (int32_t i = 0; i < n_pf; ++i) lines += (pf[i].bytes + 63) / 64;
      int32_t rows = 0;
      for (int32_t r = 0; r < n_runs; ++r) rows += runs[r].n;
      rows_ = rows;
      lines_per_row_ = rows > 0 ? static_cast<double>(lines) / (static_cast<double>(rows) * n_heads) : 0.0;
    }
    // Issues the requests due once `rows_done` rows of query head h's pass have been started:
    // spread over every head's pass, so that no pass issues them in a burst.
    void issue_until(int32_t h, int32_t rows_done) {
      const auto goal = static_cast<int64_t>(lines_per_row_ * (static_cast<int64_t>(h) * rows_ + rows_done) + 0.999);
      for (; issued_ < goal && i_ < n_pf_; ++issued_) {
        __builtin_prefetch(pf_[i_].p + off_, 0, 2);  // into L2: L1 is busy with this chunk
        off_ += 64;
        if (off_ >= pf_[i_].bytes) {
          ++i_;
          off_ = 0;
        }
      }
    }

   private:
    const Prefetch* pf_;
    int32_t n_pf_, rows_ = 0, i_ = 0;
    int64_t off_ = 0, issued_ = 0;
    double lines_per_row_;
  };
  struct NoPrefetch {
    NoPrefetch(const Prefetch*, int32_t, const Rows*, int32_t, int32_t) {}
    void issue_until(int32_t, int32_t) {}
  };

  [[gnu::always_inline]] void accumulate_values(const Rows* runs, int32_t n_runs, const float* w,
                                                float* __restrict acc) const;

  // Always inlined (like the add() wrappers) into its caller's loop: an out-of-line copy, which
  // the linker may pick for every caller, ran the contiguous reference 10-25% slower than an
  // inlined one, and the baseline must be at its best.
  template <bool kPrefetch>
  [[gnu::always_inline]] void add_impl(const Rows* runs, int32_t n_runs, const Prefetch* pf, int32_t n_pf);

  // dot's pairwise reduction of the 16 lanes, then the scalar tail [i, n).
  [[gnu::always_inline]] static float reduce16(float* acc, const float* __restrict a, const float* __restrict b,
                                               int32_t i, int32_t n) {
    for (int k = 0; k < 8; ++k) acc[k] += acc[k + 8];
    for (int k = 0; k < 4; ++k) acc[k] += acc[k + 4];
    float r = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
  }

  const float* q_;
  float* out_;
  int32_t n_q_, d_, dv_;
  float scale_;
  float m_[kMaxGroup];
  double l_[kMaxGroup];
  float* rec_ = nullptr;  // see record_scores()
  int32_t rec_stride_ = 0, rec_n_ = 0;
};

template <bool kPrefetch>
[[gnu::always_inline]] inline void OnlineAttention::add_impl(const Rows* runs, int32_t n_runs, const Prefetch* pf,
                                                             int32_t n_pf) {
  float s[kMaxChunk];
  const int32_t d = d_;
  // The paged path's prefetch requests are spread over every query head's score loop, a share
  // before each run, instead of one burst that would fill the miss queues and be partly dropped.
  // NoPrefetch compiles to nothing, so the contiguous path's loop is the plain kernel.
  std::conditional_t<kPrefetch, PrefetchCursor, NoPrefetch> cursor(pf, n_pf, runs, n_runs, n_q_);
  const float* krow[kMaxChunk];  // the chunk's key rows, shared by every head's pass
  int32_t rows = 0;
  for (int32_t r = 0; r < n_runs; ++r)
    for (int32_t j = 0; j < runs[r].n; ++j) krow[rows++] = runs[r].k + j * runs[r].k_stride;
  for (int32_t h = 0; h < n_q_; ++h) {
    const float* qh = q_ + static_cast<int64_t>(h) * d;
    float* __restrict acc = out_ + static_cast<int64_t>(h) * dv_;
    float cmax = -INFINITY;
    int32_t n = 0;
    for (; n + 4 <= rows; n += 4) {
      cursor.issue_until(h, n + 4);
      dot4(qh, krow[n], krow[n + 1], krow[n + 2], krow[n + 3], d, s + n);
    }
    for (; n < rows; ++n) {
      cursor.issue_until(h, n + 1);
      s[n] = dot(qh, krow[n], d);
    }
    for (int32_t j = 0; j < rows; ++j) {
      s[j] *= scale_;
      cmax = s[j] > cmax ? s[j] : cmax;
    }
    if (rec_) std::copy(s, s + n, rec_ + static_cast<int64_t>(h) * rec_stride_ + rec_n_);
    if (cmax > m_[h]) {                        // new running max: rescale what was summed so far
      const float c = std::exp(m_[h] - cmax);  // 0 on the first chunk (m = -inf, acc = 0)
      l_[h] *= c;
      for (int32_t i = 0; i < dv_; ++i) acc[i] *= c;
      m_[h] = cmax;
    }
    const float m = m_[h];
    double lsum = 0.0;
    for (int32_t j = 0; j < n; ++j) {  // s becomes the softmax weights
      s[j] = std::exp(s[j] - m);
      lsum += s[j];
    }
    l_[h] += lsum;
    accumulate_values(runs, n_runs, s, acc);
  }
  if (rec_) rec_n_ += rows;  // s now holds weights; the scores were kept before
}

// acc[0, d) += sum over the chunk's rows of w[j] * v_j, kColumns columns at a time: those
// columns' partial sums stay in registers for all the rows (four AVX-512 registers), instead of
// being loaded and stored back once per row, which chained every row to the previous one
// through memory.
[[gnu::always_inline]] inline void OnlineAttention::accumulate_values(const Rows* runs, int32_t n_runs, const float* w,
                                                                      float* __restrict acc) const {
  constexpr int32_t kColumns = 64;
  const int32_t d = dv_;
  int32_t i0 = 0;
  for (; i0 + kColumns <= d; i0 += kColumns) {
    float a[kColumns];
    for (int32_t i = 0; i < kColumns; ++i) a[i] = acc[i0 + i];
    int32_t n = 0;
    for (int32_t r = 0; r < n_runs; ++r) {
      const Rows& run = runs[r];
      for (int32_t j = 0; j < run.n; ++j, ++n) {
        const float p = w[n];
        const float* __restrict vj = run.v + j * run.v_stride + i0;
        for (int32_t i = 0; i < kColumns; ++i) a[i] += p * vj[i];
      }
    }
    for (int32_t i = 0; i < kColumns; ++i) acc[i0 + i] = a[i];
  }
  if (i0 == d) return;
  int32_t n = 0;  // the last d % kColumns columns (head sizes that are not a multiple of 64)
  for (int32_t r = 0; r < n_runs; ++r) {
    const Rows& run = runs[r];
    for (int32_t j = 0; j < run.n; ++j, ++n) {
      const float p = w[n];
      const float* __restrict vj = run.v + j * run.v_stride;
      for (int32_t i = i0; i < d; ++i) acc[i] += p * vj[i];
    }
  }
}

}  // namespace kvscope
