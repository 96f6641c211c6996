#pragma once
// The window's side of an attach: a ZmqAttach (and /metrics scrapers) on their own thread,
// publishing an immutable AttachPicture a few times a second, so the UI thread only ever paints
// a finished picture (a replay request may block its thread for seconds; never the UI's).
#include <QObject>
#include <QString>
#include <QThread>
#include <atomic>
#include <memory>
#include <vector>

#include "attach/fleet_sharing.h"
#include "attach/instance_timeline.h"
#include "attach/metrics_summary.h"
#include "attach/zmq_subscriber.h"
#include "widgets/prefix_tree_layout.h"

namespace kvscope::ui {

struct AttachCell {
  int group_idx = 0;
  QString medium;         // "" when the stream did not say
  QString hash;           // as text
  uint64_t root_key = 0;  // the bits of its prefix's root hash: its colour
  int depth = 1;          // blocks from the root
  int tokens = 0;
  QString token_preview;  // the first token ids
  double first_seen = 0, last_seen = 0;
  uint32_t copies = 1;
};

struct AttachInstancePicture {
  QString endpoint;
  int dp_rank = 0;
  std::vector<AttachCell> cells;  // sorted by group, medium, first seen (the block map relies on it)
  uint64_t batches = 0, gaps = 0, replayed = 0, lost = 0, ignored = 0, bad = 0, restarts = 0;
  bool stale = false;
  QString metrics;  // "usage 42% · hits 12/40 · running 3" or the scrape problem
  // Memory over time (attach/instance_timeline.h): already thinned, at most a few hundred.
  std::vector<attach::TimelineSample> timeline;
  attach::TimelineSummary timeline_summary;
  uint64_t timeline_revision = 0;  // the same revision: the same samples (no redraw needed)
};

struct AttachPicture {
  std::vector<AttachInstancePicture> instances;
  uint64_t shared_nodes = 0, duplicated_blocks = 0, duplicated_tokens = 0, copies = 0;
  double ideal_router_saving = 0;
  attach::FleetSharing sharing;                         // the overlap by holder count and per instance
  double taken_at = 0;                                  // Unix seconds
  std::shared_ptr<const PrefixTreeLayout> merged_tree;  // laid out on the session's thread
};

class AttachSession : public QObject {
  Q_OBJECT
 public:
  // metrics[i] belongs to the instances of source i (InstanceSpec::source); "" for none.
  AttachSession(std::vector<attach::InstanceSpec> specs, std::vector<std::string> metrics, QObject* parent = nullptr);
  ~AttachSession() override;  // stops the thread
  // Starts the attach on the session's thread; call once, after connecting the signals (a bad
  // address fails at once, and a signal emitted before its connection is lost).
  void start();
 signals:
  void updated(std::shared_ptr<const AttachPicture> picture);
  void failed(QString why);

 private:
  void run(std::vector<attach::InstanceSpec> specs, std::vector<std::string> metrics);
  QThread* thread_ = nullptr;
  std::atomic<bool> stop_{false};
};

// The picture of one attach state, live or played back (also used by the tests); timelines[i]
// belongs to instance i.
std::shared_ptr<AttachPicture> make_attach_picture(const attach::AttachedStreams& z,
                                                   const std::vector<attach::ScrapeStats>& metrics,
                                                   const std::vector<attach::InstanceTimeline>& timelines = {});

}  // namespace kvscope::ui

Q_DECLARE_METATYPE(std::shared_ptr<const kvscope::ui::AttachPicture>)
