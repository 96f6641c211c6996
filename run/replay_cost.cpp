#include "run/replay_cost.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <vector>

namespace kvscope {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Vendor datasheets: dense BF16 tensor-core FLOP/s (without sparsity), HBM bandwidth; the host
// link is PCIe (Gen5 x16 for Hopper, Gen4 x16 for A100) at ~80% of its 64 / 32 GB/s.
const std::vector<HardwareProfile>& profiles() {
  static const std::vector<HardwareProfile> p = {
      {"H100", 989e12, 3.35e12, 50e9, "NVIDIA H100 SXM5 80 GB: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3, PCIe 5"},
      {"H200", 989e12, 4.8e12, 50e9, "NVIDIA H200 SXM 141 GB: 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e, PCIe 5"},
      {"A100", 312e12, 2.039e12, 25e9, "NVIDIA A100 SXM4 80 GB: 312 TFLOP/s bf16 dense, 2.04 TB/s HBM2e, PCIe 4"},
  };
  return p;
}

}  // namespace

std::optional<HardwareProfile> find_hardware_profile(const std::string& name) {
  for (const HardwareProfile& p : profiles())
    if (lower(p.name) == lower(name)) return p;
  return std::nullopt;
}

const char* hardware_profile_names() { return "H100, H200, A100"; }

HardwareProfile measured_cpu_profile(double weight_bytes, double n_params, double prefill_tokens_per_s,
                                     double decode_tokens_per_s) {
  if (!(weight_bytes > 0 && n_params > 0 && prefill_tokens_per_s > 0 && decode_tokens_per_s > 0))
    throw std::invalid_argument("a measured CPU profile needs positive weights, parameters and tokens/s");
  HardwareProfile p;
  p.name = "cpu (measured)";
  p.bandwidth = weight_bytes * decode_tokens_per_s;
  p.peak_flops = 2.0 * n_params * prefill_tokens_per_s;
  p.host_link = p.bandwidth;  // the "CPU tier" is the same memory
  p.note = "kvscope-cli bench: prefill " + std::to_string(prefill_tokens_per_s) + " tokens/s, decode " +
           std::to_string(decode_tokens_per_s) + " tokens/s";
  return p;
}

void CostModel::check() const {
  if (!(hw.peak_flops > 0 && hw.bandwidth > 0 && hw.host_link > 0))
    throw std::invalid_argument("hardware profile rates must be positive");
  if (!(mfu > 0 && mfu <= 1) || !(mbu > 0 && mbu <= 1)) throw std::invalid_argument("mfu and mbu must be in (0, 1]");
  if (!(step_overhead_s >= 0)) throw std::invalid_argument("step overhead must be >= 0");
  if (tensor_parallel < 1) throw std::invalid_argument("tensor parallel must be >= 1");
  if (!(weight_bytes > 0 && n_params > 0 && active_params > 0 && active_params <= n_params && kv_bytes_per_token > 0))
    throw std::invalid_argument("the model geometry is empty (weights, parameters or KV bytes per token)");
}

double CostModel::step_seconds(const StepWork& w) const {
  if (w.tokens == 0) return 0;
  const double flops = 2.0 * active_params * static_cast<double>(w.tokens) + attn_flops_per_pair * w.attention_pairs;
  const double active_bytes = weight_bytes * active_params / n_params;
  const double weights_read = std::min(weight_bytes, active_bytes * static_cast<double>(w.tokens));
  const double bytes = weights_read + kv_bytes_per_token * w.kv_read_tokens;
  const double tp = tensor_parallel;
  return std::max(flops / (hw.peak_flops * mfu * tp), bytes / (hw.bandwidth * mbu * tp)) + step_overhead_s;
}

double CostModel::transfer_seconds(int64_t tokens) const {
  return kv_bytes_per_token * static_cast<double>(tokens) / hw.host_link;
}

CostModel make_cost_model(const PlanModel& m, double weight_bits, KvDtype kv, const HardwareProfile& hw) {
  CostModel c;
  c.hw = hw;
  c.weight_bytes = weight_bits > 0 ? m.n_params * weight_bits / 8.0 : static_cast<double>(m.file_weight_bytes);
  c.n_params = m.n_params;
  c.active_params = m.n_active_params > 0 ? m.n_active_params : m.n_params;
  c.kv_bytes_per_token = static_cast<double>(plan_kv_bytes_per_token(m, kv));
  const int32_t qk_dim = m.latent() ? m.mla_k_dim + m.mla_v_dim : 2 * m.head_dim;
  c.attn_flops_per_pair = 2.0 * m.n_layer * m.n_head * qk_dim;
  return c;
}

}  // namespace kvscope
