#include "attach_view/attach_window.h"

#include <QDateTime>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>

#include "attach_view/attach_block_map.h"
#include "attach_view/attach_overlap_panel.h"
#include "attach_view/attach_timeline_panel.h"
#include "attach_view/playback_session.h"
#include "attach_view/recording_scrubber.h"
#include "widgets/prefix_tree_widget.h"

namespace kvscope::ui {
namespace {

const char* kHonestHeader =
    "Attached over KV-event streams: this is each engine's prefix cache as its events describe it, "
    "one cell per hashed (full) block, coloured by prefix. The stream does not carry physical block ids, "
    "per-request block tables, blocks in use but not yet full, or free space, so this is not kvscope's "
    "own engine view. Memory use comes from /metrics when given.";

QString instance_line(const AttachInstancePicture& i) {
  return QStringLiteral(
             "<b>%1</b> rank %2: %3 blocks · %4 batches · %5 gaps · %6 replayed · %7 lost%8 · %9 ignored · %10 bad · %11 restarts<br>&nbsp;&nbsp;%12")
      .arg(i.endpoint.toHtmlEscaped())
      .arg(i.dp_rank)
      .arg(i.cells.size())
      .arg(i.batches)
      .arg(i.gaps)
      .arg(i.replayed)
      .arg(i.lost)
      .arg(i.stale ? QStringLiteral(" <b>(stale)</b>") : QString())
      .arg(i.ignored)
      .arg(i.bad)
      .arg(i.restarts)
      .arg(i.metrics.toHtmlEscaped());
}

}  // namespace

AttachTargets parse_attach_lines(const QStringList& lines, int dp_ranks, const QString& topic) {
  AttachTargets t;
  int source = 0;
  for (const QString& raw : lines) {
    QStringList w = raw.split(QLatin1Char(' '), Qt::SkipEmptyParts);
    w.removeAll(QStringLiteral("replay"));
    w.removeAll(QStringLiteral("metrics"));
    if (w.isEmpty()) continue;
    attach::InstanceSpec base{w[0].toStdString(), "", topic.toStdString(), 0, source};
    bool metrics = false;
    for (int k = 1; k < w.size(); ++k) {
      if (w[k].startsWith(QStringLiteral("http://")))
        t.metrics.push_back(w[k].toStdString()), metrics = true;
      else if (base.replay.empty())
        base.replay = w[k].toStdString();
      else
        throw std::invalid_argument("'" + raw.toStdString() + "': too many addresses");
    }
    if (!metrics) t.metrics.emplace_back();  // keeps metrics[source] aligned
    for (auto& s : attach::expand_dp_ranks(base, dp_ranks)) t.specs.push_back(std::move(s));
    ++source;
  }
  if (t.specs.empty()) throw std::invalid_argument("no endpoint given");
  return t;
}

QVBoxLayout* AttachWindow::build_panels() {
  auto* central = new QWidget(this);
  auto* lay = new QVBoxLayout(central);
  auto* header = new QLabel(tr(kHonestHeader), central);
  header->setWordWrap(true);
  header->setObjectName(QStringLiteral("attachHonestHeader"));
  stats_ = new QLabel(tr("Connecting…"), central);
  stats_->setTextFormat(Qt::RichText);
  stats_->setWordWrap(true);
  map_ = new AttachBlockMap(central);
  auto* scroll = new QScrollArea(central);
  scroll->setWidget(map_);
  scroll->setWidgetResizable(true);
  lay->addWidget(header);
  lay->addWidget(stats_);
  tabs_ = new QTabWidget(central);
  tabs_->setObjectName(QStringLiteral("attachTabs"));
  tabs_->addTab(scroll, tr("Block map"));
  tabs_->addTab(timeline_ = new AttachTimelinePanel(tabs_), tr("Memory over time"));
  tabs_->addTab(overlap_ = new AttachOverlapPanel(tabs_), tr("Prefix sharing"));
  tabs_->addTab(tree_ = new PrefixTreeWidget(tabs_), tr("Merged prefix tree"));
  lay->addWidget(tabs_, 1);
  setCentralWidget(central);
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open attach recording…"), this, [this] { open_attach_recording(this); });
  file->addAction(tr("&Close"), QKeySequence::Close, this, &QWidget::close);
  resize(1000, 700);
  return lay;
}

AttachWindow::AttachWindow(AttachTargets targets, QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("kvscope — attached to %n instance(s)", nullptr, static_cast<int>(targets.specs.size())));
  build_panels();
  session_ = std::make_unique<AttachSession>(std::move(targets.specs), targets.metrics);
  connect(session_.get(), &AttachSession::updated, this, &AttachWindow::show_picture, Qt::QueuedConnection);
  connect(
      session_.get(), &AttachSession::failed, this,
      [this](const QString& why) { stats_->setText(tr("Attach failed: %1").arg(why.toHtmlEscaped())); },
      Qt::QueuedConnection);
  session_->start();
}

