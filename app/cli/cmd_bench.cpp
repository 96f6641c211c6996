// kvscope-cli bench: measured speed of the real engine path (paged KV, scheduler, sampler),
// as JSON. Ratios against other runs belong in the same process or script (noisy machines).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cpu/contiguous_attention.h"
#include "cpu/cpu_backend.h"

namespace kvscope::cli {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::vector<TokenId> random_prompt(int32_t n, int32_t n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<TokenId> dist(3, n_vocab - 1);
  std::vector<TokenId> p(static_cast<size_t>(n));
  p[0] = 1;
  for (int32_t i = 1; i < n; ++i) p[static_cast<size_t>(i)] = dist(rng);
  return p;
}

// Prefill and decode speed of one sequence: prefill = the step that computes the whole prompt,
// decode = the following single-token steps.
nlohmann::json bench_single(const Args& a, std::shared_ptr<Model> m, int32_t prompt_len, int32_t gen, int reps) {
  std::vector<double> prefill, decode;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms caches and page-faults the weights in
    auto engine = make_engine(a, m);
    Request req;
    req.prompt = random_prompt(prompt_len, m->config.n_vocab, 42 + static_cast<uint64_t>(r));
    req.max_new_tokens = gen;
    req.ignore_eos = true;
    engine->submit(req);
    const auto t0 = Clock::now();
    engine->step();  // whole prompt (max_batched_tokens >= prompt_len) + first token
    const auto t1 = Clock::now();
    engine->run_until_idle();
    const auto t2 = Clock::now();
    if (r == 0) continue;
    prefill.push_back(prompt_len / std::chrono::duration<double>(t1 - t0).count());
    decode.push_back((gen - 1) / std::chrono::duration<double>(t2 - t1).count());
  }
  return {{"prompt_len", prompt_len}, {"gen", gen}, {"reps", reps},
          {"prefill_tokens_per_s", median(prefill)}, {"decode_tokens_per_s", median(decode)}};
}

// Total generated tokens/s with `batch` requests running together (same prompt length and
// output length each): what continuous batching buys over one sequence at a time.
nlohmann::json bench_batch(const Args& a, std::shared_ptr<Model> m, int32_t batch, int32_t prompt_len, int32_t gen) {
  auto engine = make_engine(a, m);
  for (int32_t i = 0; i < batch; ++i) {
    Request req;
    req.prompt = random_prompt(prompt_len, m->config.n_vocab, 1000 + static_cast<uint64_t>(i));
    req.max_new_tokens = gen;
    req.ignore_eos = true;
    engine->submit(req);
  }
  const auto t0 = Clock::now();
  engine->run_until_idle();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto snap = engine->snapshot();
  return {{"batch", batch}, {"prompt_len", prompt_len}, {"gen", gen}, {"seconds", s},
          {"generated_tokens", snap->counters.tokens_decoded},
          {"tokens_per_s", static_cast<double>(snap->counters.tokens_decoded) / s},
          {"max_concurrent_ok", snap->counters.preemptions == 0}};
}

