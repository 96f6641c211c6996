#pragma once
// The step-time model of timed replay (run/timed_replay.h): no model runs, so each engine step
// costs what a roofline says its work would cost on a named accelerator. A step's work is its
// tokens (weights times tokens in FLOPs), its attention (query-key pairs) and the bytes it must
// read (the weights once -- for MoE the routed experts' share per token, at most all of them --
// and the KV of every position its tokens attend to, once). Time is
//   max(FLOPs / (peak_flops x mfu), bytes / (bandwidth x mbu)) + step_overhead
// and a CPU-tier hit moves its KV over the host link first. docs/replay.md states the limits.
#include <cstdint>
#include <optional>
#include <string>

#include "kv/kv_planner.h"

namespace kvscope {

struct HardwareProfile {
  std::string name;
  double peak_flops = 0;  // dense bf16, per second
  double bandwidth = 0;   // HBM bytes per second
  double host_link = 0;   // host <-> device bytes per second (CPU-tier transfers)
  std::string note;       // where the numbers come from
};

// "H100" (SXM), "H200", "A100" (80 GB SXM); case-insensitive.
std::optional<HardwareProfile> find_hardware_profile(const std::string& name);
const char* hardware_profile_names();

// kvscope's own CPU backend as the accelerator: bandwidth = weight bytes x measured decode
// tokens/s, FLOP/s = 2 x parameters x measured prefill tokens/s (kvscope-cli bench's JSON),
// so that the roofline reproduces both measurements on the bench's model.
HardwareProfile measured_cpu_profile(double weight_bytes, double n_params, double prefill_tokens_per_s,
                                     double decode_tokens_per_s);

struct StepWork {
  int64_t tokens = 0;          // computed this step (prefill chunks + decode tokens)
  double attention_pairs = 0;  // sum over those tokens of the positions each attends to
  double kv_read_tokens = 0;   // KV positions read (each sequence's context once per step)
  int64_t sequences = 0;
};

struct CostModel {
  HardwareProfile hw;
  double weight_bytes = 0;  // all of them
  double n_params = 0;
  double active_params = 0;        // per token (MoE: routed experts only)
  double kv_bytes_per_token = 0;   // all layers
  double attn_flops_per_pair = 0;  // 4 x layers x query heads x head_dim (QK^T and PV)
  double mfu = 0.5;                // fraction of peak FLOP/s reached
  double mbu = 0.8;                // fraction of peak bandwidth reached
  double step_overhead_s = 0.0005;
  int32_t tensor_parallel = 1;  // GPUs per instance, ideal scaling

  // Throws std::invalid_argument on a non-positive rate or fraction outside (0, 1].
  void check() const;
  double step_seconds(const StepWork& w) const;
  double transfer_seconds(int64_t tokens) const;  // CPU tier -> GPU
};

// The cost model of a planner model (preset or GGUF) at a weight precision (bits per weight;
// 0: the GGUF's stored bytes) and KV dtype on a profile.
CostModel make_cost_model(const PlanModel& m, double weight_bits, KvDtype kv, const HardwareProfile& hw);

}  // namespace kvscope
