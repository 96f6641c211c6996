#pragma once
// The overlap a KV-aware router exploits, from the fleet's merged tree (attach/fleet_sharing.h):
// the numbers (prefixes on 2+ instances, duplicated blocks and tokens, what an ideal router
// would save) and two bar plots: prefixes by how many instances hold them, and per instance
// what only it holds against what another instance holds too. The merged tree itself is not
// drawn here.
#include <QWidget>
#include <memory>
#include <vector>

#include "attach_view/attach_session.h"

class QCustomPlot;
class QCPAxisRect;
class QCPBars;
class QLabel;

namespace kvscope::ui {

class AttachOverlapPanel : public QWidget {
  Q_OBJECT
 public:
  explicit AttachOverlapPanel(QWidget* parent = nullptr);
  void setPicture(const std::shared_ptr<const AttachPicture>& p);
  QString numbersText() const;
  // The bars' heights, for the tests: prefixes held by k = 1.. instances; per instance the
  // prefixes only it holds and those another instance holds too.
  std::vector<double> holderBars() const;
  std::vector<double> uniqueBars() const;
  std::vector<double> sharedBars() const;
  QCustomPlot* plot() const { return plot_; }

 private:
  QLabel* numbers_;
  QCustomPlot* plot_;
  QCPAxisRect *holdersRect_, *instancesRect_;
  QCPBars *holders_, *unique_, *shared_;
};

}  // namespace kvscope::ui