// Decode attention of one token over `ctx` positions, all layers' worth of heads: walking a
// shuffled block table (the paged path) vs a plain contiguous array. Same kernel, same data in
// the same KV dtype (--kv-dtype), same threads: the ratio is what paging costs.
nlohmann::json bench_paging_cost(const Args& a, std::shared_ptr<Model> m, int32_t ctx, int reps) {
  const ModelConfig& c = m->config;
  const int threads = static_cast<int>(a.i64("threads", 0));
  const int32_t bs = static_cast<int32_t>(a.i64("block-size", 16));
  const std::string dt_name = a.str("kv-dtype", "f32");
  const auto dt = parse_kv_dtype(dt_name);
  if (!dt) throw UsageError("--kv-dtype '" + dt_name + "' is not one of " + kv_dtype_choices());
  CpuBackend be(m, threads);
  KvLayout L{c.n_layer, c.n_head_kv, c.head_dim, bs, (ctx + bs - 1) / bs + 1, *dt};
  be.init_kv(L, {});
  std::vector<BlockId> table(static_cast<size_t>(L.num_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(3));
  BatchView b;
  b.tokens = {1};
  b.positions = {ctx - 1};
  b.slot_mapping = {0};
  b.seq_index = {0};
  b.block_tables.push_back(std::span<const BlockId>(table));
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> q(static_cast<size_t>(c.q_dim())), out(q.size()), x(static_cast<size_t>(c.head_dim));
  for (auto& e : q) e = nd(rng);
  // The same random K/V in both layouts, one copy per layer in each (same memory footprint):
  // the paged pool at the slots the shuffled table gives, the contiguous arrays in order.
  const int64_t vec_bytes = static_cast<int64_t>(c.head_dim) * kv_elem_bytes(*dt);
  const size_t n_vec = static_cast<size_t>(ctx) * c.n_head_kv;
  std::vector<KvBuffer> kc, vc;  // the pool's kind of memory (huge pages where available)
  for (int32_t l = 0; l < c.n_layer; ++l) {
    kc.emplace_back(n_vec * vec_bytes);
    vc.emplace_back(n_vec * vec_bytes);
  }
  std::vector<std::vector<float>> ks(static_cast<size_t>(c.n_layer), std::vector<float>(n_vec)), vs = ks;
  CpuKvStorage& st = be.kv_storage();
  for (int32_t l = 0; l < c.n_layer; ++l)
    for (int32_t p = 0; p < ctx; ++p)
      for (int32_t h = 0; h < c.n_head_kv; ++h)
        for (int is_v = 0; is_v < 2; ++is_v) {
          for (auto& e : x) e = nd(rng);
          const size_t i = static_cast<size_t>(p) * c.n_head_kv + h;
          const size_t li = static_cast<size_t>(l);
          (is_v ? vs : ks)[li][i] = kv_encode_vector(*dt, x.data(), c.head_dim, (is_v ? vc : kc)[li].data() + i * vec_bytes);
          st.store(l, is_v, static_cast<int64_t>(table[static_cast<size_t>(p / bs)]) * bs + p % bs, h, x.data());
        }
  std::vector<ContiguousKv> ckv;
  for (size_t l = 0; l < kc.size(); ++l) ckv.push_back({*dt, kc[l].data(), vc[l].data(), ks[l].data(), vs[l].data()});
  std::vector<double> paged, contiguous;
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
    auto t0 = Clock::now();
    for (int32_t l = 0; l < c.n_layer; ++l) be.attention(l, b, q.data(), out.data());
    auto t1 = Clock::now();
    for (int32_t l = 0; l < c.n_layer; ++l)
      contiguous_attention_decode(be.pool(), q.data(), ckv[static_cast<size_t>(l)], ctx, c.n_head, c.n_head_kv, c.head_dim, c.attn_scale,
                                  out.data());
    auto t2 = Clock::now();
    if (r == 0) continue;
    paged.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    contiguous.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  const double p = median(paged), cc = median(contiguous);
  return {{"context", ctx}, {"block_size", bs}, {"kv_dtype", dt_name}, {"paged_us", p}, {"contiguous_us", cc},
          {"paged_over_contiguous", p / cc}};
}

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  const Args a(argc, argv, first, with_engine_options({"prompt-len", "gen", "reps", "batches", "contexts"}),
               {"help", "no-batch", "no-paging"});
  if (a.has("help")) {
    std::cout << "kvscope-cli bench [--model M] [--prompt-len 128] [--gen 64] [--reps 3] [--threads N]\n"
                 "  [--batches 1,4,16] [--contexts 1024,4096] [--no-batch] [--no-paging]\n"
                 "  single: prefill/decode tokens/s of one sequence; batch: total tokens/s at each batch size;\n"
                 "  paging: decode attention time, block table vs contiguous array, at each context length\n";
    return 0;
  }
  LoadedModel lm = load_model(a);
  const int32_t prompt_len = static_cast<int32_t>(a.i64("prompt-len", 128));
  const int32_t gen = static_cast<int32_t>(a.i64("gen", 64));
  const int reps = static_cast<int>(a.i64("reps", 3));
  if (prompt_len < 1 || gen < 2 || reps < 1) throw UsageError("need --prompt-len >= 1, --gen >= 2, --reps >= 1");
  if (a.i64("max-batched-tokens", 512) < prompt_len)
    throw UsageError("--max-batched-tokens must be >= --prompt-len to time the prefill as one step");
  nlohmann::json j;
  j["model"] = lm.path;
  j["model_description"] = lm.model->describe();
  {
    auto probe = make_engine(a, lm.model);
    j["backend"] = probe->backend().name();
    j["kv_cache"] = probe->kv_summary();
  }
  j["single"] = bench_single(a, lm.model, prompt_len, gen, reps);
  j["prefill_tokens_per_s"] = j["single"]["prefill_tokens_per_s"];
  j["decode_tokens_per_s"] = j["single"]["decode_tokens_per_s"];
  auto int_list = [](const std::string& s) {
    std::vector<int32_t> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) v.push_back(static_cast<int32_t>(std::stol(item)));
    return v;
  };
  if (!a.has("no-batch")) {
    nlohmann::json rows = nlohmann::json::array();
    for (int32_t b : int_list(a.str("batches", "1,4,16"))) rows.push_back(bench_batch(a, lm.model, b, 32, gen));
    j["batch"] = rows;
  }
  if (!a.has("no-paging")) {
    nlohmann::json rows = nlohmann::json::array();
    for (int32_t ctx : int_list(a.str("contexts", "1024,4096"))) rows.push_back(bench_paging_cost(a, lm.model, ctx, std::max(reps, 5)));
    j["paging_cost"] = rows;
  }
  std::cout << j.dump(2) << "\n";
  return 0;
}

}  // namespace kvscope::cli
