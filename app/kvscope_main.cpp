// kvscope: the workbench window.
//   kvscope [--model M] [--theme light|dark|system] [--lesson N]
//   kvscope --screenshot-dir DIR [--model M] [--scenario S] [--compare CONFIG_B]
//   kvscope --screenshot-dir DIR --lesson N|all [--model M]      (one PNG per lesson)
//   kvscope --frame-bench [--json-out F] [--model M] [--kv-blocks N] [--block-size B] [--scenario S] [--seconds T]
//   kvscope --attach tcp://HOST:5557 [--attach ...] [--replay tcp://HOST:5558 ...] [--metrics URL ...]
//           [--topic T] [--dp-ranks N] [--screenshot-dir DIR --seconds T]
//   kvscope --attach-recording FILE [--at SECONDS] [--screenshot-dir DIR]   (kvscope-cli attach --record)
//   engine settings for any: --block-size B --kv-blocks N --kv-dtype D --window W --sinks S
//                            --no-prefix-caching --backend auto|cpu|cuda
// The second form runs a scenario in the real window, writes PNGs of every panel and exits.
// The third runs a scenario (repeated for T seconds) in the real window on a large pool
// (16384 blocks of 8 tokens unless told otherwise) and prints how long the UI thread ever
// stalled, as JSON (see ui/frame_bench.h).
#include <QApplication>
#include <QTimer>
#include <QDir>
#include <QCommandLineParser>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QPainter>
#include <QSettings>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextStream>
#include <exception>

#include <qcustomplot.h>

#include "attach_view/attach_overlap_panel.h"
#include "attach_view/attach_timeline_panel.h"
#include "attach_view/attach_window.h"
#include "attach_view/recording_scrubber.h"
#include "devtools/frame_bench.h"
#include "kv/kv_dtype.h"
#include "lessons/lesson.h"
#include "devtools/lesson_screenshot_driver.h"
#include "shell/main_window.h"
#include "model/model_locator.h"
#include "devtools/screenshot_driver.h"
#include "controls/settings_panel.h"
#include "widgets/theme.h"

