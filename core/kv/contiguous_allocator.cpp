#include "kv/contiguous_allocator.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvscope {

ContiguousAllocator::ContiguousAllocator(int64_t total_slots) : total_(total_slots) {
  if (total_slots < 0) throw std::invalid_argument("ContiguousAllocator: negative arena size");
  if (total_slots > 0) ranges_.emplace(0, Range{total_slots, kFreeRange, 0});
}

const ContiguousAllocator::Range& ContiguousAllocator::owned(SeqId seq) const {
  auto it = owner_start_.find(seq);
  KV_CHECK(it != owner_start_.end(), "no reservation for sequence " + std::to_string(seq));
  return ranges_.at(it->second);
}

int64_t ContiguousAllocator::base(SeqId seq) const {
  owned(seq);
  return owner_start_.at(seq);
}
int32_t ContiguousAllocator::reserved(SeqId seq) const { return static_cast<int32_t>(owned(seq).length); }
int32_t ContiguousAllocator::filled(SeqId seq) const { return owned(seq).filled; }

bool ContiguousAllocator::can_reserve(int32_t n_slots) const {
  return std::any_of(ranges_.begin(), ranges_.end(),
                     [&](const auto& r) { return r.second.owner == kFreeRange && r.second.length >= n_slots; });
}

std::optional<int64_t> ContiguousAllocator::carve(SeqId seq, int32_t n_slots) {
  for (auto it = ranges_.begin(); it != ranges_.end(); ++it) {
    Range& r = it->second;
    if (r.owner != kFreeRange || r.length < n_slots) continue;
    const int64_t start = it->first;
    if (r.length > n_slots) ranges_.emplace(start + n_slots, Range{r.length - n_slots, kFreeRange, 0});
    r = Range{n_slots, seq, 0};
    reserved_ += n_slots;
    peak_reserved_ = std::max(peak_reserved_, reserved_);
    return start;
  }
  return std::nullopt;
}

std::optional<int64_t> ContiguousAllocator::reserve(SeqId seq, int32_t n_slots) {
  KV_CHECK(seq != kFreeRange, "sequence id collides with the free marker");
  KV_CHECK(!has(seq), "sequence " + std::to_string(seq) + " already holds a reservation");
  KV_CHECK(n_slots > 0, "reserve() of a non-positive slot count");
  const auto start = carve(seq, n_slots);
  if (!start) {
    ++failed_;  // the scheduler keeps the request waiting; the count shows how often that happened
    return std::nullopt;
  }
  owner_start_.emplace(seq, *start);
  ++reservations_;
  return start;
}

void ContiguousAllocator::free_range(std::map<int64_t, Range>::iterator it) {
  reserved_ -= it->second.length;
  filled_ -= it->second.filled;
  it->second.owner = kFreeRange;
  it->second.filled = 0;
  // Merge with the free neighbours so a later reservation sees the longest possible run.
  if (auto next = std::next(it); next != ranges_.end() && next->second.owner == kFreeRange) {
    it->second.length += next->second.length;
    ranges_.erase(next);
  }
  if (it != ranges_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.owner == kFreeRange) {
      prev->second.length += it->second.length;
      ranges_.erase(it);
    }
  }
}

void ContiguousAllocator::release(SeqId seq) {
  auto own = owner_start_.find(seq);
  if (own == owner_start_.end()) return;
  auto it = ranges_.find(own->second);
  owner_start_.erase(own);
  ++releases_;
  free_range(it);
}

bool ContiguousAllocator::extend(SeqId seq, int32_t new_length) {
  auto own = owner_start_.find(seq);
  KV_CHECK(own != owner_start_.end(), "no reservation for sequence " + std::to_string(seq));
  auto it = ranges_.find(own->second);
  const int64_t grow = new_length - it->second.length;
  KV_CHECK(grow > 0, "extend() must grow the reservation");
  auto next = std::next(it);
  if (next == ranges_.end() || next->second.owner != kFreeRange || next->second.length < grow) return false;
  const int64_t rest = next->second.length - grow;
  const int64_t rest_start = next->first + grow;
  ranges_.erase(next);
  if (rest > 0) ranges_.emplace(rest_start, Range{rest, kFreeRange, 0});
  it->second.length = new_length;
  reserved_ += grow;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return true;
}

