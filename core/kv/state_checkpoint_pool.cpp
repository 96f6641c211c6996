#include "kv/state_checkpoint_pool.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include "kv/block_hash.h"

namespace kvscope {

std::string checkpoint_policy_name(const CheckpointPolicy& p) {
  switch (p.kind) {
    case CheckpointPolicy::Kind::Off:
      return "off";
    case CheckpointPolicy::Kind::PromptEnd:
      return "prompt-end";
    case CheckpointPolicy::Kind::EveryBlocks:
      break;
  }
  return "every:" + std::to_string(p.every_blocks);
}

bool parse_checkpoint_policy(const std::string& s, CheckpointPolicy& out, std::string& why) {
  if (s == "off" || s == "prompt-end" || s == "every-block") {
    out.kind = s == "off"          ? CheckpointPolicy::Kind::Off
               : s == "prompt-end" ? CheckpointPolicy::Kind::PromptEnd
                                   : CheckpointPolicy::Kind::EveryBlocks;
    out.every_blocks = 1;
    return true;
  }
  int32_t n = 0;
  const char* end = s.data() + s.size();
  if (s.rfind("every:", 0) == 0) {
    const auto r = std::from_chars(s.data() + 6, end, n);
    if (r.ec == std::errc() && r.ptr == end && n >= 1 && n <= 1 << 20) {
      out = CheckpointPolicy{CheckpointPolicy::Kind::EveryBlocks, n};
      return true;
    }
  }
  why = "'" + s + "' is not a checkpoint policy: off, prompt-end, every-block or every:N (N >= 1 blocks)";
  return false;
}

StateCheckpointPool::StateCheckpointPool(int32_t first_slot, int32_t capacity, int32_t block_size, uint64_t hash_salt)
    : first_slot_(first_slot),
      block_size_(block_size),
      salt_(hash_salt),
      entries_(static_cast<size_t>(std::max(capacity, 0))) {
  if (block_size < 1) throw std::invalid_argument("state checkpoints need a block size of at least 1");
}

BlockHash StateCheckpointPool::key_of(std::span<const TokenId> prefix) const {
  BlockHash h = kRootBlockHash;
  for (size_t at = 0; at < prefix.size(); at += static_cast<size_t>(block_size_))
    h = block_hash(h, prefix.subspan(at, std::min(prefix.size() - at, static_cast<size_t>(block_size_))), salt_);
  return h;
}

int32_t StateCheckpointPool::find(BlockHash key, std::span<const TokenId> prefix) const {
  const auto [lo, hi] = by_key_.equal_range(key);
  for (auto it = lo; it != hi; ++it) {
    const Entry& e = entries_[static_cast<size_t>(it->second)];
    if (std::equal(e.prefix.begin(), e.prefix.end(), prefix.begin(), prefix.end())) return it->second;
  }
  return -1;
}

StateCheckpointPool::Hit StateCheckpointPool::longest(std::span<const TokenId> tokens, int32_t max_len) const {
  Hit hit;
  if (by_key_.empty()) return hit;
  const int32_t n_blocks = std::min<int32_t>(max_len, static_cast<int32_t>(tokens.size())) / block_size_;
  BlockHash h = kRootBlockHash;
  for (int32_t b = 0; b < n_blocks; ++b) {
    h = block_hash(h, tokens.subspan(static_cast<size_t>(b * block_size_), static_cast<size_t>(block_size_)), salt_);
    const int32_t len = (b + 1) * block_size_;
    const int32_t e = find(h, tokens.first(static_cast<size_t>(len)));
    if (e >= 0 && !entries_[static_cast<size_t>(e)].pending) hit = Hit{len, first_slot_ + e};
  }
  return hit;
}

void StateCheckpointPool::mark_restored(int32_t slot) {
  Entry& e = entries_.at(static_cast<size_t>(slot - first_slot_));
  e.last_used = ++tick_;
  e.shared = true;
  ++counters_.restored;
}

int32_t StateCheckpointPool::victim(bool for_shared) const {
  int32_t lru = -1, lru_shared = -1, n_shared = 0;
  auto older = [&](int32_t i, int32_t than) {
    return than < 0 || entries_[static_cast<size_t>(i)].last_used < entries_[static_cast<size_t>(than)].last_used;
  };
  for (int32_t i = 0; i < capacity(); ++i) {
    const Entry& e = entries_[static_cast<size_t>(i)];
    if (!e.held) return i;
    n_shared += e.shared ? 1 : 0;
    if (e.pending) continue;
    int32_t& best = e.shared ? lru_shared : lru;
    if (older(i, best)) best = i;
  }
  if (lru >= 0) return lru;
  return for_shared || n_shared * 4 > capacity() * 3 ? lru_shared : -1;
}

void StateCheckpointPool::release(int32_t i) {
  Entry& e = entries_[static_cast<size_t>(i)];
  const auto [lo, hi] = by_key_.equal_range(e.key);
  for (auto it = lo; it != hi; ++it)
    if (it->second == i) {
      by_key_.erase(it);
      break;
    }
  e = Entry{};
}

int32_t StateCheckpointPool::reserve(std::span<const TokenId> prefix, SeqId seq, bool shared) {
  const BlockHash key = key_of(prefix);
  if (const int32_t e = find(key, prefix); e >= 0) {
    entries_[static_cast<size_t>(e)].last_used = ++tick_;
    entries_[static_cast<size_t>(e)].shared |= shared;
    return -1;
  }
  const int32_t i = victim(shared);
  if (i < 0) return -1;
  if (entries_[static_cast<size_t>(i)].held) {
    release(i);
    ++counters_.evicted;
  }
  Entry& e = entries_[static_cast<size_t>(i)];
  e = Entry{true, true, shared, seq, key, std::vector<TokenId>(prefix.begin(), prefix.end()), ++tick_};
  by_key_.emplace(key, i);
  return first_slot_ + i;
}

void StateCheckpointPool::commit() {
  for (Entry& e : entries_)
    if (e.pending) {
      e.pending = false;
      ++counters_.saved;
    }
}

void StateCheckpointPool::drop_pending(SeqId seq) {
  for (int32_t i = 0; i < capacity(); ++i)
    if (entries_[static_cast<size_t>(i)].pending && entries_[static_cast<size_t>(i)].writer == seq) release(i);
}

std::vector<StateCheckpointPool::Held> StateCheckpointPool::held() const {
  std::vector<Held> out;
  for (const Entry& e : entries_)
    if (e.held) out.push_back({e.key, static_cast<int32_t>(e.prefix.size()), e.pending});
  return out;
}

void StateCheckpointPool::validate() const {
  size_t held = 0;
  for (int32_t i = 0; i < capacity(); ++i) {
    const Entry& e = entries_[static_cast<size_t>(i)];
    if (!e.held) continue;
    ++held;
    if (e.prefix.empty() || e.prefix.size() % static_cast<size_t>(block_size_) != 0)
      throw std::logic_error("state checkpoints: a checkpoint not at a block boundary");
    if (find(e.key, e.prefix) != i || e.key != key_of(e.prefix))
      throw std::logic_error("state checkpoints: a checkpoint its own key does not find");
  }
  if (held != by_key_.size()) throw std::logic_error("state checkpoints: the key index and the slots disagree");
}

}  // namespace kvscope
