// The story view in the real window (offscreen) on stories260K: a forced preemption and a
// constructed prefix miss, each reached by clicking the request (its row in the requests table,
// one of its blocks on the block map), asserting the sentences shown; clicking a sentence jumps
// the block map to that step's snapshot. A row of the block map's sequence list opens a story too.
// Also the chat's sampling defaults and greedy toggle.
#include <QDockWidget>
#include <QLabel>
#include <QSpinBox>
#include <QListWidget>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTextBrowser>
#include <QtTest>

#include "panels/block_map_panel.h"
#include "widgets/block_map_widget.h"
#include "panels/chat_panel.h"
#include "gui_test_support.h"
#include "shell/main_window.h"
#include "panels/request_story_panel.h"
#include "controls/settings_panel.h"
#include "panels/workload_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {
constexpr int kTimeoutMs = 60000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

std::vector<TokenId> tokens(int n, int salt) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(10 + (i * 7 + salt * 31) % 480);
  return t;
}

Request req(std::vector<TokenId> prompt, int n) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = n;
  r.ignore_eos = true;
  return r;
}

QString shown(const RequestStoryPanel* p) {
  QString s;
  for (int i = 0; i < p->timeline()->count(); ++i) s += p->timeline()->item(i)->text() + "\n";
  return s;
}

// The requests table row of sequence id (its first column carries the id).
int row_of(QTableWidget* t, qint64 id) {
  for (int r = 0; r < t->rowCount(); ++r)
    if (t->item(r, 0) && t->item(r, 0)->data(Qt::UserRole).toLongLong() == id) return r;
  return -1;
}
}  // namespace

class TestRequestStoryView : public QObject {
  Q_OBJECT
  std::unique_ptr<MainWindow> w_;
  RequestStoryPanel* story_ = nullptr;

  // Submits r and waits until the engine is idle; returns its sequence id.
  qint64 run(const Request& r) {
    QSignalSpy sub(w_->host()->worker(), &EngineThreadWorker::submitted);
    QSignalSpy fin(w_->host()->worker(), &EngineThreadWorker::requestFinished);
    const quint64 tag = w_->host()->submit(r);
    [&] { QTRY_VERIFY_WITH_TIMEOUT(!sub.isEmpty() && !fin.isEmpty(), kTimeoutMs); }();
    for (const auto& args : sub)
      if (args.at(0).toULongLong() == tag) return args.at(1).toLongLong();
    return -1;
  }

  void clickRow(qint64 id) {
    WorkloadPanel* wp = w_->workloadPanel();
    qobject_cast<QDockWidget*>(wp->parentWidget())->raise();
    QTRY_VERIFY_WITH_TIMEOUT(row_of(wp->requestsTable(), id) >= 0, kTimeoutMs);
    QTableWidget* t = wp->requestsTable();
    const int r = row_of(t, id);
    t->scrollToItem(t->item(r, 0));
    QSignalSpy shownSpy(story_, &RequestStoryPanel::storyShown);
    QTest::mouseClick(t->viewport(), Qt::LeftButton, {}, t->visualItemRect(t->item(r, 0)).center());
    QTRY_VERIFY_WITH_TIMEOUT(!shownSpy.isEmpty() && story_->story().id == id, kTimeoutMs);
  }