std::optional<int64_t> ContiguousAllocator::relocate(SeqId seq, int32_t new_length) {
  auto own = owner_start_.find(seq);
  KV_CHECK(own != owner_start_.end(), "no reservation for sequence " + std::to_string(seq));
  const Range old = ranges_.at(own->second);
  KV_CHECK(new_length > old.length, "relocate() must grow the reservation");
  // The old range is still owned here, so first-fit cannot hand out any of its slots.
  const auto start = carve(seq, new_length);
  if (!start) return std::nullopt;
  free_range(ranges_.find(own->second));
  own->second = *start;
  ranges_.at(*start).filled = old.filled;
  filled_ += old.filled;  // free_range() took the old range's fill off the total
  return start;
}

bool ContiguousAllocator::set_filled(SeqId seq, int32_t filled) {
  KV_CHECK(filled >= 0, "negative fill");
  auto own = owner_start_.find(seq);
  KV_CHECK(own != owner_start_.end(), "no reservation for sequence " + std::to_string(seq));
  Range& r = ranges_.at(own->second);
  if (filled > r.length) {
    ++overflows_;  // a pre-allocating system must truncate or fail such a request
    return false;
  }
  filled_ += filled - r.filled;
  r.filled = filled;
  return true;
}

ArenaMetrics ContiguousAllocator::metrics() const {
  ArenaMetrics m;
  m.total_slots = total_;
  m.slots_reserved = reserved_;
  m.slots_filled = filled_;
  m.waste_pct = reserved_ > 0 ? 100.0 * (1.0 - static_cast<double>(filled_) / static_cast<double>(reserved_)) : 0.0;
  for (const auto& [start, r] : ranges_) {
    if (r.owner != kFreeRange) continue;
    m.total_free += r.length;
    m.largest_free_run = std::max(m.largest_free_run, r.length);
  }
  m.external_fragmentation =
      m.total_free > 0 ? 1.0 - static_cast<double>(m.largest_free_run) / static_cast<double>(m.total_free) : 0.0;
  m.live_allocations = static_cast<int32_t>(owner_start_.size());
  m.peak_reserved = peak_reserved_;
  m.overflows = overflows_;
  m.failed_reservations = failed_;
  return m;
}

std::vector<ArenaRange> ContiguousAllocator::ranges() const {
  std::vector<ArenaRange> out;
  out.reserve(ranges_.size());
  for (const auto& [start, r] : ranges_) out.push_back(ArenaRange{start, r.length, r.owner, r.filled});
  return out;
}

void ContiguousAllocator::validate() const {
  auto fail = [](const std::string& what) { throw std::logic_error("ContiguousAllocator invariant: " + what); };
  int64_t expect = 0, reserved = 0, filled = 0;
  bool prev_free = false;
  size_t owners = 0;
  for (const auto& [start, r] : ranges_) {
    if (start != expect) fail("ranges do not tile the arena at " + std::to_string(start));
    if (r.length <= 0) fail("empty range at " + std::to_string(start));
    const bool free = r.owner == kFreeRange;
    if (free && prev_free) fail("two adjacent free runs were not merged at " + std::to_string(start));
    if (!free) {
      ++owners;
      reserved += r.length;
      filled += r.filled;
      if (r.filled < 0 || r.filled > r.length) fail("fill outside its reservation");
      auto own = owner_start_.find(r.owner);
      if (own == owner_start_.end() || own->second != start) fail("owner index out of date");
    }
    prev_free = free;
    expect = start + r.length;
  }
  if (expect != total_) fail("ranges do not cover the arena");
  if (owners != owner_start_.size()) fail("owner index holds stale entries");
  if (reserved != reserved_ || filled != filled_) fail("reserved/filled totals drifted");
}

}  // namespace kvscope
