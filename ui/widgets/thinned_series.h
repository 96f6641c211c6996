#pragma once
// A live QCustomPlot series with a bounded number of points. Every snapshot adds a sample, and
// QCustomPlot's replot (filled areas especially) grows with the points drawn: after ten seconds
// of a busy 16K-block run the memory plot took 30 ms to replot, a frozen UI. Samples are merged
// into buckets along the key axis (each graph keeps its maximum in the bucket, so peaks stay
// visible); when the points exceed the cap the bucket width doubles and the series is re-merged.
#include <vector>

class QCPGraph;

namespace kvscope::ui {

class ThinnedSeries {
 public:
  // graphs share keys; bucket: the initial key width merged into one point.
  ThinnedSeries(std::vector<QCPGraph*> graphs, double bucket, int maxPoints = 600);
  void add(double key, const std::vector<double>& values);  // one value per graph
  void clear();                                             // empties the graphs too
  int points() const { return points_; }
  double bucket() const { return bucket_; }

 private:
  void coarsen();

  std::vector<QCPGraph*> graphs_;
  double initialBucket_, bucket_;
  int maxPoints_;
  int points_ = 0;
  double lastBucket_ = 0;
};

}  // namespace kvscope::ui
