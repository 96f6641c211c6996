// SettingsPanel, its one entry for typed settings changes (lessons, the command line).
#include <QCheckBox>
#include <QComboBox>
#include <QLineEdit>
#include <QSpinBox>

#include "controls/settings_panel.h"

namespace kvscope::ui {

void SettingsPanel::applyEdit(const EngineConfigEdit& e) {
  if (e.blockSize) blockSize_->setCurrentIndex(blockSize_->findData(*e.blockSize));
  if (e.kvBlocks) {
    poolUnit_->setCurrentIndex(0);
    pool_->setText(QString::number(*e.kvBlocks));
  }
  if (e.kvDtype) dtype_->setCurrentText(QString::fromLatin1(kv_dtype_name(*e.kvDtype)));
  if (e.window) window_->setText(QString::number(*e.window));
  if (e.sinks) sinks_->setText(QString::number(*e.sinks));
  if (e.evict) evict_->setText(*e.evict);
  if (e.prefixCaching) prefix_->setChecked(*e.prefixCaching);
  if (e.baseline) baseline_->setChecked(*e.baseline);
  if (const auto& r = e.baselineReserve) {
    // The combo's item data is the text parse_baseline_reserve() reads; a number is the fixed guess.
    const bool fixed = r->kind == BaselineReserveKind::Fixed;
    reserve_->setCurrentIndex(
        reserve_->findData(fixed ? QStringLiteral("fixed") : QString::fromStdString(baseline_reserve_name(*r))));
    if (fixed) reserveGuess_->setText(QString::number(r->fixed_slots));
  }
  if (e.threads) threads_->setValue(*e.threads);
  if (e.backend) setBackendChoice(*e.backend);
  revalidate();
}

bool SettingsPanel::setOverride(const QString& key, const QString& value) {
  EngineConfigEdit e;
  if (!parse_config_override(key, value, &e)) return false;
  applyEdit(e);
  return true;
}

}  // namespace kvscope::ui
