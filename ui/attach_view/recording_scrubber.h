#pragma once
// The timeline of a recording in the attach window: a slider over its span, play/pause, a
// speed, the position as "12.3 s / 45.6 s", and a progress bar while the file is read or a
// long stretch is reconstructed. It only says where to be (seekRequested); the
// PlaybackSession rebuilds the attach there and the window shows it, as live.
#include <QWidget>
#include <memory>

class QComboBox;
class QElapsedTimer;
class QLabel;
class QProgressBar;
class QSlider;
class QTimer;
class QToolButton;

namespace kvscope::ui {

class RecordingScrubber : public QWidget {
  Q_OBJECT
 public:
  explicit RecordingScrubber(QWidget* parent = nullptr);
  ~RecordingScrubber() override;
  void setSpan(double seconds);                            // the recording's length; enables the controls
  void setProgress(const QString& what, double fraction);  // fraction >= 1 hides the bar
  void seekTo(double seconds);                             // moves the slider there and asks for it
  void setPlaying(bool on);
  bool playing() const;
  void setSpeed(double factor);  // one of the menu's (0.25x .. 60x); the nearest
  double position() const { return pos_; }
  double span() const { return span_; }
  QSlider* slider() const { return slider_; }
  QToolButton* playButton() const { return play_; }

 signals:
  void seekRequested(double seconds);

 private:
  void advance();  // one play tick: the recorded time moves by speed x the real time elapsed
  void show_position();
  static constexpr int kSteps = 10000;  // slider resolution over the span
  QSlider* slider_;
  QToolButton* play_;
  QComboBox* speed_;
  QLabel* label_;
  QProgressBar* bar_;
  QTimer* timer_;
  std::unique_ptr<QElapsedTimer> clock_;
  double span_ = 0, pos_ = 0;
};

}  // namespace kvscope::ui
