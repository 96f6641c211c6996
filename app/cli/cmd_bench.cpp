// kvscope-cli bench: measured speed of the real engine path (paged KV, scheduler, sampler),
// as JSON. Ratios against other runs belong in the same process or script (noisy machines).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"

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

}  // namespace

int cmd_bench(int argc, char** argv, int first) {
  const Args a(argc, argv, first, with_engine_options({"prompt-len", "gen", "reps"}), {"help"});
  if (a.has("help")) {
    std::cout << "kvscope-cli bench [--model M] [--prompt-len 128] [--gen 64] [--reps 3] [--threads N]\n";
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
  std::cout << j.dump(2) << "\n";
  return 0;
}

}  // namespace kvscope::cli
