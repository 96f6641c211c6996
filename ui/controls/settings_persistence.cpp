// SettingsPanel, its persistence: the fields and the recent models in QSettings.
#include <QCheckBox>
#include <QComboBox>
#include <QLineEdit>
#include <QMenu>
#include <QSettings>
#include <QSpinBox>
#include <QToolButton>
#include <algorithm>

#include "controls/settings_panel.h"

namespace kvscope::ui {

namespace {

constexpr int kMaxRecent = 8;

}  // namespace

QStringList SettingsPanel::recentModels() const {
  return QSettings().value(QStringLiteral("recentModels")).toStringList();
}

void SettingsPanel::addRecentModel(const QString& path) {
  QStringList r = recentModels();
  r.removeAll(path);
  r.prepend(path);
  while (r.size() > kMaxRecent) r.removeLast();
  QSettings().setValue(QStringLiteral("recentModels"), r);
  rebuildRecentMenu();
}

void SettingsPanel::rebuildRecentMenu() {
  QMenu* m = recent_->menu();
  m->clear();
  for (const QString& p : recentModels()) m->addAction(p, this, [this, p] { setModelPath(p); });
  recent_->setEnabled(!m->isEmpty());
}

void SettingsPanel::load() {
  QSettings s;
  s.beginGroup(QStringLiteral("engine"));
  if (s.contains(QStringLiteral("blockSize"))) {
    blockSize_->setCurrentIndex(std::max(0, blockSize_->findData(s.value(QStringLiteral("blockSize")).toInt())));
    poolUnit_->setCurrentIndex(s.value(QStringLiteral("poolUnit")).toInt());
    pool_->setText(s.value(QStringLiteral("pool")).toString());
    dtype_->setCurrentText(s.value(QStringLiteral("dtype")).toString());
    stateDtype_->setCurrentText(s.value(QStringLiteral("stateDtype"), QStringLiteral("f32")).toString());
    if (s.contains(QStringLiteral("checkpoints"))) {
      checkpoints_->setCurrentText(s.value(QStringLiteral("checkpoints")).toString());
      checkpointMiB_->setText(s.value(QStringLiteral("checkpointMiB")).toString());
    }
    window_->setText(s.value(QStringLiteral("window")).toString());
    sinks_->setText(s.value(QStringLiteral("sinks")).toString());
    evict_->setText(s.value(QStringLiteral("evict")).toString());
    prefix_->setChecked(s.value(QStringLiteral("prefix"), true).toBool());
    baseline_->setChecked(s.value(QStringLiteral("baseline"), false).toBool());
    if (const int i = reserve_->findData(s.value(QStringLiteral("baselineReserve")).toString()); i >= 0)
      reserve_->setCurrentIndex(i);
    if (s.contains(QStringLiteral("baselineGuess")))
      reserveGuess_->setText(s.value(QStringLiteral("baselineGuess")).toString());
    maxRunning_->setValue(s.value(QStringLiteral("maxRunning"), 64).toInt());
    maxBatched_->setValue(s.value(QStringLiteral("maxBatched"), 512).toInt());
    maxLen_->setText(s.value(QStringLiteral("maxLen"), 0).toString());
  }
  threads_->setValue(s.value(QStringLiteral("threads"), default_gui_threads()).toInt());
  // A saved CUDA choice on a machine without CUDA is refused the same way (and says so).
  if (const auto c = parse_backend_choice(s.value(QStringLiteral("backend"), QStringLiteral("auto")).toString()))
    setBackendChoice(*c);
  s.endGroup();
  rebuildRecentMenu();
  revalidate();
}

void SettingsPanel::save() const {
  QSettings s;
  s.beginGroup(QStringLiteral("engine"));
  s.setValue(QStringLiteral("blockSize"), blockSize_->currentData().toInt());
  s.setValue(QStringLiteral("poolUnit"), poolUnit_->currentIndex());
  s.setValue(QStringLiteral("pool"), pool_->text());
  s.setValue(QStringLiteral("dtype"), dtype_->currentText());
  s.setValue(QStringLiteral("stateDtype"), stateDtype_->currentText());
  s.setValue(QStringLiteral("checkpoints"), checkpoints_->currentText());
  s.setValue(QStringLiteral("checkpointMiB"), checkpointMiB_->text());
  s.setValue(QStringLiteral("window"), window_->text());
  s.setValue(QStringLiteral("sinks"), sinks_->text());
  s.setValue(QStringLiteral("evict"), evict_->text());
  s.setValue(QStringLiteral("prefix"), prefix_->isChecked());
  s.setValue(QStringLiteral("baseline"), baseline_->isChecked());
  s.setValue(QStringLiteral("baselineReserve"), reserve_->currentData().toString());
  s.setValue(QStringLiteral("baselineGuess"), reserveGuess_->text());
  s.setValue(QStringLiteral("maxRunning"), maxRunning_->value());
  s.setValue(QStringLiteral("maxBatched"), maxBatched_->value());
  s.setValue(QStringLiteral("maxLen"), maxLen_->text());
  s.setValue(QStringLiteral("threads"), threads_->value());
  s.setValue(QStringLiteral("backend"), backend_choice_key(backendChoice()));
  s.endGroup();
}

}  // namespace kvscope::ui
