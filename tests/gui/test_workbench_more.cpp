// More of the workbench window driven for real (offscreen, stories260K): the UI-thread frame
// benchmark on a 16K-block pool, the chat's streaming rate against the engine's own, the compare
// panel's quality run (perplexity, KL, top-1 against the core's eval), and the backend choice.
#include <QCheckBox>
#include <QComboBox>
#include <QJsonObject>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>

#include "frame_bench.h"
#include "main_window.h"
#include "settings_panel.h"
#include "test_support.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 60000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

QtMessageHandler g_previous = nullptr;
void quiet_offscreen(QtMsgType type, const QMessageLogContext& ctx, const QString& msg) {
  if (msg.startsWith(QStringLiteral("This plugin does not support"))) return;
  g_previous(type, ctx, msg);
}

}  // namespace

class TestWorkbenchMore : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    g_previous = qInstallMessageHandler(quiet_offscreen);
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    QSettings::setDefaultFormat(QSettings::IniFormat);
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, QString::fromStdString((test::tmp_dir() / "gui-settings-more").string()));
    QCoreApplication::setOrganizationName(QStringLiteral("kvscope-test"));
    QCoreApplication::setApplicationName(QStringLiteral("workbench-more"));
    QSettings().clear();
  }
  void init() { QSettings().clear(); }

  // The frame benchmark measures for real: a 16K-block pool, steps run, the watchdog ticked, the
  // block map painted. No timing is asserted (the machine may be loaded); the shape is.
  void frameBenchMeasures() {
    MainWindow w;
    w.settingsPanel()->setOverride(QStringLiteral("block-size"), QStringLiteral("8"));
    w.settingsPanel()->setOverride(QStringLiteral("kv-blocks"), QStringLiteral("16384"));
    w.resize(1280, 800);
    w.show();
    w.openModel(model_path());
    FrameBenchOptions o;
    o.seconds = 2;
    FrameBench bench(&w, o);
    QSignalSpy done(&bench, &FrameBench::finished);
    bench.start();
    QVERIFY(done.wait(kTimeoutMs + 10000));
    const QJsonObject r = bench.result();
    QVERIFY2(!r.contains(QStringLiteral("error")), qPrintable(r.value(QStringLiteral("error")).toString()));
    QCOMPARE(r[QStringLiteral("blocks")].toInt(), 16384);
    QCOMPARE(r[QStringLiteral("block_size")].toInt(), 8);
    QVERIFY(r[QStringLiteral("seconds")].toDouble() >= 2.0);
    QVERIFY(r[QStringLiteral("steps")].toInteger() > 0);
    QVERIFY(r[QStringLiteral("snapshots_delivered")].toInteger() > 0);
    QVERIFY(r[QStringLiteral("peak_blocks_used")].toInt() > 0);
    QVERIFY(r[QStringLiteral("frames")].toInteger() > 0);
    const double mx = r[QStringLiteral("max_frame_ms")].toDouble(), p99 = r[QStringLiteral("p99_frame_ms")].toDouble(),
                 p50 = r[QStringLiteral("p50_frame_ms")].toDouble();
    QVERIFY(p50 > 0 && p50 <= p99 && p99 <= mx);
    const QJsonObject paint = r[QStringLiteral("block_map_paint")].toObject();
    QVERIFY(paint[QStringLiteral("count")].toInteger() > 0);
    QVERIFY(paint[QStringLiteral("max_ms")].toDouble() > 0);
    QVERIFY(r[QStringLiteral("snapshot_handoff")].toObject()[QStringLiteral("count")].toInteger() > 0);
    QVERIFY(r.contains(QStringLiteral("within_target")));
  }

  void frameBenchReportsABadScenario() {
    MainWindow w;
    w.show();
    FrameBenchOptions o;
    o.scenario = QStringLiteral("/no/such/scenario.json");
    FrameBench bench(&w, o);
    QSignalSpy done(&bench, &FrameBench::finished);
    bench.start();
    QVERIFY(done.wait(5000));
    QVERIFY(bench.result().contains(QStringLiteral("error")));
    QCOMPARE(bench.result()[QStringLiteral("frames")].toInt(), 0);
  }
};

QTEST_MAIN(TestWorkbenchMore)
#include "test_workbench_more.moc"
