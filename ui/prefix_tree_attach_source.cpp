#include "prefix_tree_attach_source.h"

#include <QStringList>
#include <unordered_map>

namespace kvscope::ui {

namespace {

using Key = std::pair<int32_t, kv_events::BlockHash>;
struct KeyHash {
  size_t operator()(const Key& k) const noexcept { return std::hash<kv_events::BlockHash>()(k.second) ^ static_cast<size_t>(k.first); }
};

QString token_ids_text(const std::vector<int64_t>& ids) {
  QStringList parts;
  for (size_t i = 0; i < ids.size() && i < 32; ++i) parts << QString::number(ids[i]);
  if (ids.size() > 32) parts << QStringLiteral("…");
  return QStringLiteral("token ids ") + parts.join(QLatin1Char(' '));
}

}  // namespace

std::vector<PrefixTreeNode> merged_tree_nodes(const attach::MergedTree& merged, const std::vector<const attach::CacheView*>& views) {
  std::unordered_map<Key, int, KeyHash> index;
  index.reserve(merged.nodes.size());
  for (size_t i = 0; i < merged.nodes.size(); ++i) index.emplace(Key{merged.nodes[i].group_idx, merged.nodes[i].hash}, static_cast<int>(i));
  std::vector<PrefixTreeNode> out(merged.nodes.size());
  // Tokens: the first instance (in order) that caches the block says them.
  for (const attach::CacheView* v : views)
    for (const auto& [k, b] : v->blocks()) {
      const auto it = index.find({k.group_idx, k.hash});
      if (it != index.end() && out[static_cast<size_t>(it->second)].tokens.isEmpty()) out[static_cast<size_t>(it->second)].tokens = token_ids_text(b.token_ids);
    }
  for (size_t i = 0; i < merged.nodes.size(); ++i) {
    const attach::MergedNode& m = merged.nodes[i];
    PrefixTreeNode& n = out[i];
    n.id = m.hash.bits();
    n.hash = QString::fromStdString(m.hash.text());
    n.refCount = static_cast<int>(m.instances.size());  // instances holding it
    for (size_t inst : m.instances)
      if (inst < 32) n.instances |= 1u << inst;
    if (m.parent) {
      const auto it = index.find({m.group_idx, *m.parent});
      n.parent = it == index.end() ? -1 : it->second;  // a parent not cached anywhere: a root
    }
  }
  return out;
}

std::shared_ptr<const PrefixTreeLayout> merged_tree_layout(const attach::MergedTree& merged, const std::vector<const attach::CacheView*>& views) {
  auto t = std::make_shared<PrefixTreeLayout>();
  t->build(merged_tree_nodes(merged, views));
  return t;
}

}  // namespace kvscope::ui
