#include "kv/contiguous_kv_manager.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace kvscope {

ContiguousKvManager::ContiguousKvManager(int64_t total_slots, int32_t max_model_len, BaselineReserve policy,
                                         int32_t unit)
    : arena_(total_slots), max_model_len_(max_model_len), policy_(policy), unit_(unit) {
  if (max_model_len <= 0) throw std::invalid_argument("ContiguousKvManager: reservation must be > 0 slots");
  if (unit <= 0) throw std::invalid_argument("ContiguousKvManager: the reservation unit must be > 0 slots");
  if (policy.kind == BaselineReserveKind::Fixed && policy.fixed_slots <= 0)
    throw std::invalid_argument("ContiguousKvManager: a fixed reservation must be > 0 slots");
}

const ContiguousKvManager::SeqEntry& ContiguousKvManager::entry(SeqId seq) const {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence " + std::to_string(seq));
  return it->second;
}

int32_t ContiguousKvManager::round_up(int64_t slots) const {
  const int64_t r = (slots + unit_ - 1) / unit_ * unit_;
  return static_cast<int32_t>(std::min<int64_t>(r, std::numeric_limits<int32_t>::max() / 2));
}

// Request and Fixed reservations start small enough for the arena and grow; only
// MaxModelLen insists on the whole max_model_len (never_fits() rejects it when it cannot fit).
int32_t ContiguousKvManager::ceiling() const {
  const int64_t arena_units = arena_.total_slots() / unit_ * unit_;
  return static_cast<int32_t>(std::min<int64_t>(round_up(max_model_len_), arena_units));
}

int32_t ContiguousKvManager::reservation_for(int32_t n_tokens, int32_t max_len) const {
  if (max_len <= 0) max_len = max_model_len_;
  int64_t want = 0;
  switch (policy_.kind) {
    case BaselineReserveKind::MaxModelLen:
      return round_up(max_model_len_);
    case BaselineReserveKind::Request:
      want = std::min(max_len, max_model_len_);
      break;
    case BaselineReserveKind::Fixed:
      want = policy_.fixed_slots;
      break;
  }
  return std::max(round_up(n_tokens), std::min(round_up(want), ceiling()));
}

bool ContiguousKvManager::has_seq(SeqId seq) const { return seqs_.contains(seq); }
int32_t ContiguousKvManager::seq_len(SeqId seq) const { return entry(seq).len; }

int32_t ContiguousKvManager::attach_cached_prefix(SeqId seq, std::span<const TokenId>) {
  KV_CHECK(!has_seq(seq), "attach_cached_prefix() on existing sequence " + std::to_string(seq));
  seqs_.emplace(seq, SeqEntry{0, max_model_len_, false, 0});
  return 0;
}

void ContiguousKvManager::set_max_len(SeqId seq, int32_t max_len) {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "set_max_len() on unknown sequence " + std::to_string(seq));
  it->second.max_len = max_len;
}

// Doubling keeps the number of moves per sequence logarithmic in its length, like a vector.
int32_t ContiguousKvManager::growth_target(int32_t reserved, int32_t needed) const {
  const int32_t need = round_up(needed);
  if (need > ceiling()) return 0;  // no reservation may grow that far
  return std::max(need, std::min(round_up(2LL * reserved), ceiling()));
}

int32_t ContiguousKvManager::blocks_needed(SeqId seq, int32_t n_new) const {
  if (n_new <= 0) return 0;
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || !it->second.reserved) {
    const int32_t max_len = it == seqs_.end() ? max_model_len_ : it->second.max_len;
    const int32_t len = it == seqs_.end() ? 0 : it->second.len;
    return reservation_for(len + n_new, max_len);
  }
  const int32_t reserved = arena_.reserved(seq), needed = it->second.len + n_new;
  return needed <= reserved ? 0 : std::max(0, growth_target(reserved, needed) - reserved);
}

void ContiguousKvManager::copy_slots(int64_t src, int64_t dst, int32_t n) {
  KV_CHECK(src % unit_ == 0 && dst % unit_ == 0, "contiguous copies must start on a unit boundary");
  KV_CHECK((src + n) / unit_ <= std::numeric_limits<BlockId>::max() &&
               (dst + n) / unit_ <= std::numeric_limits<BlockId>::max(),
           "arena too large for BlockCopy ids");
  for (int32_t off = 0; off < n; off += unit_)
    pending_copies_.push_back(BlockCopy{static_cast<BlockId>((src + off) / unit_),
                                        static_cast<BlockId>((dst + off) / unit_), std::min(unit_, n - off)});
}

