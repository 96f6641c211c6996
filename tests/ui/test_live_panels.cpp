// The live panels stay cheap as a run grows: the plots keep a bounded number of points without
// losing peaks, and the block map's sequence list changes only the rows that came or went.
#include <qcustomplot.h>

#include <QListWidget>
#include <QtTest>
#include <cmath>
#include <fstream>

#include "panels/block_map_panel.h"
#include "widgets/block_map_widget.h"
#include "panels/memory_panel.h"
#include "test_support.h"
#include "widgets/theme.h"
#include "widgets/thinned_series.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

SnapshotPtr snapshot_with(const std::vector<SeqId>& ids) {
  auto s = std::make_shared<Snapshot>();
  s->blocks.resize(64);
  s->memory.blocks_total = 64;
  s->memory.blocks_free = 64;
  for (SeqId id : ids) {
    SeqSnap q;
    q.id = id;
    q.label = "req " + std::to_string(id);
    q.state = SeqState::Running;
    s->seqs.push_back(q);
  }
  return s;
}

std::vector<SeqId> list_ids(const QListWidget* l) {
  std::vector<SeqId> out;
  for (int r = 0; r < l->count(); ++r) out.push_back(l->item(r)->data(Qt::UserRole).toLongLong());
  return out;
}

}  // namespace

class TestLivePanels : public QObject {
  Q_OBJECT
 private slots:
  void thinned_series_is_bounded_and_keeps_peaks() {
    QCustomPlot plot;
    QCPGraph* a = plot.addGraph();
    QCPGraph* b = plot.addGraph();
    ThinnedSeries series({a, b}, 0.01, 500);
    for (int i = 0; i < 20000; ++i) {
      const double t = i * 0.002;
      series.add(t, {i == 12345 ? 1000.0 : std::sin(t), static_cast<double>(i)});
    }
    QVERIFY(a->dataCount() <= 500);
    QVERIFY(a->dataCount() >= 250);  // coarsened by halving, so never below half the cap
    QCOMPARE(a->dataCount(), b->dataCount());
    QCOMPARE(series.points(), a->dataCount());
    double peak = 0, last_key = -1;
    for (auto it = a->data()->constBegin(); it != a->data()->constEnd(); ++it) {
      peak = std::max(peak, it->value);
      QVERIFY(it->key > last_key);
      last_key = it->key;
    }
    QCOMPARE(peak, 1000.0);                                 // a one-sample spike survives
    QCOMPARE((b->data()->constEnd() - 1)->value, 19999.0);  // the newest value is drawn
    series.clear();
    QCOMPARE(a->dataCount(), 0);
    series.add(1.0, {2.0, 3.0});
    QCOMPARE(a->dataCount(), 1);
    QCOMPARE(series.bucket(), 0.01);
  }

  // A hybrid KV cache's sliding pool gets its own dashed line, legend entry, caption and CSV
  // columns; a one-group engine after it hides them again.
  void memory_panel_shows_the_sliding_pool() {
    MemoryPanel panel;
    panel.resize(900, 400);
    panel.show();
    auto hybrid = [](uint64_t step, int global_used, int sliding_used) {
      auto s = std::make_shared<Snapshot>();
      s->step = step;
      s->elapsed_s = 0.05 * static_cast<double>(step);  // one plot bucket (0.02 s) each
      s->memory.blocks_total = 100;
      s->memory.blocks_used = global_used;
      s->memory.blocks_free = 100 - global_used;
      s->kv_groups.resize(2);
      s->kv_groups[1].name = "sliding layers (window 512)";
      s->kv_groups[1].blocks_total = 40;
      s->kv_groups[1].blocks_used = sliding_used;
      return SnapshotPtr(s);
    };
    QVERIFY(!panel.slidingGraph()->visible());
    for (uint64_t step = 1; step <= 30; ++step)
      panel.showSnapshot(hybrid(step, static_cast<int>(step), static_cast<int>(std::min<uint64_t>(step, 33))));
    QVERIFY(panel.slidingGraph()->visible());
    QVERIFY(panel.plot()->legend->hasItemWithPlottable(panel.slidingGraph()));
    QCOMPARE(panel.slidingGraph()->dataCount(), 30);
    QCOMPARE((panel.slidingGraph()->data()->constEnd() - 1)->value, 30.0);
    const auto csv = test::tmp_dir() / "memory-hybrid.csv";
    QVERIFY(panel.exportCsv(QString::fromStdString(csv.string())));
    std::ifstream in(csv);
    std::string header, last;
    std::getline(in, header);
    for (std::string line; std::getline(in, line);) last = line;
    QVERIFY(header.ends_with(",sliding_blocks_used,sliding_blocks_total,state_bytes,kv_bytes"));
    QVERIFY2(QString::fromStdString(last).endsWith(",30,40,0,0"), last.c_str());  // no recurrent state, no KV bytes set

    auto single = std::make_shared<Snapshot>(*hybrid(1, 5, 0));  // a new engine: its clock restarts
    single->kv_groups.clear();
    panel.showSnapshot(single);
    QVERIFY(!panel.slidingGraph()->visible());
    QVERIFY(!panel.plot()->legend->hasItemWithPlottable(panel.slidingGraph()));
  }

  void sequence_list_changes_only_the_rows_that_changed() {
    BlockMapPanel panel;
    panel.resize(800, 500);
    panel.show();
    QListWidget* list = panel.sequenceList();
    panel.showSnapshot(snapshot_with({1, 2, 3}), nullptr);
    QCOMPARE(list_ids(list), (std::vector<SeqId>{1, 2, 3}));
    QVERIFY(list->item(1)->text().startsWith("req 2"));
    QListWidgetItem* two = list->item(1);
    panel.showSnapshot(snapshot_with({2, 3, 5, 6}), nullptr);
    QCOMPARE(list_ids(list), (std::vector<SeqId>{2, 3, 5, 6}));
    QCOMPARE(list->item(0), two);  // the same row object: not rebuilt
    QVERIFY(list->item(3)->text().startsWith("req 6"));
    QVERIFY(!list->item(2)->icon().isNull());
    panel.showSnapshot(snapshot_with({}), nullptr);
    QCOMPARE(list->count(), 0);
    panel.showSnapshot(snapshot_with({4, 9}), nullptr);
    QCOMPARE(list_ids(list), (std::vector<SeqId>{4, 9}));
  }

  // A theme switch reaches a plot through its panel's palette change alone: the window does not
  // call each plotted panel.
  void plots_follow_a_theme_switch() {
    MemoryPanel panel;
    apply_theme(QStringLiteral("light"));
    QCoreApplication::processEvents();
    const QColor light = panel.plot()->xAxis->tickLabelColor();
    apply_theme(QStringLiteral("dark"));
    QCoreApplication::processEvents();
    QCOMPARE(panel.plot()->xAxis->tickLabelColor(), QApplication::palette().color(QPalette::WindowText));
    QVERIFY(panel.plot()->xAxis->tickLabelColor() != light);
    apply_theme(QStringLiteral("light"));
    QCoreApplication::processEvents();
    QCOMPARE(panel.plot()->xAxis->tickLabelColor(), light);
  }
};

QTEST_MAIN(TestLivePanels)
#include "test_live_panels.moc"
