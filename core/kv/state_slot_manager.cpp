#include "kv/state_slot_manager.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvscope {

StateSlotManager::StateSlotManager(std::unique_ptr<KvSlotAllocator> inner, const StateSlotConfig& cfg)
    : inner_(std::move(inner)),
      policy_(cfg.policy),
      checkpoints_(cfg.n_slots, cfg.policy.kind == CheckpointPolicy::Kind::Off ? 0 : cfg.n_checkpoints, cfg.block_size,
                   cfg.hash_salt) {
  if (!inner_ || cfg.n_slots < 1) throw std::invalid_argument("state slots: need an allocator and at least one slot");
  for (int32_t s = cfg.n_slots - 1; s >= 0; --s) free_.push_back(s);  // slot 0 is taken first
}

namespace {
StateSlotConfig slots_only(int32_t n_slots) {
  StateSlotConfig c;
  c.n_slots = n_slots;
  return c;
}
}  // namespace

StateSlotManager::StateSlotManager(std::unique_ptr<KvSlotAllocator> inner, int32_t n_slots)
    : StateSlotManager(std::move(inner), slots_only(n_slots)) {}

int32_t StateSlotManager::state_slot(SeqId seq) const {
  const auto it = slot_of_.find(seq);
  return it == slot_of_.end() ? -1 : it->second;
}

std::vector<StateCopy> StateSlotManager::take_state_copies() {
  std::vector<StateCopy> out;
  out.swap(copies_);
  return out;
}

int32_t StateSlotManager::state_save_slot(SeqId seq, int32_t pos) const {
  const auto it = saves_.find(seq);
  if (it == saves_.end()) return -1;
  for (const auto& [p, slot] : it->second)
    if (p == pos) return slot;
  return -1;
}

void StateSlotManager::commit_checkpoints() {
  checkpoints_.commit();
  saves_.clear();
}

StateSlotManager::Cut StateSlotManager::cut_at_checkpoint(std::span<const TokenId> prompt) const {
  Cut c;
  c.kv_hit = inner_->peek_cached_prefix(prompt);
  c.hit = checkpoints_.longest(prompt, c.kv_hit);
  c.prompt = prompt.first(std::min(prompt.size(), static_cast<size_t>(c.hit.len) + 1));
  return c;
}

int32_t StateSlotManager::attach_cached_prefix(SeqId seq, std::span<const TokenId> prompt) {
  const auto [kv_hit, hit, cut] = cut_at_checkpoint(prompt);
  if (kv_hit > hit.len) branch_at_[seq] = kv_hit;
  const int32_t attached = inner_->attach_cached_prefix(seq, cut);
  KV_CHECK(attached == hit.len, "state slots: the KV allocator attached " + std::to_string(attached) +
                                    " tokens where the checkpoint covers " + std::to_string(hit.len));
  if (checkpoints_.capacity() > 0) uncounted_query_tokens_ += prompt.size() - cut.size();
  if (hit.slot >= 0) {
    restore_from_[seq] = hit.slot;
    checkpoints_.mark_restored(hit.slot);
  }
  prompt_len_[seq] = static_cast<int32_t>(prompt.size());
  return attached;
}

bool StateSlotManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  const bool needs_slot = !slot_of_.contains(seq);
  if (needs_slot && free_.empty()) return false;
  const int32_t from = inner_->has_seq(seq) ? inner_->seq_len(seq) : 0;
  if (!inner_->allocate_slots(seq, tokens, n_new)) return false;
  if (needs_slot) {
    const int32_t slot = free_.back();
    free_.pop_back();
    slot_of_[seq] = slot;
    if (const auto it = restore_from_.find(seq); it != restore_from_.end()) {
      copies_.push_back({it->second, slot});  // before the step computes past the hit
      restore_from_.erase(it);
    }
  }
  plan_saves(seq, tokens, from, from + n_new);
  return true;
}

void StateSlotManager::plan_saves(SeqId seq, std::span<const TokenId> tokens, int32_t from, int32_t to) {
  if (checkpoints_.capacity() == 0) return;
  const int32_t bs = checkpoints_.block_size();
  std::vector<int32_t> at;  // boundaries b in (from, to]: the state after position b - 1
  if (policy_.kind == CheckpointPolicy::Kind::PromptEnd) {
    if (const auto it = prompt_len_.find(seq); it != prompt_len_.end()) at.push_back(it->second / bs * bs);
  } else {
    const int32_t every = bs * policy_.every_blocks;
    for (int32_t b = (from / every + 1) * every; b <= to; b += every) at.push_back(b);
  }
  // Longest first: when a long chunk crosses more boundaries than the pool has slots, the
  // furthest state saves the most recomputation. But the branch point before all: where the
  // KV cache shows the prompt's prefix is shared, its next sibling will hit.
  std::reverse(at.begin(), at.end());
  const auto branch = branch_at_.find(seq);
  if (branch != branch_at_.end()) at.insert(at.begin(), branch->second);
  for (const int32_t b : at) {
    if (b <= from || b > to) continue;
    const bool shared = branch != branch_at_.end() && b == branch->second;
    if (const int32_t slot = checkpoints_.reserve(tokens.first(static_cast<size_t>(b)), seq, shared); slot >= 0)
      saves_[seq].emplace_back(b - 1, slot);
  }
}

KvAllocatorCounters StateSlotManager::allocator_counters() const {
  KvAllocatorCounters c = inner_->allocator_counters();
  c.prefix_queries_tokens += uncounted_query_tokens_;
  return c;
}

void StateSlotManager::fork(SeqId parent, SeqId child) {
  const int32_t from = state_slot(parent);
  if (from < 0) throw std::logic_error("state slots: fork of a sequence that holds no state");
  if (free_.empty())
    throw std::length_error("the recurrent-state pool has no slot left for a forked sequence (" +
                            std::to_string(num_state_slots()) + " slots)");
  inner_->fork(parent, child);
  slot_of_[child] = free_.back();
  free_.pop_back();
  copies_.push_back({from, slot_of_[child]});
}

void StateSlotManager::free(SeqId seq) {
  inner_->free(seq);
  restore_from_.erase(seq);
  prompt_len_.erase(seq);
  branch_at_.erase(seq);
  if (saves_.erase(seq) > 0) checkpoints_.drop_pending(seq);
  const auto it = slot_of_.find(seq);
  if (it == slot_of_.end()) return;
  free_.push_back(it->second);
  slot_of_.erase(it);
}

void StateSlotManager::validate() const {
  inner_->validate();
  std::vector<int> seen(static_cast<size_t>(num_state_slots()), 0);
  for (int32_t s : free_) ++seen[static_cast<size_t>(s)];
  for (const auto& [seq, s] : slot_of_) {
    ++seen[static_cast<size_t>(s)];
    if (!inner_->has_seq(seq)) throw std::logic_error("state slots: slot held by a sequence the KV allocator lost");
  }
  for (int n : seen)
    if (n != 1) throw std::logic_error("state slots: a slot is both free and held, or held twice");
  checkpoints_.validate();
}

}  // namespace kvscope
