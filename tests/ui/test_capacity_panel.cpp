// The Capacity panel as a user drives it: a trace file, the form, Run, and what the plot, the
// table and the one-more-GiB line show, checked against run/replay_fleet.h called directly on
// the same trace; bad input in every field gives a message, never a crash; Cancel stops a long
// study. With the Mooncake conversation trace present, a full study of it (and a screenshot).
#include <qcustomplot.h>

#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>
#include <fstream>

#include "panels/capacity_panel.h"
#include "run/replay_fleet.h"
#include "test_support.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

// 40 Mooncake requests: 5 system prompts of 2 blocks, each with its own 2-block question.
std::string write_trace(const std::string& name, int n) {
  const std::string path = (test::tmp_dir() / name).string();
  std::ofstream f(path);
  for (int i = 0; i < n; ++i)
    f << "{\"timestamp\": " << i << ", \"input_length\": 2000, \"output_length\": 10, \"hash_ids\": [" << i % 5 << ", "
      << 100 + i % 5 << ", " << 1000 + i << ", " << 100000 + i << "]}\n";
  return path;
}

QPushButton* button(QWidget* w, const QString& text) {
  for (QPushButton* b : w->findChildren<QPushButton*>())
    if (b->text() == text) return b;
  return nullptr;
}

bool run_and_wait(CapacityPanel& p, bool* ok = nullptr) {
  QSignalSpy done(&p, &CapacityPanel::studyFinished);
  QTest::mouseClick(button(&p, QStringLiteral("Run")), Qt::LeftButton);
  if (!p.running()) return false;
  if (!done.wait(120000)) return false;
  if (ok) *ok = done.first().first().toBool();
  return true;
}

}  // namespace

class TestCapacityPanel : public QObject {
  Q_OBJECT
 private slots:
  void bad_input_is_explained() {
    CapacityPanel p;
    p.geometryBox()->setCurrentText(QStringLiteral("Llama-3-70B"));
    QVERIFY(!p.start());
    QVERIFY2(p.statusText().contains(QStringLiteral("not a readable file")), qPrintable(p.statusText()));
    p.traceEdit()->setText(QStringLiteral("/nonexistent/trace.jsonl"));
    QVERIFY(!p.start());
    p.traceEdit()->setText(QString::fromStdString(write_trace("cap-small.jsonl", 40)));
    p.poolEdit()->setText(QStringLiteral("lots"));
    QVERIFY(!p.start());
    QVERIFY2(p.statusText().contains(QStringLiteral("Pool per instance")), qPrintable(p.statusText()));
    p.poolEdit()->setText(QStringLiteral("4096"));
    p.cpuEdit()->setText(QStringLiteral("-3"));
    QVERIFY(!p.start());
    p.cpuEdit()->setText(QStringLiteral("0"));
    p.geometryBox()->setCurrentIndex(0);  // the loaded model, and none is loaded
    QVERIFY(!p.start());
    QVERIFY2(p.statusText().contains(QStringLiteral("No model is loaded")), qPrintable(p.statusText()));
    // A block size that does not divide the trace's 512: the study fails with the reason.
    p.geometryBox()->setCurrentText(QStringLiteral("Llama-3-70B"));
    p.blockSizeBox()->setValue(48);
    bool ok = true;
    QVERIFY(run_and_wait(p, &ok));
    QVERIFY(!ok);
    QVERIFY2(p.statusText().contains(QStringLiteral("does not divide")), qPrintable(p.statusText()));
    // A file that is not a trace: the line number, and the panel still runs afterwards.
    const std::string junk = (test::tmp_dir() / "cap-junk.jsonl").string();
    std::ofstream(junk)
        << "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\nnot json\n";
    p.traceEdit()->setText(QString::fromStdString(junk));
    p.blockSizeBox()->setValue(512);
    QVERIFY(run_and_wait(p, &ok));
    QVERIFY(!ok);
    QVERIFY2(p.statusText().contains(QStringLiteral("line 2")), qPrintable(p.statusText()));
  }