namespace {

// The app icon, painted so the build needs no image plugin: a 3x3 block map.
QIcon app_icon() {
  QPixmap pm(64, 64);
  pm.fill(Qt::transparent);
  QPainter p(&pm);
  const QColor cols[] = {QColor(0x4e79a7), QColor(0xf28e2b), QColor(0x59a14f), QColor(0x4e79a7), QColor(0xe15759),
                         QColor(0xd2d9e2), QColor(0xf28e2b), QColor(0xeef0f3), QColor(0xeef0f3)};
  for (int i = 0; i < 9; ++i) p.fillRect(4 + (i % 3) * 20, 4 + (i / 3) * 20, 16, 16, cols[i]);
  return QIcon(pm);
}

// --model, then $KVSCOPE_MODEL, then the last model opened, then the locator's default.
QString choose_model(const QString& cli, QString* note) {
  if (cli.isEmpty() && qEnvironmentVariableIsEmpty("KVSCOPE_MODEL")) {
    const QString last = QSettings().value(QStringLiteral("lastModel")).toString();
    if (!last.isEmpty() && QFileInfo(last).isFile()) return last;
  }
  try {
    const kvscope::ModelChoice c = kvscope::resolve_model(cli.toStdString());
    *note = QString::fromStdString(c.note);
    return QString::fromStdString(c.path);
  } catch (const std::exception& e) {
    *note = QString::fromUtf8(e.what());
    return cli;
  }
}

// kvscope --attach: the window onto a running deployment instead of the engine window. With
// --screenshot-dir it grabs DIR/attach.png after --seconds (default 5) and exits.
int run_attach(QApplication& app, const QCommandLineParser& cli, const QCommandLineOption& attach,
               const QCommandLineOption& replay, const QCommandLineOption& metrics, const QCommandLineOption& topic,
               const QCommandLineOption& ranks, const QCommandLineOption& shots, const QCommandLineOption& seconds) {
  const QStringList eps = cli.values(attach), reps = cli.values(replay), mets = cli.values(metrics);
  QStringList lines;
  for (int i = 0; i < eps.size(); ++i)
    lines << (eps[i] + (i < reps.size() ? QStringLiteral(" replay ") + reps[i] : QString()) +
              (i < mets.size() ? QStringLiteral(" metrics ") + mets[i] : QString()));
  kvscope::ui::AttachTargets t;
  try {
    t = kvscope::ui::parse_attach_lines(lines, cli.isSet(ranks) ? cli.value(ranks).toInt() : 1, cli.value(topic));
  } catch (const std::exception& e) {
    QTextStream(stderr) << "kvscope: --attach: " << e.what() << "\n";
    return 2;
  }
  kvscope::ui::AttachWindow w(std::move(t));
  w.show();
  if (cli.isSet(shots)) {
    const double secs = cli.isSet(seconds) ? cli.value(seconds).toDouble() : 5.0;
    QTimer::singleShot(static_cast<int>(secs * 1000), &w, [&] {
      // One picture per tab: the block map (attach.png), memory over time, prefix sharing.
      QDir().mkpath(cli.value(shots));
      bool ok = true;
      const char* names[] = {"attach.png", "attach-timeline.png", "attach-sharing.png"};
      for (int tab = 0; tab < 3; ++tab) {
        w.tabs()->setCurrentIndex(tab);
        w.timelinePanel()->replotNow();  // plots replot on a timer; draw the newest data now
        w.overlapPanel()->plot()->replot();
        const QString path = QDir(cli.value(shots)).filePath(QString::fromLatin1(names[tab]));
        const bool saved = w.grab().save(path);
        QTextStream(stdout) << (saved ? "kvscope: wrote " : "kvscope: cannot write ") << path << "\n";
        ok = ok && saved;
      }
      app.exit(ok ? 0 : 1);
    });
  }
  return app.exec();
}

// kvscope --attach-recording: the attach window playing a recording. --at SECONDS moves the
// scrubber there once the file is read; with --screenshot-dir it grabs DIR/attach-recording.png
// (the block map) and DIR/attach-recording-timeline.png at that time and exits (1 when the
// recording cannot be played, with the window's reason on stderr).
int run_attach_recording(QApplication& app, const QString& path, const QString& at, const QString& shots) {
  bool ok = true;
  const double at_s = at.isEmpty() ? -1 : at.toDouble(&ok);
  if (!ok) {
    QTextStream(stderr) << "kvscope: --at takes seconds after the recording's start\n";
    return 2;
  }
  kvscope::ui::AttachWindow w(path);
  w.show();
  kvscope::ui::RecordingScrubber* sc = w.scrubber();
  bool moved = false;
  QObject::connect(&w, &kvscope::ui::AttachWindow::pictureShown, &w, [&] {
    if (!moved && at_s >= 0) {  // the first picture is the end; then the asked time
      moved = true;
      sc->seekTo(at_s);
      return;
    }
    if (shots.isEmpty()) return;
    QDir().mkpath(shots);
    bool saved = true;
    const char* names[] = {"attach-recording.png", "attach-recording-timeline.png"};
    for (int tab = 0; tab < 2; ++tab) {
      w.tabs()->setCurrentIndex(tab);
      w.timelinePanel()->replotNow();
      const QString file = QDir(shots).filePath(QString::fromLatin1(names[tab]));
      saved = w.grab().save(file) && saved;
      QTextStream(stdout) << "kvscope: wrote " << file << "\n";
    }
    app.exit(saved ? 0 : 1);
  });
  if (!shots.isEmpty()) {  // a recording that cannot be played never shows a picture
    QTimer::singleShot(60000, &w, [&] {
      QTextStream(stderr) << "kvscope: " << w.statsLabel()->text() << "\n";
      app.exit(1);
    });
  }
  return app.exec();
}

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("kvscope"));
  QCoreApplication::setApplicationName(QStringLiteral("kvscope"));
  QCoreApplication::setApplicationVersion(QStringLiteral(KVSCOPE_VERSION));
  QApplication::setWindowIcon(app_icon());

  QCommandLineParser cli;
  cli.setApplicationDescription(QStringLiteral("KV cache workbench: a paged-attention LLM engine, shown live."));
  cli.addHelpOption();
  cli.addVersionOption();
  QCommandLineOption model({QStringLiteral("m"), QStringLiteral("model")}, QStringLiteral("GGUF model to open."),
                           QStringLiteral("M"));
  QCommandLineOption shots(QStringLiteral("screenshot-dir"),
                           QStringLiteral("Run, write panel screenshots to DIR, exit."), QStringLiteral("DIR"));
  QCommandLineOption scenario(QStringLiteral("scenario"),
                              QStringLiteral("Scenario for --screenshot-dir (built-in name or JSON file)."),
                              QStringLiteral("S"));
  QCommandLineOption compare(
      QStringLiteral("compare"),
      QStringLiteral(
          "Configuration B for the compare shots, e.g. block=64,dtype=f16,prefix=flip,window=256,quality=on."),
      QStringLiteral("CONFIG_B"));
  QCommandLineOption theme(QStringLiteral("theme"), QStringLiteral("light, dark or system."), QStringLiteral("T"));
  // Engine settings, as in kvscope-cli; they fill the Settings panel before the model opens.
  QCommandLineOption blockSize(QStringLiteral("block-size"), QStringLiteral("Tokens per KV block (8..128)."),
                               QStringLiteral("B"));
  QCommandLineOption kvBlocks(QStringLiteral("kv-blocks"), QStringLiteral("KV pool size in blocks."),
                              QStringLiteral("N"));
  QCommandLineOption kvDtype(
      QStringLiteral("kv-dtype"),
      QStringLiteral("KV element type: %1.").arg(QString::fromLatin1(kvscope::kv_dtype_choices())),
      QStringLiteral("D"));
  QCommandLineOption window(QStringLiteral("window"), QStringLiteral("Sliding window in tokens (0: off)."),
                            QStringLiteral("W"));
  QCommandLineOption sinks(QStringLiteral("sinks"), QStringLiteral("Attention-sink tokens kept with the window."),
                           QStringLiteral("S"));
  QCommandLineOption evict(
      QStringLiteral("evict"),
      QStringLiteral(
          "Token eviction, as the CLI's: h2o:BUDGET[:RECENT] or snapkv:BUDGET[:WINDOW] (BUDGET tokens or P%), off."),
      QStringLiteral("SPEC"));
  QCommandLineOption threads(QStringLiteral("threads"),
                             QStringLiteral("CPU threads of the backend (default: every core)."), QStringLiteral("N"));
  QCommandLineOption lesson(QStringLiteral("lesson"), QStringLiteral("Open the Lessons panel on lesson N (1-8)."),
                            QStringLiteral("N"));
  QCommandLineOption noPrefix(QStringLiteral("no-prefix-caching"), QStringLiteral("Turn prefix caching off."));
  QCommandLineOption backend(QStringLiteral("backend"), QStringLiteral("auto (CUDA when available), cpu or cuda."),
                             QStringLiteral("B"));
  QCommandLineOption frameBench(
      QStringLiteral("frame-bench"),
      QStringLiteral("Measure the UI thread's longest stall while a scenario runs, print JSON, exit."));
  QCommandLineOption jsonOut(QStringLiteral("json-out"), QStringLiteral("--frame-bench: also write the JSON to F."),
                             QStringLiteral("F"));
  QCommandLineOption seconds(QStringLiteral("seconds"),
                             QStringLiteral("--frame-bench: measure for T seconds (default 10)."), QStringLiteral("T"));
  QCommandLineOption attach(QStringLiteral("attach"),
                            QStringLiteral("Attach to a running engine's KV-event PUB socket (repeatable)."),
                            QStringLiteral("tcp://HOST:5557"));
  QCommandLineOption replay(QStringLiteral("replay"), QStringLiteral("--attach: the i-th instance's replay socket."),
                            QStringLiteral("tcp://HOST:5558"));
  QCommandLineOption metricsUrl(QStringLiteral("metrics"), QStringLiteral("--attach: the i-th instance's /metrics."),
                                QStringLiteral("URL"));
  QCommandLineOption topic(QStringLiteral("topic"), QStringLiteral("--attach: the KV-event topic (prefix filter)."),
                           QStringLiteral("T"));
  QCommandLineOption dpRanks(QStringLiteral("dp-ranks"),
                             QStringLiteral("--attach: data-parallel ranks per endpoint (base port + r)."),
                             QStringLiteral("N"));
  QCommandLineOption recording(QStringLiteral("attach-recording"),
                               QStringLiteral("Play back a recording of kvscope-cli attach --record."),
                               QStringLiteral("FILE"));
  QCommandLineOption at(QStringLiteral("at"),
                        QStringLiteral("--attach-recording: show the time SECONDS after its start."),
                        QStringLiteral("SECONDS"));
  cli.addOptions({model,  lesson, shots,      scenario, compare,  theme,     blockSize,  kvBlocks, kvDtype,
                  window, sinks,  evict,      threads,  noPrefix, backend,   frameBench, jsonOut,  seconds,
                  attach, replay, metricsUrl, topic,    dpRanks,  recording, at});
  cli.process(app);
  if (cli.isSet(recording)) return run_attach_recording(app, cli.value(recording), cli.value(at), cli.value(shots));
  if (cli.isSet(attach)) return run_attach(app, cli, attach, replay, metricsUrl, topic, dpRanks, shots, seconds);

  const bool benchMode = cli.isSet(frameBench);
  kvscope::ui::FrameBenchOptions benchOpts;
  if (benchMode) {
    bool ok = true;
    if (cli.isSet(seconds)) benchOpts.seconds = cli.value(seconds).toDouble(&ok);
    if (!ok || benchOpts.seconds <= 0 || benchOpts.seconds > 3600) {
      QTextStream(stderr) << "kvscope: --seconds takes a number of seconds in (0, 3600]\n";
      return 2;
    }
    if (cli.isSet(scenario)) benchOpts.scenario = cli.value(scenario);
  }
  const bool isolatedSettings = cli.isSet(shots) || benchMode;
  QTemporaryDir settingsDir;
  if (isolatedSettings) {
    // Screenshots and benchmarks must not depend on (or change) the user's saved layout and settings.
    QSettings::setDefaultFormat(QSettings::IniFormat);
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, settingsDir.path());
  }
  const QString themeName = cli.isSet(theme)
                                ? cli.value(theme)
                                : QSettings().value(QStringLiteral("window/theme"), QStringLiteral("light")).toString();
  kvscope::ui::apply_theme(themeName);

  kvscope::ui::MainWindow w;
  if (benchMode) {
    // The pool the issue asks about: 16K blocks (small ones, so stories260K's pool stays small).
    w.settingsPanel()->setOverride(QStringLiteral("block-size"), QStringLiteral("8"));
    w.settingsPanel()->setOverride(QStringLiteral("kv-blocks"), QStringLiteral("16384"));
  }
  for (const QCommandLineOption* o : {&blockSize, &kvBlocks, &kvDtype, &window, &sinks, &evict, &threads})
    if (cli.isSet(*o)) w.settingsPanel()->setOverride(o->names().first(), cli.value(*o));
  if (cli.isSet(noPrefix)) w.settingsPanel()->setOverride(QStringLiteral("prefix-caching"), QStringLiteral("off"));
  if (cli.isSet(backend)) {
    const auto choice = kvscope::ui::parse_backend_choice(cli.value(backend));
    if (!choice) {
      QTextStream(stderr) << "kvscope: --backend takes auto, cpu or cuda\n";
      return 2;
    }
    if (!w.settingsPanel()->setBackendChoice(*choice))
      QTextStream(stderr) << "kvscope: " << w.settingsPanel()->backendNote() << '\n';
  }
  w.show();
  QString note;
  const QString path = choose_model(cli.value(model), &note);
  if (!note.isEmpty()) QTextStream(stderr) << "kvscope: " << note << '\n';
  w.openModel(path);
  QList<int> lessonNumbers;  // --lesson N, or "all" with --screenshot-dir
  if (cli.isSet(lesson)) {
    bool ok = false;
    const int n = cli.value(lesson).toInt(&ok);
    if (cli.value(lesson) == QLatin1String("all") && cli.isSet(shots)) {
      for (const kvscope::ui::Lesson& l : kvscope::ui::builtin_lessons()) lessonNumbers << l.number;
    } else if (!ok || !kvscope::ui::find_lesson(n)) {
      QTextStream(stderr) << "kvscope: --lesson takes a lesson number from 1 to "
                          << kvscope::ui::builtin_lessons().size() << " (or all, with --screenshot-dir)\n";
      return 2;
    } else {
      lessonNumbers << n;
      if (!cli.isSet(shots)) w.showLesson(n);  // applied once the model has loaded
    }
  }

  std::unique_ptr<kvscope::ui::FrameBench> bench;
  if (benchMode) {
    w.resize(1280, 800);
    bench = std::make_unique<kvscope::ui::FrameBench>(&w, benchOpts);
    const QString out = cli.value(jsonOut);
    QObject::connect(bench.get(), &kvscope::ui::FrameBench::finished, &app, [&w, out](const QJsonObject& r) {
      const QByteArray json = QJsonDocument(r).toJson(QJsonDocument::Indented);
      QTextStream(stdout) << json;
      int code = r.contains(QStringLiteral("error")) ? 1 : 0;
      if (!out.isEmpty()) {
        QFile f(out);
        if (!f.open(QIODevice::WriteOnly) || f.write(json) != json.size()) {
          QTextStream(stderr) << "kvscope: cannot write " << out << '\n';
          code = 1;
        }
      }
      w.close();
      QCoreApplication::exit(code);
    });
    bench->start();
  }

  std::unique_ptr<kvscope::ui::LessonScreenshotDriver> lessonShots;
  std::unique_ptr<kvscope::ui::ScreenshotDriver> driver;
  if (cli.isSet(shots) && !lessonNumbers.isEmpty()) {
    w.resize(1280, 800);
    lessonShots = std::make_unique<kvscope::ui::LessonScreenshotDriver>(&w, cli.value(shots), lessonNumbers);
    QObject::connect(lessonShots.get(), &kvscope::ui::LessonScreenshotDriver::finished, &app, [&w](int code) {
      w.close();
      QCoreApplication::exit(code);
    });
    lessonShots->start();
  } else if (cli.isSet(shots)) {
    w.resize(1280, 800);
    driver =
        std::make_unique<kvscope::ui::ScreenshotDriver>(&w, cli.value(shots), cli.value(scenario), cli.value(compare));
    QObject::connect(driver.get(), &kvscope::ui::ScreenshotDriver::finished, &app, [&w](int code) {
      w.close();
      QCoreApplication::exit(code);
    });
    driver->start();
  }
  return app.exec();
}
