#include "attach_view/prefix_tree_attach_source.h"

#include <QStringList>
#include <algorithm>

namespace kvscope::ui {

namespace {

using Key = std::pair<int32_t, kv_events::BlockHash>;  // merge_trees' order

constexpr size_t kShownIds = 32;  // token ids a hover shows

// What hovering a node needs, copied off the session's views (they keep changing there).
struct Texts {
  std::vector<kv_events::BlockHash> hashes;  // [node]
  std::vector<int64_t> ids;                  // the first kShownIds ids of each node
  std::vector<uint32_t> begin, count;        // [node] into ids; count also says "…"
  std::vector<uint32_t> total;               // [node] tokens in the block
};

QString token_ids_text(const Texts& t, int i) {
  const size_t k = static_cast<size_t>(i);
  if (t.total[k] == 0) return {};
  QStringList parts;
  for (uint32_t j = 0; j < t.count[k]; ++j) parts << QString::number(t.ids[t.begin[k] + j]);
  if (t.total[k] > t.count[k]) parts << QStringLiteral("…");
  return QLatin1Char('[') + parts.join(QLatin1Char(' ')) + QLatin1Char(']');  // ids, not text: no tokenizer here
}

}  // namespace

namespace {

// The nodes (no strings: those are lazy) and, filled when texts is given, what their text needs.
std::vector<PrefixTreeNode> nodes_of(const attach::MergedTree& merged,
                                     const std::vector<const attach::CacheView*>& views, Texts* texts) {
  // merged.nodes is sorted by (group, hash): a binary search finds a node without a hash map.
  auto find = [&](int32_t group, const kv_events::BlockHash& h) {
    const auto it = std::lower_bound(merged.nodes.begin(), merged.nodes.end(), Key{group, h},
                                     [](const attach::MergedNode& n, const Key& k) {
                                       return Key{n.group_idx, n.hash} < k;
                                     });
    return it != merged.nodes.end() && it->group_idx == group && it->hash == h
               ? static_cast<int>(it - merged.nodes.begin())
               : -1;
  };
  std::vector<PrefixTreeNode> out(merged.nodes.size());
  if (texts) {
    texts->begin.assign(out.size(), 0), texts->count.assign(out.size(), 0), texts->total.assign(out.size(), 0);
    // Tokens: the first instance (in order) that caches the block says them.
    for (const attach::CacheView* v : views)
      for (const auto& [k, b] : v->blocks()) {
        const int at = find(k.group_idx, k.hash);
        if (at < 0 || texts->total[static_cast<size_t>(at)] || b.token_ids.empty()) continue;
        const size_t n = std::min(kShownIds, b.token_ids.size());
        texts->begin[static_cast<size_t>(at)] = static_cast<uint32_t>(texts->ids.size());
        texts->count[static_cast<size_t>(at)] = static_cast<uint32_t>(n);
        texts->total[static_cast<size_t>(at)] = static_cast<uint32_t>(b.token_ids.size());
        texts->ids.insert(texts->ids.end(), b.token_ids.begin(), b.token_ids.begin() + static_cast<std::ptrdiff_t>(n));
      }
    texts->hashes.reserve(out.size());
  }
  for (size_t i = 0; i < merged.nodes.size(); ++i) {
    const attach::MergedNode& m = merged.nodes[i];
    PrefixTreeNode& n = out[i];
    n.id = m.hash.bits();
    if (texts) texts->hashes.push_back(m.hash);
    n.refCount = static_cast<int>(m.instances.size());  // instances holding it
    for (size_t inst : m.instances)
      if (inst < 32) n.instances |= 1u << inst;
    if (m.parent) n.parent = find(m.group_idx, *m.parent);  // a parent not cached anywhere (-1): a root
  }
  return out;
}

}  // namespace

std::vector<PrefixTreeNode> merged_tree_nodes(const attach::MergedTree& merged,
                                              const std::vector<const attach::CacheView*>& views) {
  Texts t;
  std::vector<PrefixTreeNode> out = nodes_of(merged, views, &t);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].tokens = token_ids_text(t, static_cast<int>(i));
    out[i].hash = QString::fromStdString(t.hashes[i].text());
  }
  return out;
}

std::shared_ptr<const PrefixTreeLayout> merged_tree_layout(const attach::MergedTree& merged,
                                                           const std::vector<const attach::CacheView*>& views) {
  auto texts = std::make_shared<Texts>();
  auto t = std::make_shared<PrefixTreeLayout>();
  t->build(nodes_of(merged, views, texts.get()));
  // Layout keeps node order, so node i's text is texts' entry i.
  t->setLazyText({[texts](int i) { return token_ids_text(*texts, i); },
                  [texts](int i) { return QString::fromStdString(texts->hashes[static_cast<size_t>(i)].text()); }});
  return t;
}

}  // namespace kvscope::ui
