// The live panels stay cheap as a run grows: the plots keep a bounded number of points without
// losing peaks, and the block map's sequence list changes only the rows that came or went.
#include <qcustomplot.h>

#include <QListWidget>
#include <QtTest>
#include <cmath>

#include "block_map_panel.h"
#include "block_map_widget.h"
#include "thinned_series.h"

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
    QCOMPARE(peak, 1000.0);                                        // a one-sample spike survives
    QCOMPARE((b->data()->constEnd() - 1)->value, 19999.0);         // the newest value is drawn
    series.clear();
    QCOMPARE(a->dataCount(), 0);
    series.add(1.0, {2.0, 3.0});
    QCOMPARE(a->dataCount(), 1);
    QCOMPARE(series.bucket(), 0.01);
  }

  void sequence_list_changes_only_the_rows_that_changed() {
    BlockMapPanel panel;
    panel.resize(800, 500);
    panel.show();
    QListWidget* list = panel.sequenceList();
    panel.setSnapshot(snapshot_with({1, 2, 3}), nullptr);
    QCOMPARE(list_ids(list), (std::vector<SeqId>{1, 2, 3}));
    QVERIFY(list->item(1)->text().startsWith("req 2"));
    QListWidgetItem* two = list->item(1);
    panel.setSnapshot(snapshot_with({2, 3, 5, 6}), nullptr);
    QCOMPARE(list_ids(list), (std::vector<SeqId>{2, 3, 5, 6}));
    QCOMPARE(list->item(0), two);  // the same row object: not rebuilt
    QVERIFY(list->item(3)->text().startsWith("req 6"));
    QVERIFY(!list->item(2)->icon().isNull());
    panel.setSnapshot(snapshot_with({}), nullptr);
    QCOMPARE(list->count(), 0);
    panel.setSnapshot(snapshot_with({4, 9}), nullptr);
    QCOMPARE(list_ids(list), (std::vector<SeqId>{4, 9}));
  }
};

QTEST_MAIN(TestLivePanels)
#include "test_live_panels.moc"
