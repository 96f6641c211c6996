#include "kv/contiguous_kv_manager.h"

#include <limits>
#include <stdexcept>

namespace kvscope {

ContiguousKvManager::ContiguousKvManager(int64_t total_slots, int32_t reserve_slots)
    : arena_(total_slots), reserve_(reserve_slots) {
  if (reserve_slots <= 0) throw std::invalid_argument("ContiguousKvManager: reservation must be > 0 slots");
}

const ContiguousKvManager::SeqEntry& ContiguousKvManager::entry(SeqId seq) const {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

bool ContiguousKvManager::has_seq(SeqId seq) const { return seqs_.contains(seq); }
int32_t ContiguousKvManager::seq_len(SeqId seq) const { return entry(seq).len; }

int32_t ContiguousKvManager::attach_cached_prefix(SeqId seq, std::span<const TokenId>) {
  KV_CHECK(!has_seq(seq), "attach_cached_prefix() on existing sequence " + std::to_string(seq));
  seqs_.emplace(seq, SeqEntry{});
  return 0;
}

int32_t ContiguousKvManager::blocks_needed(SeqId seq, int32_t n_new) const {
  if (n_new <= 0) return 0;
  auto it = seqs_.find(seq);
  return it != seqs_.end() && it->second.reserved ? 0 : reserve_;
}

bool ContiguousKvManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  KV_CHECK(n_new >= 0, "allocate_slots() with negative n_new");
  auto it = seqs_.find(seq);
  const bool created = it == seqs_.end();
  if (created) it = seqs_.emplace(seq, SeqEntry{}).first;
  SeqEntry& e = it->second;
  const int32_t new_len = e.len + n_new;
  KV_CHECK(static_cast<int64_t>(tokens.size()) >= new_len, "allocate_slots(): tokens shorter than len + n_new");
  if (n_new == 0) return true;
  if (!e.reserved) {
    // Pre-paging systems size every request for its worst case before its first token.
    if (!arena_.reserve(seq, reserve_)) {
      if (created) seqs_.erase(it);
      return false;
    }
    e.reserved = true;
  }
  // Beyond the reservation the arena records an overflow and the tokens get no slot.
  if (!arena_.set_filled(seq, new_len)) return false;
  e.len = new_len;
  return true;
}

int64_t ContiguousKvManager::slot(SeqId seq, int32_t pos) const {
  const SeqEntry& e = entry(seq);
  KV_CHECK(pos >= 0 && pos < e.len, "slot(): position " + std::to_string(pos) + " has no slot");
  return arena_.base(seq) + pos;
}

void ContiguousKvManager::fork(SeqId parent, SeqId child) {
  const SeqEntry& p = entry(parent);
  KV_CHECK(!has_seq(child), "fork(): child " + std::to_string(child) + " already exists");
  SeqEntry c;
  c.len = p.len;
  if (p.reserved) {
    // Nothing can be shared between contiguous ranges: the child gets its own worst case and
    // a full copy of the parent's filled slots.
    const auto base = arena_.reserve(child, reserve_);
    if (!base) throw std::runtime_error("contiguous baseline: no free run of " + std::to_string(reserve_) + " slots to fork into");
    c.reserved = true;
    arena_.set_filled(child, c.len);
    const int64_t src = arena_.base(parent);
    KV_CHECK(src <= std::numeric_limits<BlockId>::max() && *base <= std::numeric_limits<BlockId>::max(),
             "arena too large for BlockCopy ids");
    if (c.len > 0) pending_copies_.push_back(BlockCopy{static_cast<BlockId>(src), static_cast<BlockId>(*base), c.len});
  }
  seqs_.emplace(child, c);
}

void ContiguousKvManager::free(SeqId seq) {
  arena_.release(seq);
  seqs_.erase(seq);
}

std::vector<BlockCopy> ContiguousKvManager::take_pending_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_copies_);
  return out;
}

int32_t ContiguousKvManager::peek_cached_prefix(std::span<const TokenId>) const { return 0; }

bool ContiguousKvManager::can_admit(std::span<const TokenId>, int32_t n_tokens) const {
  return n_tokens <= reserve_ && arena_.can_reserve(reserve_);
}

std::string ContiguousKvManager::never_fits(int32_t n_tokens, int32_t) const {
  if (n_tokens > reserve_)
    return "needs " + std::to_string(n_tokens) + " slots, but every request reserves " + std::to_string(reserve_);
  if (reserve_ > arena_.total_slots())
    return "a reservation of " + std::to_string(reserve_) + " slots exceeds the whole arena of " +
           std::to_string(arena_.total_slots());
  return {};
}

void ContiguousKvManager::validate() const {
  arena_.validate();
  for (const auto& [id, e] : seqs_) {
    if (e.reserved != arena_.has(id)) throw std::logic_error("ContiguousKvManager invariant: reservation flag drifted");
    if (e.reserved && arena_.filled(id) != e.len) throw std::logic_error("ContiguousKvManager invariant: fill != length");
  }
}

}  // namespace kvscope