  void study_shows_what_replay_computes() {
    CapacityPanel p;
    const std::string trace = write_trace("cap-40.jsonl", 40);
    p.traceEdit()->setText(QString::fromStdString(trace));
    p.geometryBox()->setCurrentText(QStringLiteral("Llama-3-70B"));  // 327,680 B/token in f16
    p.poolEdit()->setText(QStringLiteral("4096"));                   // 8 blocks of 512
    p.instancesBox()->setValue(2);
    p.cpuEdit()->setText(QStringLiteral("8192"));
    // The loaded engine's pool: 64 blocks of 16 tokens.
    auto snap = std::make_shared<Snapshot>();
    snap->block_size = 16;
    snap->memory.blocks_total = 64;
    snap->memory.kv_bytes_per_token = 1000;
    p.showSnapshot(snap, nullptr);
    bool ok = false;
    QVERIFY(run_and_wait(p, &ok));
    QVERIFY2(ok, qPrintable(p.statusText()));

    std::ifstream in(trace);
    const std::vector<TraceRequest> reqs = read_trace(in, TraceReaderOptions{});
    ReplayOptions o;
    FleetOptions f{2, RouterKind::PrefixAware, 4096, 0};
    const InstanceStats pa = replay_fleet(reqs, f, o).total;
    const CapacityStudy& s = p.study();
    QCOMPARE(p.table()->rowCount(), 6);  // 3 routers, pooled, tier, flat tier
    QCOMPARE(p.table()->item(2, 0)->text(), QStringLiteral("2 x prefix-aware"));
    QCOMPARE(p.table()->item(2, 1)->text(), QStringLiteral("%1 %").arg(100.0 * pa.hit_ratio(), 0, 'f', 2));
    QCOMPARE(s.rows[2].stats.gpu_hit_tokens, pa.gpu_hit_tokens);
    QVERIFY(s.rows[4].stats.cpu_hit_tokens > 0);  // the CPU tier serves some
    QCOMPARE(p.plot()->graph(0)->dataCount(), static_cast<int>(s.curve.size()));
    QCOMPARE(s.curve.back().capacity_tokens, int64_t{0});  // unbounded last
    for (const ReplayPoint& c : s.curve) QVERIFY(c.hit_ratio() <= s.curve.back().hit_ratio() + 1e-12);
    QCOMPARE(s.tokens_per_gib, int64_t{(1 << 30) / 327680});
    QCOMPARE(s.hit_at_pool, replay_trace(reqs, 4096, o).hit_ratio());
    QVERIFY2(p.marginalText().contains(QStringLiteral("3,276 tokens of Llama-3-70B")), qPrintable(p.marginalText()));
    QCOMPARE(p.plot()->itemCount(), 4);  // two marker lines with their labels
    QVERIFY(std::fabs(p.currentPoolGib() - 1024.0 * 327680 / (1 << 30)) < 1e-9);
  }

  void cancel_stops_a_long_study() {
    CapacityPanel p;
    p.traceEdit()->setText(QString::fromStdString(write_trace("cap-big.jsonl", 5000)));
    p.geometryBox()->setCurrentText(QStringLiteral("Llama-3-70B"));
    p.blockSizeBox()->setValue(16);
    QSignalSpy done(&p, &CapacityPanel::studyFinished);
    QVERIFY(p.start());
    QVERIFY(!p.start());  // one at a time
    QTest::mouseClick(button(&p, QStringLiteral("Cancel")), Qt::LeftButton);
    QVERIFY(done.wait(120000));
    QCOMPARE(done.first().first().toBool(), false);
    QVERIFY(!p.running());
  }

  void real_trace_study_and_screenshot() {
    const auto trace = test::shared_dir() / "traces" / "conversation_trace.jsonl";
    if (!std::filesystem::exists(trace)) QSKIP("the Mooncake conversation trace is not in KVSCOPE_SHARED_DIR/traces");
    CapacityPanel p;
    p.resize(900, 900);
    p.traceEdit()->setText(QString::fromStdString(trace.string()));
    p.geometryBox()->setCurrentText(QStringLiteral("Kimi-K2"));
    p.poolEdit()->setText(QStringLiteral("1M"));
    p.cpuEdit()->setText(QStringLiteral("4M"));
    bool ok = false;
    QVERIFY(run_and_wait(p, &ok));
    QVERIFY2(ok, qPrintable(p.statusText()));
    // docs/replay.md's measured numbers: 4 x 1M prefix-aware 0.1493, pooled 4M 0.1850.
    QCOMPARE(p.table()->item(2, 1)->text(), QStringLiteral("14.93 %"));
    QCOMPARE(p.table()->item(3, 1)->text(), QStringLiteral("18.50 %"));
    p.show();
    QTest::qWait(200);
    const QString png = QString::fromStdString((test::tmp_dir() / "capacity-panel.png").string());
    QVERIFY(p.grab().save(png));
    qInfo("screenshot: %s", qPrintable(png));
  }
};

QTEST_MAIN(TestCapacityPanel)
#include "test_capacity_panel.moc"
