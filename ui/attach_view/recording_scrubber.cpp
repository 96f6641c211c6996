#include "attach_view/recording_scrubber.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QSlider>
#include <QTimer>
#include <QToolButton>
#include <algorithm>
#include <cmath>

namespace kvscope::ui {

RecordingScrubber::RecordingScrubber(QWidget* parent) : QWidget(parent), clock_(std::make_unique<QElapsedTimer>()) {
  setObjectName(QStringLiteral("recordingScrubber"));
  auto* lay = new QHBoxLayout(this);
  lay->setContentsMargins(0, 0, 0, 0);
  play_ = new QToolButton(this);
  play_->setCheckable(true);
  play_->setText(tr("Play"));
  play_->setToolTip(tr("Play the recording from here at the chosen speed"));
  slider_ = new QSlider(Qt::Horizontal, this);
  slider_->setRange(0, kSteps);
  slider_->setToolTip(tr("The recording's time: drag to see the deployment as it was then"));
  speed_ = new QComboBox(this);
  for (double s : {0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 60.0}) speed_->addItem(QStringLiteral("%1x").arg(s), s);
  speed_->setCurrentIndex(2);
  speed_->setToolTip(tr("Recorded seconds per real second while playing"));
  label_ = new QLabel(this);
  label_->setMinimumWidth(label_->fontMetrics().horizontalAdvance(QStringLiteral("00000.0 s / 00000.0 s")));
  bar_ = new QProgressBar(this);
  bar_->setRange(0, 1000);
  bar_->setMaximumWidth(220);
  bar_->hide();
  lay->addWidget(play_);
  lay->addWidget(slider_, 1);
  lay->addWidget(label_);
  lay->addWidget(speed_);
  lay->addWidget(bar_);
  timer_ = new QTimer(this);
  timer_->setInterval(100);
  connect(timer_, &QTimer::timeout, this, &RecordingScrubber::advance);
  connect(play_, &QToolButton::toggled, this, &RecordingScrubber::setPlaying);
  connect(slider_, &QSlider::valueChanged, this, [this](int v) {
    pos_ = span_ * v / kSteps;
    show_position();
    emit seekRequested(pos_);
  });
  setEnabled(false);  // until the recording is read
  show_position();
}

RecordingScrubber::~RecordingScrubber() = default;

void RecordingScrubber::setSpan(double seconds) {
  span_ = std::max(0.0, seconds);
  setEnabled(true);
  show_position();
}

void RecordingScrubber::setProgress(const QString& what, double fraction) {
  bar_->setVisible(fraction < 1);
  bar_->setFormat(what + QStringLiteral(" %p%"));
  bar_->setValue(static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 1000));
}

void RecordingScrubber::seekTo(double seconds) {
  pos_ = std::clamp(seconds, 0.0, span_);
  {
    const QSignalBlocker b(slider_);  // the exact time is asked for, not the slider's step
    slider_->setValue(span_ > 0 ? static_cast<int>(std::lround(pos_ / span_ * kSteps)) : 0);
  }
  show_position();
  emit seekRequested(pos_);
}

void RecordingScrubber::setPlaying(bool on) {
  if (on && pos_ >= span_) seekTo(0);  // play again from the start
  {
    const QSignalBlocker b(play_);
    play_->setChecked(on);
  }
  play_->setText(on ? tr("Pause") : tr("Play"));
  if (on) {
    clock_->start();
    timer_->start();
  } else {
    timer_->stop();
  }
}

bool RecordingScrubber::playing() const { return timer_->isActive(); }

void RecordingScrubber::setSpeed(double factor) {
  int best = 0;
  for (int i = 1; i < speed_->count(); ++i)
    if (std::abs(speed_->itemData(i).toDouble() - factor) < std::abs(speed_->itemData(best).toDouble() - factor))
      best = i;
  speed_->setCurrentIndex(best);
}

void RecordingScrubber::advance() {
  const double real = clock_->restart() / 1000.0;
  seekTo(pos_ + real * speed_->currentData().toDouble());
  if (pos_ >= span_) setPlaying(false);
}

void RecordingScrubber::show_position() {
  label_->setText(QStringLiteral("%1 s / %2 s").arg(pos_, 0, 'f', 1).arg(span_, 0, 'f', 1));
}

}  // namespace kvscope::ui