AttachWindow::AttachWindow(const QString& recording, QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("kvscope — recording %1").arg(QFileInfo(recording).fileName()));
  QVBoxLayout* lay = build_panels();
  stats_->setText(tr("Reading the recording…"));
  recording_ = new QLabel(centralWidget());
  recording_->setObjectName(QStringLiteral("attachRecordingInfo"));
  recording_->setWordWrap(true);
  recording_->setText(tr("Recording %1").arg(recording.toHtmlEscaped()));
  scrubber_ = new RecordingScrubber(centralWidget());
  lay->insertWidget(1, recording_);
  lay->insertWidget(2, scrubber_);
  playback_ = std::make_unique<PlaybackSession>(recording);
  connect(playback_.get(), &PlaybackSession::progress, scrubber_, &RecordingScrubber::setProgress,
          Qt::QueuedConnection);
  connect(
      playback_.get(), &PlaybackSession::loaded, this,
      [this](const RecordingInfo& r) {
        recording_->setText(
            tr("Recording <b>%1</b> (kvscope-cli attach --record): %2 instance(s), %3 lines, %4 s from %5%6. "
               "Played back through the same decoding as a live attach; /metrics are not recorded.")
                .arg(QFileInfo(r.path).fileName().toHtmlEscaped())
                .arg(r.instances)
                .arg(r.lines)
                .arg(r.end - r.started, 0, 'f', 1)
                .arg(QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(r.started * 1000)).toString(Qt::ISODate))
                .arg(r.cut_off ? tr("; its last line was cut off (a killed attach?) and is skipped") : QString()));
        scrubber_->setSpan(r.end - r.started);
        scrubber_->seekTo(r.end - r.started);  // first the whole recording, as live ended
      },
      Qt::QueuedConnection);
  connect(
      playback_.get(), &PlaybackSession::updated, this,
      [this](std::shared_ptr<const AttachPicture> p, double seconds) {
        picture_s_ = seconds;
        scrubber_->setProgress(QString(), 1);
        show_picture(std::move(p));
      },
      Qt::QueuedConnection);
  connect(
      playback_.get(), &PlaybackSession::failed, this,
      [this](const QString& why) {
        stats_->setText(tr("<b>Cannot play this recording</b>: %1").arg(why.toHtmlEscaped()));
        scrubber_->setProgress(QString(), 1);
        scrubber_->setEnabled(false);
      },
      Qt::QueuedConnection);
  connect(scrubber_, &RecordingScrubber::seekRequested, this, [this](double s) { playback_->seek(s); });
  playback_->start();
}

AttachWindow::~AttachWindow() = default;

void AttachWindow::show_picture(std::shared_ptr<const AttachPicture> p) {
  pic_ = p;
  QString s;
  for (const auto& i : p->instances) s += instance_line(i) + QStringLiteral("<br>");
  s +=
      tr("<b>Fleet</b>: %1 cached copies · %2 prefixes on 2+ instances · %3 duplicated blocks (%4 tokens) · an ideal KV-aware router saves %5%")
          .arg(p->copies)
          .arg(p->shared_nodes)
          .arg(p->duplicated_blocks)
          .arg(p->duplicated_tokens)
          .arg(100 * p->ideal_router_saving, 0, 'f', 1);
  stats_->setText(s);
  timeline_->setPicture(p);
  overlap_->setPicture(p);
  QStringList names;
  for (const auto& i : p->instances) names << QStringLiteral("%1 rank %2").arg(i.endpoint).arg(i.dp_rank);
  tree_->setInstanceNames(names);
  tree_->setTree(p->merged_tree);
  map_->setPicture(std::move(p));
  emit pictureShown();
}

AttachDialog::AttachDialog(QWidget* parent) : QDialog(parent) {
  setWindowTitle(tr("Attach to a deployment"));
  QSettings st;
  lines_ = new QPlainTextEdit(
      st.value(QStringLiteral("attach/instances"), QStringLiteral("tcp://127.0.0.1:5557 replay tcp://127.0.0.1:5558"))
          .toString(),
      this);
  lines_->setPlaceholderText(
      tr("one instance per line: tcp://HOST:5557 [replay tcp://HOST:5558] [metrics http://HOST:8000/metrics]"));
  ranks_ = new QSpinBox(this);
  ranks_->setRange(1, 1024);
  ranks_->setValue(st.value(QStringLiteral("attach/dpRanks"), 1).toInt());
  topic_ = new QLineEdit(st.value(QStringLiteral("attach/topic")).toString(), this);
  auto* form = new QFormLayout(this);
  form->addRow(tr("Instances"), lines_);
  form->addRow(tr("Data-parallel ranks (base port + r)"), ranks_);
  form->addRow(tr("Topic"), topic_);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  connect(buttons, &QDialogButtonBox::accepted, this, &AttachDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  form->addRow(buttons);
}

AttachTargets AttachDialog::targets() const {
  return parse_attach_lines(lines_->toPlainText().split(QLatin1Char('\n')), ranks_->value(), topic_->text());
}

void AttachDialog::accept() {
  try {
    (void)targets();
  } catch (const std::exception& e) {
    QMessageBox::warning(this, windowTitle(), QString::fromUtf8(e.what()));
    return;
  }
  QSettings st;
  st.setValue(QStringLiteral("attach/instances"), lines_->toPlainText());
  st.setValue(QStringLiteral("attach/dpRanks"), ranks_->value());
  st.setValue(QStringLiteral("attach/topic"), topic_->text());
  QDialog::accept();
}

AttachWindow* open_attach_recording(QWidget* parent) {
  QSettings st;
  const QString path = QFileDialog::getOpenFileName(parent, QObject::tr("Open an attach recording"),
                                                    st.value(QStringLiteral("attach/recordingDir")).toString(),
                                                    QObject::tr("Attach recordings (*.jsonl *.json);;All files (*)"));
  if (path.isEmpty()) return nullptr;
  st.setValue(QStringLiteral("attach/recordingDir"), QFileInfo(path).absolutePath());
  auto* w = new AttachWindow(path);
  w->setAttribute(Qt::WA_DeleteOnClose);
  w->show();
  return w;
}

AttachWindow* open_attach_dialog(QWidget* parent) {
  AttachDialog d(parent);
  if (d.exec() != QDialog::Accepted) return nullptr;
  auto* w = new AttachWindow(d.targets());
  w->setAttribute(Qt::WA_DeleteOnClose);
  w->show();
  return w;
}

}  // namespace kvscope::ui
