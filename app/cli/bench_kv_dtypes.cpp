#include "cli/bench_kv_dtypes.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "cli/commands.h"
#include "cpu/paging_probe.h"
#include "kv/kv_dtype.h"

namespace kvscope::cli {

namespace {

using Clock = std::chrono::steady_clock;

double quantile(std::vector<double> v, double f) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[static_cast<size_t>(f * static_cast<double>(v.size() - 1) + 0.5)];
}

double time_all_layers(PagingProbe& p, std::vector<float>& out) {
  const auto t0 = Clock::now();
  for (int32_t l = 0; l < p.n_layer(); ++l) p.paged(l, out.data());
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

nlohmann::json bench_kv_dtype_decode(const Args& a, std::shared_ptr<Model> m, int32_t ctx, int reps,
                                     const std::vector<std::string>& dtypes) {
  if (dtypes.size() < 2) throw UsageError("--kv-dtypes needs a baseline and at least one more dtype");
  const int threads = static_cast<int>(a.i64("threads", 0));
  const int32_t bs = static_cast<int32_t>(a.i64("block-size", 16));
  std::vector<std::unique_ptr<PagingProbe>> probes;
  for (const std::string& name : dtypes) {
    const auto dt = parse_kv_dtype(name);
    if (!dt) throw UsageError("--kv-dtypes: '" + name + "' is not one of " + kv_dtype_choices());
    probes.push_back(std::make_unique<PagingProbe>(m, ctx, bs, *dt, threads));
  }
  std::vector<float> out(static_cast<size_t>(probes[0]->q_dim()));
  // Hot: each dtype's K/V as cached as it can be (an untimed run of the same probe first).
  // Cold: right after sweeping a buffer larger than the L3 (K/V from DRAM, as between two
  // engine steps whose weights stream through the cache); the smaller formats gain there.
  std::vector<uint8_t> sweep(size_t{64} << 20, 1);
  uint64_t sink = 0;
  auto measure = [&](bool cold) {
    std::vector<std::vector<double>> us(dtypes.size()), ratio(dtypes.size());
    for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
      std::vector<double> round(dtypes.size());
      for (size_t i = 0; i < dtypes.size(); ++i) {
        if (cold)
          for (size_t b = 0; b < sweep.size(); b += 64) sink += ++sweep[b];
        else
          time_all_layers(*probes[i], out);
        round[i] = time_all_layers(*probes[i], out);
      }
      if (r == 0) continue;
      for (size_t i = 0; i < dtypes.size(); ++i) {
        us[i].push_back(round[i]);
        ratio[i].push_back(round[i] / round[0]);
      }
    }
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < dtypes.size(); ++i)
      rows.push_back({{"kv_dtype", dtypes[i]},
                      {"paged_us", quantile(us[i], 0.5)},
                      {"over_baseline", quantile(ratio[i], 0.5)},
                      {"ratio_p10", quantile(ratio[i], 0.1)},
                      {"ratio_p90", quantile(ratio[i], 0.9)}});
    return rows;
  };
  nlohmann::json row{{"context", ctx}, {"block_size", bs}, {"baseline", dtypes[0]}, {"reps", reps}};
  row["hot"] = measure(false);
  row["cold"] = measure(true);
  row["sweep_checksum"] = sink;
  return row;
}

}  // namespace kvscope::cli
