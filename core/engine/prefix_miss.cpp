#include "engine/prefix_miss.h"

#include <algorithm>

#include "kv/block_hash.h"

namespace kvscope {

void PrefixLedger::registered(int32_t group, BlockHash h, uint64_t step, SeqId by) {
  if (entries_.size() >= max_entries_) {
    // Forget about half, arbitrary ones: a bounded ledger answers "never cached" for them.
    for (auto it = entries_.begin(); it != entries_.end() && entries_.size() > max_entries_ / 2;)
      it = entries_.erase(it);
  }
  entries_[key(group, h)] = Entry{.registered_step = step, .registered_by = by};
}

void PrefixLedger::evicted(int32_t group, BlockHash h, uint64_t step, SeqId by, bool orphaned) {
  auto it = entries_.find(key(group, h));
  if (it == entries_.end()) return;
  it->second.evicted = true;
  it->second.evicted_step = step;
  it->second.evicted_by = by;
  it->second.orphaned = orphaned;
}

const PrefixLedger::Entry* PrefixLedger::find(int32_t group, BlockHash h) const {
  auto it = entries_.find(key(group, h));
  return it == entries_.end() ? nullptr : &it->second;
}

namespace {

int32_t common_prefix(std::span<const TokenId> a, std::span<const TokenId> b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<int32_t>(ia - a.begin());
}

BlockHash chain_hash(std::span<const TokenId> prompt, int32_t blocks, int32_t bs, uint64_t salt) {
  BlockHash h = kRootBlockHash;
  for (int32_t bi = 0; bi < blocks; ++bi) h = block_hash(h, prompt.subspan(static_cast<size_t>(bi) * bs, bs), salt);
  return h;
}

// The group whose cache ended the hit (the shorter one; the global group on a tie).
int32_t limiting_group(const MissQuery& q) {
  int32_t g = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(q.groups.size()); ++i)
    if (q.groups[i].hit_tokens < q.groups[g].hit_tokens) g = i;
  return g;
}

struct Best {
  const PromptCandidate* c = nullptr;
  int32_t lcp = -1;
};

// The candidate sharing the longest prefix with the prompt, among those `keep` accepts (the
// newest wins a tie: candidates come oldest first).
Best closest(std::span<const TokenId> prompt, const std::vector<PromptCandidate>& others,
             const std::function<bool(const PromptCandidate&)>& keep) {
  Best b;
  for (const PromptCandidate& c : others) {
    if (!keep(c)) continue;
    const int32_t l = common_prefix(prompt, c.tokens);
    if (l >= b.lcp) b = {&c, l};
  }
  return b;
}

void set_other(PrefixMiss& m, const PromptCandidate& c) {
  m.other = c.story->id;
  m.other_engine = c.story->engine;
}

// A same-engine request held every token of block bi: why was the block not there?
bool explain_full_match(PrefixMiss& m, const PromptCandidate& c, int32_t bi, int32_t bs, int32_t window) {
  const int32_t end = (bi + 1) * bs;
  set_other(m, c);
  if (c.kv_tokens < end) {
    m.reason = MissReason::NotYetFull;
    m.filled = std::max(0, c.kv_tokens - bi * bs);
    return true;
  }
  const uint64_t dropped = c.story->first_window_drop_step[m.group > 0 ? 1 : 0];
  if (window > 0 && dropped > 0) {
    m.reason = MissReason::WindowDropped;
    m.step = dropped;
    return true;
  }
  return false;
}

PrefixMiss explain_miss(const MissQuery& q, const PrefixLedger& ledger, const std::vector<PromptCandidate>& others,
                        Best same) {
  PrefixMiss m;
  const int32_t bs = q.block_size, len = static_cast<int32_t>(q.prompt.size());
  const int32_t bi = q.hit_tokens / bs;
  m.block_index = bi;
  if (!q.prefix_caching) return m.reason = MissReason::PrefixCachingOff, m;
  // The groups' hits are the KV cache's own; a hybrid recurrent model cuts them to a checkpoint.
  for (const LookupGroup& g : q.groups)
    if (g.hit_tokens > q.hit_tokens) return m.reason = MissReason::NoStateCheckpoint, m;
  if ((bi + 1) * bs > len) return m.reason = MissReason::NotYetFull, m.filled = len - bi * bs, m;
  if (bi >= (len - 1) / bs) return m.reason = MissReason::LastPromptToken, m;
  m.group = limiting_group(q);
  const LookupGroup& g = q.groups[static_cast<size_t>(m.group)];
  const auto* e = ledger.find(m.group, chain_hash(q.prompt, bi + 1, bs, g.salt));
  if (e && e->evicted) {
    m.reason = MissReason::Evicted;
    m.step = e->evicted_step;
    m.other = e->evicted_by;
    m.other_engine = q.engine;
    m.orphaned = e->orphaned;
    return m;
  }
  const int32_t end = (bi + 1) * bs;
  if (same.c && same.lcp >= end && explain_full_match(m, *same.c, bi, bs, g.window)) return m;
  const Best other = closest(q.prompt, others, [&](const PromptCandidate& c) {
    return c.story->engine != q.engine && c.story->hash_salt != g.salt;
  });
  if (other.c && other.lcp >= end) {
    m.reason = MissReason::SaltDiffers;
    set_other(m, *other.c);
    m.other_cache = other.c->story->cache_identity;
    return m;
  }
  if (same.c && same.lcp >= std::max(1, bi * bs) && same.lcp < end) {
    set_other(m, *same.c);
    if (same.lcp >= static_cast<int32_t>(same.c->tokens.size())) {
      // The other request simply ended inside this block.
      m.reason = MissReason::NotYetFull;
      m.filled = std::max(0, std::min(same.lcp, same.c->kv_tokens) - bi * bs);
      return m;
    }
    m.reason = MissReason::PromptDiffers;
    m.token_pos = same.lcp;
    m.token = q.prompt[static_cast<size_t>(same.lcp)];
    m.other_token = same.c->tokens[static_cast<size_t>(same.lcp)];
    return m;
  }
  m.reason = MissReason::NeverCached;
  m.other = -1;
  return m;
}

}  // namespace

PrefixLookup explain_prefix_lookup(const MissQuery& q, const PrefixLedger& ledger,
                                   const std::vector<PromptCandidate>& others) {
  PrefixLookup r;
  r.prompt_tokens = static_cast<int32_t>(q.prompt.size());
  r.hit_tokens = q.hit_tokens;
  r.blocks_attached = q.hit_tokens / std::max(1, q.block_size);
  const Best same = closest(q.prompt, others, [&](const PromptCandidate& c) { return c.story->engine == q.engine; });
  r.shared_tokens = std::max(0, same.lcp);
  r.shared_with = same.c ? same.c->story->id : -1;
  r.miss = explain_miss(q, ledger, others, same);
  return r;
}

}  // namespace kvscope
