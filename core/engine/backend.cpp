#include "engine/backend.h"

#include <stdexcept>

namespace kvscope {

void Backend::init_kv_groups(std::span<const KvGroupSpec> groups, const AttentionPolicy& policy) {
  if (groups.size() != 1)
    throw std::invalid_argument("the " + name() +
                                " backend stores one KV group only; run without the hybrid KV cache (--hybrid-kv off)");
  const KvGroupSpec& g = groups[0];
  for (size_t i = 0; i < g.layers.size(); ++i)
    if (g.layers[i] != static_cast<int32_t>(i) || g.layout.n_layer != static_cast<int32_t>(g.layers.size()))
      throw std::invalid_argument("the " + name() + " backend's single KV group must hold every layer in order");
  init_kv(g.layout, policy);
}

void Backend::copy_slots(std::span<const SlotCopy> copies) {
  if (!copies.empty())
    throw std::invalid_argument("the " + name() + " backend does not support token eviction (use --backend cpu)");
}

int64_t Backend::kv_total_bytes() const {
  int64_t n = 0;
  for (const KvLayout& l : kv_group_layouts()) n += l.total_bytes();
  return n;
}

int64_t Backend::kv_bytes_per_token() const {
  int64_t n = 0;
  for (const KvLayout& l : kv_group_layouts()) n += l.bytes_per_token();
  return n;
}

void Backend::init_state_slots(int32_t n_slots, StateDtype) {
  if (n_slots > 0)
    throw std::invalid_argument(
        "the " + name() +
        " backend does not run recurrent layers (short convolutions, Gated DeltaNet, Mamba-2): use --backend cpu");
}

void Backend::copy_state_slots(std::span<const StateCopy> copies) {
  if (!copies.empty()) throw std::invalid_argument("the " + name() + " backend holds no recurrent state to copy");
}

}  // namespace kvscope