bool ContiguousKvManager::grow(SeqId seq, SeqEntry& e, int32_t needed) {
  const int32_t reserved = arena_.reserved(seq);
  if (e.overflowed_at != reserved) {  // the scheduler retries after each preemption: count once
    ++counters_.overflows;
    e.overflowed_at = reserved;
  }
  const int32_t target = growth_target(reserved, needed);
  if (target == 0) {
    ++counters_.refused_overflows;
    return false;
  }
  // The doubled size in place, else moved; failing that just what is needed, in place or moved.
  const int32_t minimal = round_up(needed);
  const int32_t sizes[2] = {target, minimal};
  for (int i = 0; i < (minimal < target ? 2 : 1); ++i) {
    if (arena_.extend(seq, sizes[i])) {
      ++counters_.grown_in_place;
      e.overflowed_at = 0;
      return true;
    }
    const int64_t old_base = arena_.base(seq);
    if (const auto base = arena_.relocate(seq, sizes[i])) {
      ++counters_.relocations;
      counters_.relocated_slots += static_cast<uint64_t>(e.len);
      copy_slots(old_base, *base, e.len);  // the K/V must follow the sequence to its new run
      e.overflowed_at = 0;
      return true;
    }
  }
  return false;  // the scheduler preempts (recompute), as when the paged pool is full
}

bool ContiguousKvManager::allocate_slots(SeqId seq, std::span<const TokenId> tokens, int32_t n_new) {
  KV_CHECK(n_new >= 0, "allocate_slots() with negative n_new");
  auto it = seqs_.find(seq);
  const bool created = it == seqs_.end();
  if (created) it = seqs_.emplace(seq, SeqEntry{0, max_model_len_, false, 0}).first;
  SeqEntry& e = it->second;
  const int32_t new_len = e.len + n_new;
  KV_CHECK(static_cast<int64_t>(tokens.size()) >= new_len, "allocate_slots(): tokens shorter than len + n_new");
  if (n_new == 0) return true;
  if (!e.reserved) {
    // Pre-paging systems size a request before its first token (how much: the policy).
    const int32_t size = reservation_for(new_len, e.max_len);
    if (new_len > size) {  // MaxModelLen only: longer than max_model_len
      ++counters_.overflows;
      ++counters_.refused_overflows;
      if (created) seqs_.erase(it);
      return false;
    }
    if (!arena_.reserve(seq, size)) {
      if (created) seqs_.erase(it);
      return false;
    }
    e.reserved = true;
  } else if (new_len > arena_.reserved(seq) && !grow(seq, e, new_len)) {
    return false;
  }
  const bool fits = arena_.set_filled(seq, new_len);
  KV_CHECK(fits, "the reservation did not grow to the sequence's length");
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
  SeqEntry c{p.len, p.max_len, false, 0};
  if (p.reserved) {
    // Nothing can be shared between contiguous ranges: the child gets its own reservation and
    // a full copy of the parent's filled slots.
    const int32_t size = reservation_for(p.len, p.max_len);
    const auto base = arena_.reserve(child, size);
    if (!base)
      throw std::runtime_error("contiguous baseline: no free run of " + std::to_string(size) + " slots to fork into");
    c.reserved = true;
    arena_.set_filled(child, c.len);
    copy_slots(arena_.base(parent), *base, c.len);
  }
  seqs_.emplace(child, c);
}

void ContiguousKvManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it != seqs_.end() && it->second.overflowed_at != 0) ++counters_.overflow_preemptions;
  arena_.release(seq);
  seqs_.erase(seq);
}

std::vector<BlockCopy> ContiguousKvManager::take_pending_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_copies_);
  return out;
}

int32_t ContiguousKvManager::peek_cached_prefix(std::span<const TokenId>) const { return 0; }

bool ContiguousKvManager::can_admit(std::span<const TokenId>, int32_t n_tokens, int32_t max_len) const {
  const int32_t size = reservation_for(n_tokens, max_len);
  return n_tokens <= size && arena_.can_reserve(size);
}

void ContiguousKvManager::admission_blocked(std::span<const TokenId>, int32_t n_tokens, int32_t max_len) {
  ++counters_.blocked_admission_steps;
  const int32_t size = reservation_for(n_tokens, max_len);
  const ArenaMetrics m = arena_.metrics();
  // Enough free slots in all, none of the runs long enough: the holes between reservations.
  if (m.total_free >= size && m.largest_free_run < size) ++counters_.blocked_by_fragmentation_steps;
}

std::string ContiguousKvManager::never_fits(int32_t n_tokens, int32_t) const {
  if (policy_.kind == BaselineReserveKind::MaxModelLen) {
    const int32_t reserve = round_up(max_model_len_);
    if (n_tokens > reserve)
      return "needs " + std::to_string(n_tokens) + " slots, but every request reserves " + std::to_string(reserve);
    if (reserve > arena_.total_slots())
      return "a reservation of " + std::to_string(reserve) + " slots exceeds the whole arena of " +
             std::to_string(arena_.total_slots());
    return {};
  }
  if (round_up(n_tokens) > ceiling())
    return "needs " + std::to_string(round_up(n_tokens)) + " slots, but no reservation may exceed " +
           std::to_string(ceiling());
  return {};
}

void ContiguousKvManager::validate() const {
  arena_.validate();
  for (const auto& [id, e] : seqs_) {
    if (e.reserved != arena_.has(id)) throw std::logic_error("ContiguousKvManager invariant: reservation flag drifted");
    if (e.reserved && arena_.filled(id) != e.len)
      throw std::logic_error("ContiguousKvManager invariant: fill != length");
    if (e.reserved && (arena_.base(id) % unit_ != 0 || arena_.reserved(id) % unit_ != 0))
      throw std::logic_error("ContiguousKvManager invariant: a reservation is not unit-aligned");
  }
}

}  // namespace kvscope
