#pragma once
// Memory over time per attached instance, drawn from the pictures' timelines (sampled, thinned
// and bounded off the UI thread by attach/instance_timeline.h; this widget only draws):
//   - cached blocks from the events, one line per instance, preemptions as red markers on it;
//   - kv_cache_usage_perc (solid) and the prefix-cache hit rate (dashed) from /metrics, in %;
//   - live KV events per second (solid) and lag, arrival minus the batch's timestamp (dashed,
//     right axis; it needs synchronised clocks to mean anything).
// One colour per instance throughout; the three plots share the time axis (seconds since the
// attach started). Replots are coalesced (at most ~10 a second, none while hidden). "Follow"
// keeps the whole attach in view; dragging or zooming turns it off until it is ticked again.
#include <QWidget>
#include <memory>
#include <vector>

#include "attach_view/attach_session.h"

class QCheckBox;
class QCustomPlot;
class QCPAxisRect;
class QCPGraph;
class QTimer;

namespace kvscope::ui {

class AttachTimelinePanel : public QWidget {
  Q_OBJECT
 public:
  enum class Series { CachedBlocks, Usage, HitRate, EventsPerS, Lag, Preemptions };
  explicit AttachTimelinePanel(QWidget* parent = nullptr);
  ~AttachTimelinePanel() override;
  void setPicture(const std::shared_ptr<const AttachPicture>& p);
  // Points drawn for one instance's series (the GUI test asserts on them); -1: no such instance.
  int pointCount(size_t instance, Series s) const;
  size_t instances() const { return graphs_.size(); }
  QCustomPlot* plot() const { return plot_; }
  QCheckBox* followBox() const { return follow_; }
  void replotNow();  // what the coalescing timer does (the tests time it)
  bool exportPng(const QString& path, int width = 1200, int height = 700);

 private:
  struct InstanceGraphs {
    QCPGraph *cached, *preempt, *usage, *hit, *events, *lag;
    uint64_t revision = 0;
  };
  void ensureInstances(const AttachPicture& p);
  void fill(InstanceGraphs& g, const std::vector<attach::TimelineSample>& samples);
  void follow();
  void requestReplot();
  void showEvent(QShowEvent* e) override;

  QCustomPlot* plot_;
  QCPAxisRect *blocksRect_, *ratioRect_, *rateRect_;
  std::vector<InstanceGraphs> graphs_;
  QCheckBox* follow_;
  bool programmaticRange_ = false;
  double maxT_ = 1, maxBlocks_ = 1, maxRate_ = 1, maxLag_ = 0.001;
  bool replotPending_ = false;
  QTimer* replotTimer_;
};

}  // namespace kvscope::ui
