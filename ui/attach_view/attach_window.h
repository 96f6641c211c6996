#pragma once
// The window onto an attached deployment (kvscope --attach, File > Attach to a deployment…):
// an honest header of what a KV-event stream cannot say, per-instance stream and metrics lines,
// the fleet overlap, and the block map. Its own top-level window: the engine window's panels
// stay kvscope's own engine. The same window plays a recording back (kvscope
// --attach-recording FILE, File > Open attach recording…): a scrubber over the recording's time
// drives the same panels, as if the attach were live at that time.
#include <QDialog>
#include <QMainWindow>
#include <memory>

#include "attach_view/attach_session.h"

class QLabel;
class QPlainTextEdit;
class QSpinBox;
class QLineEdit;
class QTabWidget;
class QVBoxLayout;

namespace kvscope::ui {

class AttachBlockMap;
class AttachOverlapPanel;
class AttachTimelinePanel;
class PlaybackSession;
class PrefixTreeWidget;
class RecordingScrubber;

struct AttachTargets {
  std::vector<attach::InstanceSpec> specs;
  std::vector<std::string> metrics;  // one per line that gave one (InstanceSpec::source)
};

// One instance per line: "tcp://HOST:5557 [replay tcp://HOST:5558] [metrics http://HOST/metrics]"
// (the words "replay"/"metrics" may be left out: a tcp:// second address is the replay, an
// http:// one the metrics). Throws std::invalid_argument naming the line.
AttachTargets parse_attach_lines(const QStringList& lines, int dp_ranks, const QString& topic);

class AttachWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit AttachWindow(AttachTargets targets, QWidget* parent = nullptr);
  // Plays back a recording of `kvscope-cli attach --record`; a bad file shows why, in the window.
  explicit AttachWindow(const QString& recording, QWidget* parent = nullptr);
  ~AttachWindow() override;
  RecordingScrubber* scrubber() const { return scrubber_; }  // null when live
  QLabel* statsLabel() const { return stats_; }
  double pictureSeconds() const { return picture_s_; }  // a recording: the shown picture's time
  AttachBlockMap* blockMap() const { return map_; }
  AttachTimelinePanel* timelinePanel() const { return timeline_; }
  AttachOverlapPanel* overlapPanel() const { return overlap_; }
  PrefixTreeWidget* mergedTree() const { return tree_; }
  QTabWidget* tabs() const { return tabs_; }
  std::shared_ptr<const AttachPicture> picture() const { return pic_; }

 signals:
  void pictureShown();

 private:
  QVBoxLayout* build_panels();  // what both modes show; returns the layout, the header first
  void show_picture(std::shared_ptr<const AttachPicture> p);
  std::unique_ptr<AttachSession> session_;
  std::unique_ptr<PlaybackSession> playback_;
  RecordingScrubber* scrubber_ = nullptr;
  QLabel* recording_ = nullptr;
  double picture_s_ = 0;
  std::shared_ptr<const AttachPicture> pic_;
  AttachBlockMap* map_ = nullptr;
  AttachTimelinePanel* timeline_ = nullptr;
  AttachOverlapPanel* overlap_ = nullptr;
  PrefixTreeWidget* tree_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QLabel* stats_ = nullptr;
};

// File > Attach to a deployment…: the instances, ranks and topic, remembered in QSettings.
class AttachDialog : public QDialog {
  Q_OBJECT
 public:
  explicit AttachDialog(QWidget* parent = nullptr);
  AttachTargets targets() const;  // throws std::invalid_argument

 private:
  void accept() override;
  QPlainTextEdit* lines_;
  QSpinBox* ranks_;
  QLineEdit* topic_;
};

// Shows the dialog and opens the window (deleted on close); null when cancelled.
AttachWindow* open_attach_dialog(QWidget* parent);
// Asks for a recording and opens a window playing it (deleted on close); null when cancelled.
AttachWindow* open_attach_recording(QWidget* parent);

}  // namespace kvscope::ui
