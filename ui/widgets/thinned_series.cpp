#include "widgets/thinned_series.h"

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

namespace kvscope::ui {

ThinnedSeries::ThinnedSeries(std::vector<QCPGraph*> graphs, double bucket, int maxPoints)
    : graphs_(std::move(graphs)), initialBucket_(bucket), bucket_(bucket), maxPoints_(std::max(2, maxPoints)) {}

void ThinnedSeries::add(double key, const std::vector<double>& values) {
  const double b = std::floor(key / bucket_);
  if (points_ > 0 && b == lastBucket_) {
    for (size_t i = 0; i < graphs_.size() && i < values.size(); ++i) {
      auto last = graphs_[i]->data()->end() - 1;
      last->value = std::max(last->value, values[i]);
    }
    return;
  }
  for (size_t i = 0; i < graphs_.size() && i < values.size(); ++i) graphs_[i]->addData(key, values[i]);
  lastBucket_ = b;
  if (++points_ > maxPoints_) coarsen();
}

void ThinnedSeries::coarsen() {
  while (points_ > maxPoints_) {
    bucket_ *= 2;
    int n = 0;
    for (QCPGraph* g : graphs_) {
      QVector<double> keys, values;
      double last = 0;
      for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
        const double b = std::floor(it->key / bucket_);
        if (!keys.isEmpty() && b == last) {
          values.back() = std::max(values.back(), it->value);
        } else {
          keys.push_back(it->key);
          values.push_back(it->value);
          last = b;
        }
      }
      n = static_cast<int>(keys.size());
      lastBucket_ = last;
      g->setData(keys, values, true);
    }
    points_ = n;
  }
}

void ThinnedSeries::clear() {
  for (QCPGraph* g : graphs_) g->data()->clear();
  bucket_ = initialBucket_;
  points_ = 0;
}

}  // namespace kvscope::ui