 private slots:
  void initTestCase() {
    test::start_gui_suite("request_story_view");
    w_ = std::make_unique<MainWindow>();
    w_->show();
    QVERIFY(w_->settingsPanel()->setOverride(QStringLiteral("kv-blocks"), QStringLiteral("6")));
    w_->openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->hasEngine(), kTimeoutMs);
    QCOMPARE(w_->host()->modelInfo().config.num_blocks, 6);
    story_ = w_->panel<RequestStoryPanel>();
    QVERIFY(story_);
  }

  // Two growing requests in a 6-block pool: the older one's growth preempts the newer one.
  void preemptionReadFromTheRequestsTable() {
    QSignalSpy fin(w_->host()->worker(), &EngineThreadWorker::requestFinished);
    QSignalSpy sub(w_->host()->worker(), &EngineThreadWorker::submitted);
    // Both submitted while paused, so they enter at the same step: on a loaded machine the
    // engine thread could otherwise run the first one for several steps before the second
    // arrives, and it would wait for room instead of being preempted.
    w_->host()->setPaused(true);
    w_->host()->submit(req(tokens(40, 1), 40));
    w_->host()->submit(req(tokens(40, 2), 40));
    QTRY_COMPARE_WITH_TIMEOUT(sub.count(), 2, kTimeoutMs);
    w_->host()->setPaused(false);
    QTRY_VERIFY_WITH_TIMEOUT(fin.count() == 2, kTimeoutMs);
    const qint64 older = sub.at(0).at(1).toLongLong(), newer = sub.at(1).at(1).toLongLong();
    clickRow(newer);
    const QString text = shown(story_);
    QVERIFY2(text.contains(QStringLiteral("the pool was 100% used and request %1 needed blocks").arg(older)),
             qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("Resumed at step")), qPrintable(text));
    QVERIFY(story_->header()->text().contains(QString::number(newer)));

    // A sentence jumps the block map to its step's snapshot (the nearest kept one).
    QListWidgetItem* pre = nullptr;
    for (int i = 0; i < story_->timeline()->count(); ++i)
      if (story_->timeline()->item(i)->data(Qt::UserRole + 1).toString() == QLatin1String("preemption"))
        pre = story_->timeline()->item(i);
    QVERIFY(pre);
    story_->timeline()->scrollToItem(pre);
    QTest::mouseClick(story_->timeline()->viewport(), Qt::LeftButton, {},
                      story_->timeline()->visualItemRect(pre).center());
    QTRY_VERIFY(story_->jumpNote()->text().startsWith(QStringLiteral("Block map: step")));
    const quint64 step = pre->data(Qt::UserRole).toULongLong();
    const SnapshotPtr onMap = w_->blockMapPanel()->map()->snapshot();
    QVERIFY(onMap);
    QVERIFY(onMap == story_->snapshotAt(step));
    QVERIFY(onMap->step <= step || onMap == story_->snapshotAt(0));
  }

  // B shares A's first 20 tokens; B is reached by clicking one of its blocks on the block map
  // while it runs (paused after its admission).
  void promptDiffersReadFromTheBlockMap() {
    const std::vector<TokenId> pa = tokens(48, 3);
    std::vector<TokenId> pb = pa;
    pb[20] = 7;
    const qint64 a = run(req(pa, 2));
    w_->host()->setPaused(true);
    QSignalSpy sub(w_->host()->worker(), &EngineThreadWorker::submitted);
    w_->host()->submit(req(pb, 30));
    QTRY_VERIFY_WITH_TIMEOUT(!sub.isEmpty(), kTimeoutMs);
    const qint64 b = sub.at(0).at(1).toLongLong();
    QSignalSpy snaps(w_->host(), &EngineHost::snapshot);
    w_->host()->singleStep();
    QTRY_VERIFY_WITH_TIMEOUT(!snaps.isEmpty(), kTimeoutMs);
    BlockMapWidget* map = w_->blockMapPanel()->map();
    QTRY_VERIFY_WITH_TIMEOUT(map->snapshot() && map->snapshot()->running == 1, kTimeoutMs);
    int cell = -1;
    for (const SeqSnap& q : map->snapshot()->seqs)
      if (q.id == b && q.block_table.size() > 1) cell = q.block_table[1];  // its own block (block 0 is shared with A)
    QVERIFY(cell >= 0);
    QSignalSpy shownSpy(story_, &RequestStoryPanel::storyShown);
    QTest::mouseClick(map, Qt::LeftButton, {}, map->cellRect(cell).center());
    QTRY_VERIFY_WITH_TIMEOUT(!shownSpy.isEmpty() && story_->story().id == b, kTimeoutMs);
    QCOMPARE(story_->story().missReason, QStringLiteral("prompt_differs"));
    const QString text = shown(story_);
    QVERIFY2(text.contains(QStringLiteral("differs from request %1's at token 20").arg(a)), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("16 of 48 prompt tokens hit")), qPrintable(text));
    w_->host()->setPaused(false);
    QTRY_VERIFY_WITH_TIMEOUT(!w_->host()->isRunning(), kTimeoutMs);
  }

  // The block map's sequence list is an entry point too: clicking a row shows that request's story.
  void storyFromTheBlockMapsSequenceList() {
    const qint64 id = run(req(tokens(24, 5), 4));
    QListWidget* list = w_->blockMapPanel()->sequenceList();
    QListWidgetItem* row = nullptr;
    QTRY_VERIFY_WITH_TIMEOUT(
        [&] {
          for (int i = 0; i < list->count(); ++i)
            if (list->item(i)->data(Qt::UserRole).toLongLong() == id) row = list->item(i);
          return row != nullptr;
        }(),
        kTimeoutMs);
    list->scrollToItem(row);
    QSignalSpy shownSpy(story_, &RequestStoryPanel::storyShown);
    QTest::mouseClick(list->viewport(), Qt::LeftButton, {}, list->visualItemRect(row).center());
    QTRY_VERIFY_WITH_TIMEOUT(!shownSpy.isEmpty() && story_->story().id == id, kTimeoutMs);
    QVERIFY(story_->header()->text().contains(QString::number(id)));
    QVERIFY2(shown(story_).contains(QStringLiteral("Arrived at step")), qPrintable(shown(story_)));
    QCOMPARE(w_->blockMapPanel()->map()->highlight(), id);  // the row still numbers its blocks on the map
  }

  // A chat turn's "story" link, and the chat's local-chat sampling defaults with greedy a click away.
  void chatTurnStoryAndSamplingDefaults() {
    ConversationWidget* chat = w_->chatPanel()->current();
    const SamplingParams sp = chat->samplingParams();
    QCOMPARE(sp.temperature, 0.8f);
    QCOMPARE(sp.top_k, 40);
    QCOMPARE(sp.top_p, 0.95f);
    QCOMPARE(sp.repetition_penalty, 1.1f);
    chat->greedyButton()->click();
    QVERIFY(is_greedy(chat->samplingParams()));
    QCOMPARE(chat->samplingParams().repetition_penalty, 1.0f);
    QCOMPARE(w_->settingsPanel()->samplingDefaults().sampling.temperature, 0.8f);
    QVERIFY(w_->settingsPanel()->threadsBox()->value() >= 1);
    chat->send(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    const qint64 id = chat->lastStats()->id;
    auto* view = chat->findChild<QTextBrowser*>();
    QVERIFY(view->toHtml().contains(QStringLiteral("story:%1").arg(id)));
    QSignalSpy shownSpy(story_, &RequestStoryPanel::storyShown);
    emit view->anchorClicked(QUrl(QStringLiteral("story:%1").arg(id)));  // what a click on the link sends
    QTRY_VERIFY_WITH_TIMEOUT(!shownSpy.isEmpty() && story_->story().id == id, kTimeoutMs);
    QVERIFY(shown(story_).contains(QStringLiteral("Arrived at step")));
  }

  void cleanupTestCase() { w_.reset(); }
};

QTEST_MAIN(TestRequestStoryView)
#include "test_request_story_view.moc"
