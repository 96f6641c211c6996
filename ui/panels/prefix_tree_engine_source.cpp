#include "panels/prefix_tree_engine_source.h"

#include <unordered_set>

namespace kvscope::ui {

namespace {

bool holds_blocks(const SeqSnap& q) { return !q.block_table.empty() && !is_final_state(q.state); }

QString hash_text(BlockHash h) {
  return QStringLiteral("%1").arg(static_cast<qulonglong>(h), 16, 16, QLatin1Char('0'));
}

}  // namespace

void EnginePrefixTree::reset(VocabPtr vocab) {
  vocab_ = std::move(vocab);
  known_.clear();
}

QString EnginePrefixTree::textOf(const SeqSnap& q, size_t logical, int filled, int blockSize) const {
  if (!vocab_) return {};
  const size_t lo = logical * static_cast<size_t>(blockSize);
  const size_t hi = std::min(q.tokens.size(), lo + static_cast<size_t>(std::max(0, filled)));
  QString t = lo < hi ? vocab_->text(q.tokens.data() + lo, hi - lo) : QString();
  return t.replace(QLatin1Char('\n'), QStringLiteral("\u21b5"));
}

// A hashed block on a table: its parent is the block before it, its tokens the table's.
void EnginePrefixTree::remember(const Snapshot& s, const SeqSnap& q, size_t logical) {
  const BlockId b = q.block_table[logical];
  const BlockSnap& st = s.blocks[static_cast<size_t>(b)];
  Known& k = known_[static_cast<size_t>(b)];
  if (k.valid && k.hash == st.hash) return;
  k.valid = true;
  k.hash = st.hash;
  k.parent = logical > 0 ? q.block_table[logical - 1] : kNoBlock;
  k.tokens = textOf(q, logical, st.filled, s.block_size);
  k.hashText = hash_text(st.hash);
  k.hits = 0;
}

void EnginePrefixTree::observe(const Snapshot& s, const std::vector<BlockEvent>& events) {
  if (known_.size() != s.blocks.size()) known_.assign(s.blocks.size(), Known{});
  for (const SeqSnap& q : s.seqs) {
    if (!holds_blocks(q)) continue;
    for (size_t li = 0; li < q.block_table.size(); ++li) {
      const BlockId b = q.block_table[li];
      if (b != kNoBlock && static_cast<size_t>(b) < s.blocks.size() && s.blocks[static_cast<size_t>(b)].hashed)
        remember(s, q, li);
    }
  }
  // A hit: a cached block revived (CacheHit) or an in-use hashed block taken by one more table.
  for (const BlockEvent& e : events) {
    if (e.group != 0 || e.block < 0 || static_cast<size_t>(e.block) >= known_.size()) continue;
    const bool hit = e.kind == BlockEventKind::CacheHit ||
                     (e.kind == BlockEventKind::Shared && s.blocks[static_cast<size_t>(e.block)].hashed);
    if (hit && known_[static_cast<size_t>(e.block)].valid) ++known_[static_cast<size_t>(e.block)].hits;
  }
}

std::vector<PrefixTreeNode> EnginePrefixTree::nodes(const Snapshot& s) const {
  const size_t nb = s.blocks.size();
  std::vector<int> index(nb, -1);
  std::vector<BlockId> parentOf(nb, kNoBlock);
  std::vector<uint8_t> live(nb, 0);
  std::vector<PrefixTreeNode> out;
  std::unordered_set<BlockHash> checkpointed;  // ready state checkpoints, keyed by their last block's hash
  for (const StateSnap::Checkpoint& c : s.state.checkpoints)
    if (!c.pending) checkpointed.insert(c.block_hash);
  // Live tables first: they say the parent for sure, and which blocks are on a live path.
  for (const SeqSnap& q : s.seqs) {
    if (!holds_blocks(q)) continue;
    BlockId prev = kNoBlock;
    for (size_t li = 0; li < q.block_table.size(); ++li) {
      const BlockId b = q.block_table[li];
      if (b == kNoBlock || static_cast<size_t>(b) >= nb) {
        prev = kNoBlock;
        continue;
      }
      live[static_cast<size_t>(b)] = 1;
      parentOf[static_cast<size_t>(b)] = prev;
      prev = b;
    }
  }
  for (size_t b = 0; b < nb; ++b) {
    const BlockSnap& st = s.blocks[b];
    if (!st.hashed && !live[b]) continue;
    const Known* k = b < known_.size() && known_[b].valid && known_[b].hash == st.hash ? &known_[b] : nullptr;
    if (!live[b] && k) parentOf[b] = k->parent;
    PrefixTreeNode n;
    n.id = b;
    n.refCount = st.ref_count;
    n.live = live[b];
    n.evictable = st.status == BlockStatus::Cached;
    n.partial = !st.hashed;
    n.checkpoint = st.hashed && checkpointed.contains(st.hash);
    if (st.hashed) n.hash = k ? k->hashText : hash_text(st.hash);
    if (k) n.tokens = k->tokens, n.hits = k->hits;
    index[b] = static_cast<int>(out.size());
    out.push_back(std::move(n));
  }
  // The tokens of blocks still filling, from the table that writes them.
  for (const SeqSnap& q : s.seqs)
    if (holds_blocks(q))
      for (size_t li = 0; li < q.block_table.size(); ++li) {
        const BlockId b = q.block_table[li];
        if (b != kNoBlock && static_cast<size_t>(b) < nb && !s.blocks[static_cast<size_t>(b)].hashed)
          out[static_cast<size_t>(index[static_cast<size_t>(b)])].tokens =
              textOf(q, li, s.blocks[static_cast<size_t>(b)].filled, s.block_size);
      }
  for (PrefixTreeNode& n : out) {
    const BlockId p = parentOf[n.id];
    n.parent = p != kNoBlock && static_cast<size_t>(p) < nb ? index[static_cast<size_t>(p)] : -1;
  }
  return out;
}

}  // namespace kvscope::ui
