#pragma once
// What the hybrid recurrent-model suites share (test_recurrent_state.cpp,
// test_state_checkpoints.cpp): small synthetic lfm2 / qwen35 / granitehybrid models, and a run
// of prompts on the paged engine that keeps every step's logits.
#include <QCoreApplication>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/synthetic_model.h"
#include "paged_harness.h"
#include "test_support.h"

namespace kvscope::test {

// 6 layers: 0, 1, 3, 4 short convolutions, 2 and 5 attention (4 heads of 16, 2 KV heads).
// qwen35: 4 layers, 0-2 Gated DeltaNet (4 value heads, 2 key heads of 16), 3 gated attention
// (4 heads of 16, 2 KV heads, RoPE on 8 of 16 dims). granitehybrid: lfm2's layout with Mamba-2
// layers of 128 (4 heads of 32, 2 groups of B and C of 16) and Granite's multipliers.
inline SyntheticSpec hybrid_spec(const std::string& arch, GgmlType dtype = GgmlType::F32) {
  SyntheticSpec s;
  s.dtype = dtype;
  s.arch = arch;
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = arch == "qwen35" ? 4 : 6;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_ctx = 1024;
  s.swa_pattern = 3;
  s.ssm_state = 16;
  s.rope_dim = arch == "qwen35" ? 8 : 0;
  s.seed = 17;
  return s;
}
inline std::shared_ptr<Model> hybrid(const std::string& arch, GgmlType dtype = GgmlType::F32) {
  const SyntheticSpec s = hybrid_spec(arch, dtype);
  // The process id in the name: ctest runs this suite twice at once (recurrent_state_vec_dot).
  const auto path = test::tmp_dir() / ("recurrent-state-" + arch + (dtype == GgmlType::F32 ? "" : "-q8") + "-" +
                                       std::to_string(QCoreApplication::applicationPid()) + ".gguf");
  write_synthetic_model(s, path.string());
  auto m = Model::load(path.string());  // the model keeps its own copy of the file
  std::filesystem::remove(path);
  return m;
}
inline std::shared_ptr<Model> lfm2(GgmlType dtype = GgmlType::F32) { return hybrid("lfm2", dtype); }

inline std::vector<TokenId> tokens(int32_t n, int32_t offset) { return test::token_ids(n, offset); }

struct Out {
  std::vector<std::vector<TokenId>> seqs;
  std::vector<std::vector<std::vector<float>>> logits;
  int32_t preemptions = 0;
};

// Greedy, n_new tokens whatever the model says, every step's logits kept.
inline Request logged_request(const std::vector<TokenId>& prompt, int32_t n_new) {
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = n_new;
  r.ignore_eos = true;
  r.record_logits = true;
  return r;
}

inline Out run(const std::shared_ptr<Model>& m, const EngineConfig& cfg,
               const std::vector<std::vector<TokenId>>& prompts, int32_t n_new = 8) {
  Engine e(m, std::make_unique<CpuBackend>(m, 2), cfg);
  std::vector<SeqId> ids;
  for (const auto& p : prompts) ids.push_back(e.submit(logged_request(p, n_new)));
  e.run_until_idle();
  Out o;
  for (SeqId id : ids) {
    if (!e.sequence(id).error.empty()) throw std::runtime_error(e.sequence(id).error);
    o.seqs.push_back(e.sequence(id).tokens);
    o.logits.push_back(e.recorded_logits(id));
    o.preemptions += e.sequence(id).preemptions;
  }
  return o;
}

inline float max_diff(const Out& a, const Out& b) {
  float d = 0;
  for (size_t r = 0; r < a.logits.size(); ++r)
    for (size_t s = 0; s < std::min(a.logits[r].size(), b.logits[r].size()); ++s)
      d = std::max(d, test::max_abs_diff(a.logits[r][s], b.logits[r][s].data(), a.logits[r][s].size()));
  return d;
}

}  // namespace kvscope::test
