#include "attach_view/attach_session.h"

#include <QDateTime>
#include <unordered_map>

#include "attach/metrics_scraper.h"
#include "attach/prefix_forest.h"
#include "attach_view/prefix_tree_attach_source.h"

namespace kvscope::ui {
namespace {

// Root and depth of every block of one instance, by walking parents (memoised, iterative).
struct Lineage {
  uint64_t root = 0;
  int depth = 1;
};

std::unordered_map<kv_events::BlockHash, Lineage> lineages(const attach::CacheView& v) {
  std::unordered_map<kv_events::BlockHash, std::optional<kv_events::BlockHash>> parent;
  for (const auto& [k, b] : v.blocks()) parent.emplace(k.hash, b.parent);
  std::unordered_map<kv_events::BlockHash, Lineage> out;
  for (const auto& [h, p] : parent) {
    std::vector<kv_events::BlockHash> path{h};
    Lineage base{h.bits(), 0};
    while (true) {
      const auto& pp = parent.at(path.back());
      if (auto known = out.find(path.back()); known != out.end()) {
        path.pop_back();
        base = known->second;
        break;
      }
      if (!pp || !parent.count(*pp) || path.size() > parent.size()) {
        base = {path.back().bits(), 0};
        break;
      }
      path.push_back(*pp);
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) out[*it] = {base.root, ++base.depth};
  }
  return out;
}

QString metrics_line(const attach::ScrapeStats& m) {
  if (m.url.empty()) return QStringLiteral("no /metrics given");
  if (m.ok == 0)
    return m.scrapes ? QStringLiteral("metrics: %1").arg(QString::fromStdString(m.last_error))
                     : QStringLiteral("metrics: waiting");
  auto v = [&](const char* k) {
    auto it = m.values.find(k);
    return it == m.values.end() ? -1.0 : it->second;
  };
  QString s = m.values.count("kv_cache_usage_perc")
                  ? QStringLiteral("usage %1%").arg(v("kv_cache_usage_perc") * 100, 0, 'f', 1)
                  : QStringLiteral("usage not exported");
  if (v("prefix_cache_queries_total") > 0)
    s += QStringLiteral(" · hit rate %1%")
             .arg(100 * v("prefix_cache_hits_total") / v("prefix_cache_queries_total"), 0, 'f', 1);
  else if (v("cache_hit_rate") >= 0)
    s += QStringLiteral(" · hit rate %1%").arg(v("cache_hit_rate") * 100, 0, 'f', 1);
  // Only what the engine exported (SGLang and older vLLMs lack some of these).
  for (const auto& [key, label] :
       {std::pair{"num_requests_running", "running"}, std::pair{"num_requests_waiting", "waiting"},
        std::pair{"num_preemptions_total", "preemptions"}})
    if (m.values.count(key)) s += QStringLiteral(" · %1 %2").arg(QLatin1String(label)).arg(v(key));
  if (m.failed + m.not_prometheus) s += QStringLiteral(" · %1 failed scrapes").arg(m.failed + m.not_prometheus);
  return s;
}

AttachCell cell_of(const attach::CachedBlock& b, const std::unordered_map<kv_events::BlockHash, Lineage>& lin) {
  AttachCell c;
  c.group_idx = b.key.group_idx;
  c.medium = b.key.medium ? QString::fromStdString(*b.key.medium) : QString();
  c.hash = QString::fromStdString(b.key.hash.text());
  const auto it = lin.find(b.key.hash);
  if (it != lin.end()) c.root_key = it->second.root, c.depth = it->second.depth;
  c.tokens = static_cast<int>(b.token_ids.size());
  for (size_t i = 0; i < b.token_ids.size() && i < 16; ++i)
    c.token_preview += QString::number(b.token_ids[i]) + QLatin1Char(' ');
  c.first_seen = b.first_seen, c.last_seen = b.last_seen, c.copies = b.copies;
  return c;
}

}  // namespace

std::shared_ptr<AttachPicture> make_attach_picture(const attach::AttachedStreams& z,
                                                   const std::vector<attach::ScrapeStats>& metrics,
                                                   const std::vector<attach::InstanceTimeline>& timelines) {
  auto pic = std::make_shared<AttachPicture>();
  std::vector<const attach::CacheView*> views;
  for (size_t i = 0; i < z.size(); ++i) {
    const attach::InstanceStream& s = z.stream(i);
    const auto& c = s.counters();
    AttachInstancePicture ip;
    ip.endpoint = QString::fromStdString(z.spec(i).endpoint);
    ip.dp_rank = z.spec(i).dp_rank;
    const auto lin = lineages(s.view());
    for (const attach::CachedBlock* b : s.view().sorted()) ip.cells.push_back(cell_of(*b, lin));
    ip.batches = c.batches, ip.gaps = c.gaps, ip.replayed = c.replayed, ip.lost = c.lost_batches;
    ip.ignored = c.ignored.ignored_fields + c.ignored.ignored_events, ip.bad = c.bad_frames + c.undecodable;
    ip.restarts = c.restarts, ip.stale = s.stale();
    const auto src = static_cast<size_t>(z.spec(i).source);
    ip.metrics = src < metrics.size() ? metrics_line(metrics[src]) : QString();
    if (i < timelines.size()) {
      ip.timeline = timelines[i].samples();
      ip.timeline_summary = timelines[i].summary();
      ip.timeline_revision = timelines[i].revision();
    }
    pic->instances.push_back(std::move(ip));
    views.push_back(&s.view());
  }
  const attach::MergedTree merged = attach::merge_trees(views);
  pic->merged_tree = merged_tree_layout(merged, views);
  pic->sharing = attach::fleet_sharing(merged, views.size());
  const attach::FleetOverlap& o = pic->sharing.overlap;
  pic->shared_nodes = o.shared_nodes, pic->duplicated_blocks = o.duplicated_blocks,
  pic->duplicated_tokens = o.duplicated_tokens;
  pic->copies = o.copies, pic->ideal_router_saving = o.ideal_router_saving;
  pic->taken_at = QDateTime::currentMSecsSinceEpoch() / 1000.0;
  return pic;
}

AttachSession::AttachSession(std::vector<attach::InstanceSpec> specs, std::vector<std::string> metrics, QObject* parent)
    : QObject(parent) {
  qRegisterMetaType<std::shared_ptr<const AttachPicture>>();
  thread_ = QThread::create([this, specs = std::move(specs), metrics = std::move(metrics)] { run(specs, metrics); });
}

void AttachSession::start() { thread_->start(); }

AttachSession::~AttachSession() {
  stop_ = true;
  thread_->wait();
  delete thread_;
}

void AttachSession::run(std::vector<attach::InstanceSpec> specs, std::vector<std::string> metrics) {
  try {
    std::vector<std::unique_ptr<attach::MetricsScraper>> scrapers;
    for (const std::string& u : metrics)
      scrapers.push_back(u.empty() ? nullptr : std::make_unique<attach::MetricsScraper>(u));
    attach::ZmqAttach z(std::move(specs));
    std::vector<attach::InstanceTimeline> timelines;  // this thread's: the pictures carry copies
    bool first = true;
    while (!stop_) {
      if (!first) z.poll_for(250);
      std::vector<attach::ScrapeStats> m;
      for (auto& s : scrapers) m.push_back(s ? s->stats() : attach::ScrapeStats{});
      attach::tick_timelines(timelines, z, m, QDateTime::currentMSecsSinceEpoch() / 1000.0);
      emit updated(make_attach_picture(z, m, timelines));
      first = false;
    }
  } catch (const std::exception& e) { emit failed(QString::fromUtf8(e.what())); }
}

}  // namespace kvscope::ui
