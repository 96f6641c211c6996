// The workbench window driven for real (offscreen): load stories260K, chat with streamed tokens,
// check the block map against the engine's own snapshot, refuse invalid settings, survive a
// corrupt model, run a scenario, compare two configurations, run the no-KV-cache teaching comparison,
// price every KV dtype, and close mid-run without hanging.
#include <QCheckBox>
#include <QComboBox>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QtTest>
#include <fstream>
#include <qcustomplot.h>

#include "panels/block_map_panel.h"
#include "widgets/block_map_widget.h"
#include "panels/captions_panel.h"
#include "panels/chat_panel.h"
#include "controls/compare_panel.h"
#include "kv/kv_layout.h"
#include "shell/main_window.h"
#include "panels/no_cache_panel.h"
#include "panels/planner_panel.h"
#include "panels/prefix_panel.h"
#include "widgets/seq_palette.h"
#include "controls/settings_panel.h"
#include "gui_test_support.h"
#include "panels/workload_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 30000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

// A window with stories260K loaded and an idle engine.
std::unique_ptr<MainWindow> open_window() {
  auto w = std::make_unique<MainWindow>();
  w->show();
  w->openModel(model_path());
  return w;
}

int tableRow(QTableWidget* t, const QString& header) {
  for (int r = 0; r < t->rowCount(); ++r)
    if (t->verticalHeaderItem(r)->text() == header) return r;
  return -1;
}

}  // namespace

class TestWorkbench : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    test::start_gui_suite("workbench");  // never the user's real settings
  }

  // Every test starts from the built-in settings (a previous test may have applied others).
  void init() { QSettings().clear(); }

  void loadsModelAndStreamsChat() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    QVERIFY(w->host()->modelInfo().description.contains(QStringLiteral("llama")));
    QVERIFY(w->host()->modelInfo().kvSummary.startsWith(QStringLiteral("KV cache:")));

    // Counted on this (the GUI) thread: a QSignalSpy on the worker would record from the engine
    // thread while this thread reads it (a data race ThreadSanitizer reports).
    int streamed = 0;
    QObject onGuiThread;
    connect(
        w->host()->worker(), &EngineThreadWorker::tokenStreamed, &onGuiThread, [&streamed] { ++streamed; },
        Qt::QueuedConnection);
    ConversationWidget* chat = w->chatPanel()->current();
    chat->send(QStringLiteral("Once upon a time"));
    QVERIFY(chat->isBusy());
    QTRY_VERIFY_WITH_TIMEOUT(streamed > 0, kTimeoutMs);  // streamed, not delivered at the end
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    QVERIFY(chat->lastStats().has_value());
    const TurnStats first = *chat->lastStats();
    QCOMPARE(first.state, QStringLiteral("finished"));
    QVERIFY(first.generated > 0);
    QVERIFY(first.ttftMs >= 0);
    QCOMPARE(first.cachedTokens, 0);
    QVERIFY(chat->transcript().contains(QStringLiteral("Once upon a time")));
    QCOMPARE(chat->history().size(), static_cast<size_t>(first.promptTokens + first.generated));

    // Turn 2 re-sends turn 1's tokens: every full block of them must come from the prefix cache.
    chat->send(QStringLiteral("The next day"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    const TurnStats second = *chat->lastStats();
    const int bs = w->host()->latest()->block_size;
    const int turn1 = first.promptTokens + first.generated;
    QVERIFY(second.promptTokens > turn1);
    QCOMPARE(second.cachedTokens, (turn1 / bs) * bs);
    QVERIFY(chat->transcript().contains(QStringLiteral("cached")));
  }

  // Two conversations generate at the same time; Stop cancels one mid-reply and frees its blocks.
  void concurrentChatsAndStop() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    w->host()->setStepDelay(10);
    ConversationWidget* a = w->chatPanel()->current();
    ConversationWidget* b = w->chatPanel()->addConversation();
    QCOMPARE(w->chatPanel()->count(), 2);
    a->send(QStringLiteral("Once upon a time"));
    b->send(QStringLiteral("The little cat"));
    QTRY_VERIFY_WITH_TIMEOUT(a->activeSeq() >= 0 && b->activeSeq() >= 0, kTimeoutMs);
    QVERIFY(a->activeSeq() != b->activeSeq());
    // Both are in the engine at once.
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->latest() && w->host()->latest()->running == 2, kTimeoutMs);
    b->stop();
    QTRY_VERIFY_WITH_TIMEOUT(!b->isBusy(), kTimeoutMs);
    QCOMPARE(b->lastStats()->state, QStringLiteral("cancelled"));
    QVERIFY(b->transcript().contains(QStringLiteral("cancelled")));
    QTRY_VERIFY_WITH_TIMEOUT(!a->isBusy(), kTimeoutMs);
    QCOMPARE(a->lastStats()->state, QStringLiteral("finished"));
    QTRY_COMPARE_WITH_TIMEOUT(w->host()->latest()->memory.blocks_used, 0, kTimeoutMs);
  }

  void blockMapMatchesSnapshot() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    EngineHost* host = w->host();
    // Slow the engine down and pause it mid-run so the map and snapshot hold live blocks.
    host->setStepDelay(20);
    ConversationWidget* chat = w->chatPanel()->current();
    chat->send(QStringLiteral("Once upon a time there was a girl"));
    BlockMapWidget* map = w->blockMapPanel()->map();
    QTRY_VERIFY_WITH_TIMEOUT(map->snapshot() && map->snapshot()->memory.blocks_used >= 2, kTimeoutMs);
    host->setPaused(true);
    QTRY_VERIFY_WITH_TIMEOUT(host->isPaused(), kTimeoutMs);
    QTest::qWait(200);  // the worker's last snapshot reaches the panels
    const SnapshotPtr snap = host->latest();
    QVERIFY(snap);
    QCOMPARE(map->snapshot(), snap);

    const auto c = map->counts();
    QCOMPARE(c.used, snap->memory.blocks_used);
    QCOMPARE(c.cached, snap->memory.blocks_cached);
    QCOMPARE(c.free, snap->memory.blocks_free);
    QCOMPARE(c.used + c.cached + c.free, static_cast<int>(snap->blocks.size()));

    // The painted pixels agree: a full used block shows its owner's colour, a free one does not.
    int fullBlock = -1, freeBlock = -1;
    for (size_t b = 0; b < snap->blocks.size(); ++b) {
      const BlockSnap& s = snap->blocks[b];
      if (fullBlock < 0 && s.status == BlockStatus::Used && s.filled == snap->block_size && s.ref_count == 1)
        fullBlock = static_cast<int>(b);
      if (freeBlock < 0 && s.status == BlockStatus::Free) freeBlock = static_cast<int>(b);
    }
    QVERIFY(fullBlock >= 0 && freeBlock >= 0);
    const QImage img = map->grab().toImage();
    const qreal dpr = img.devicePixelRatio();
    auto pixel = [&](int block) { return img.pixelColor((map->cellRect(block).center() * dpr)); };
    QCOMPARE(pixel(fullBlock).rgb(), seq_color(snap->blocks[static_cast<size_t>(fullBlock)].owner).rgb());
    QVERIFY(pixel(freeBlock).rgb() != seq_color(snap->blocks[static_cast<size_t>(fullBlock)].owner).rgb());
    QCOMPARE(map->blockAt(map->cellRect(fullBlock).center()), fullBlock);

    // The tooltip names the block, its ref count, its owner and the decoded text it holds.
    const QString tip = map->tooltipText(fullBlock);
    QVERIFY2(tip.contains(QStringLiteral("Block %1").arg(fullBlock)), qPrintable(tip));
    QVERIFY(tip.contains(QStringLiteral("ref count 1")));
    QVERIFY(tip.contains(QStringLiteral("chat")));
    QVERIFY2(tip.contains(QStringLiteral("tokens:")) && !tip.contains(QStringLiteral("not in this snapshot")),
             qPrintable(tip));

    // Clicking the sequence numbers its block table in logical order.
    map->setHighlight(chat->activeSeq());
    QCOMPARE(map->highlight(), chat->activeSeq());
    host->setPaused(false);
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
  }

  void invalidSettingsAreRefused() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    SettingsPanel* s = w->settingsPanel();
    QVERIFY(s->applyButton()->isEnabled());

    // Letters never make it into a number field.
    s->windowEdit()->clear();
    QTest::keyClicks(s->windowEdit(), QStringLiteral("abc"));
    QVERIFY(s->windowEdit()->text().isEmpty());
    QVERIFY(!s->applyButton()->isEnabled());

    s->windowEdit()->setText(QStringLiteral("5"));  // smaller than a 16-token block
    QVERIFY(!s->applyButton()->isEnabled());
    QVERIFY2(s->validationMessage().contains(QStringLiteral("smaller than one block")),
             qPrintable(s->validationMessage()));

    s->windowEdit()->setText(QStringLiteral("0"));
    s->sinksEdit()->setText(QStringLiteral("4"));  // sinks without a window
    QVERIFY(!s->applyButton()->isEnabled());
    QVERIFY(s->validationMessage().contains(QStringLiteral("sliding window")));

    s->sinksEdit()->setText(QStringLiteral("0"));
    s->poolUnit()->setCurrentIndex(0);
    s->poolEdit()->setText(QStringLiteral("1"));
    QVERIFY(!s->applyButton()->isEnabled());
    s->poolEdit()->setText(QStringLiteral("64"));
    QVERIFY(s->applyButton()->isEnabled());

    // A valid change rebuilds the engine on the worker with the new pool.
    QSignalSpy loaded(w->host(), &EngineHost::modelLoaded);
    s->applyButton()->click();
    QTRY_VERIFY_WITH_TIMEOUT(loaded.count() == 1, kTimeoutMs);
    QTRY_COMPARE_WITH_TIMEOUT(static_cast<int>(w->host()->latest()->blocks.size()), 64, kTimeoutMs);

    // What slips past the widgets is refused by the engine and reported, never fatal: the
    // previous engine keeps running.
    EngineConfig bad = w->host()->modelInfo().config;
    bad.block_size = 7;
    w->host()->applyConfig(bad);
    QTRY_VERIFY_WITH_TIMEOUT(w->errorCount() > 0, kTimeoutMs);
    QVERIFY2(w->lastError().contains(QStringLiteral("block size")), qPrintable(w->lastError()));
    QTRY_VERIFY_WITH_TIMEOUT(!w->host()->isLoading(), kTimeoutMs);
    ConversationWidget* chat = w->chatPanel()->current();
    chat->send(QStringLiteral("Hello"));
    QTRY_VERIFY_WITH_TIMEOUT(chat->lastStats().has_value(), kTimeoutMs);
    QCOMPARE(static_cast<int>(w->host()->latest()->blocks.size()), 64);
  }

  // A sliding window with sinks: blocks that slide out are freed (and marked), sink blocks are kept
  // and marked, and the block tables show the holes.
  void windowAndSinksAreShown() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    SettingsPanel* s = w->settingsPanel();
    s->windowEdit()->setText(QStringLiteral("64"));
    s->sinksEdit()->setText(QStringLiteral("4"));
    QVERIFY2(s->applyButton()->isEnabled(), qPrintable(s->validationMessage()));
    QSignalSpy loaded(w->host(), &EngineHost::modelLoaded);
    s->applyButton()->click();
    QTRY_VERIFY_WITH_TIMEOUT(loaded.count() == 1, kTimeoutMs);
    QCOMPARE(w->host()->modelInfo().config.window, 64);
    w->host()->setStepDelay(20);
    QVERIFY(w->workloadPanel()->run(QStringLiteral("long-document-rag")));
    BlockMapWidget* map = w->blockMapPanel()->map();
    // Mid-run: some table has dropped entries, sink blocks are marked, freed-by-window blocks crossed.
    QTRY_VERIFY_WITH_TIMEOUT(map->counts().sinks > 0 && map->counts().dropped > 0, kTimeoutMs);
    bool holes = false;
    for (const SeqSnap& q : map->snapshot()->seqs)
      for (BlockId b : q.block_table) holes |= b == kNoBlock;
    QVERIFY(holes);
    w->host()->cancelAll();
  }

  void corruptModelIsReported() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    const auto bad = test::tmp_dir() / "corrupt.gguf";
    {
      std::ofstream f(bad, std::ios::binary);
      f << "GGUF this is not a model";
    }
    w->openModel(QString::fromStdString(bad.string()));
    QTRY_VERIFY_WITH_TIMEOUT(w->errorCount() > 0, kTimeoutMs);
    QVERIFY2(w->lastError().contains(QStringLiteral("Could not load")), qPrintable(w->lastError()));
    QTRY_VERIFY_WITH_TIMEOUT(!w->host()->isLoading(), kTimeoutMs);
    QVERIFY(w->host()->hasEngine());  // the old engine is still there
    QCOMPARE(w->host()->modelInfo().path, model_path());
  }

  // No model at all (the first load fails): the window reports it and stays usable.
  void startsWithoutAModel() {
    MainWindow w;
    w.show();
    const auto bad = test::tmp_dir() / "not-a-model.gguf";
    {
      std::ofstream f(bad, std::ios::binary);
      f << "definitely not GGUF";
    }
    w.openModel(QString::fromStdString(bad.string()));
    QTRY_VERIFY_WITH_TIMEOUT(w.errorCount() > 0, kTimeoutMs);
    QVERIFY(!w.host()->hasEngine());
    w.chatPanel()->current()->send(QStringLiteral("hello"));
    QVERIFY(!w.chatPanel()->current()->isBusy());
    QVERIFY(!w.workloadPanel()->run(QStringLiteral("no-such-scenario")));
    w.host()->singleStep();  // no engine: ignored
    w.openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
  }

  void runsScenarioWithPrefixSharing() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    WorkloadPanel* wl = w->workloadPanel();
    QVERIFY(wl->run(QStringLiteral("shared-system-prompt")));
    QTRY_VERIFY_WITH_TIMEOUT(wl->total() == 16 && wl->done() == 16, kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(!w->host()->isRunning(), kTimeoutMs);
    const SnapshotPtr snap = w->host()->latest();
    QVERIFY(snap->counters.prefix_hits_tokens > 0);
    QVERIFY(w->captionsPanel()->captionCount() > 0);
    w->prefixPanel()->showSnapshot(snap);
    w->prefixPanel()->rebuildNow();
    QVERIFY2(w->prefixPanel()->countersText().contains(
                 QStringLiteral("hit %1 tokens").arg(snap->counters.prefix_hits_tokens)),
             qPrintable(w->prefixPanel()->countersText()));
  }

  void replaysMultiTurnConversations() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    WorkloadPanel* wl = w->workloadPanel();
    QVERIFY(wl->run(QStringLiteral("multi-turn-chat")));
    QTRY_VERIFY_WITH_TIMEOUT(wl->total() == 16 && wl->done() == 16, kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(!w->host()->isRunning(), kTimeoutMs);
    // Turns 1..3 of each conversation start with the whole previous turn: most prompt tokens hit.
    const SnapshotPtr snap = w->host()->latest();
    int followUps = 0;
    for (const SeqSnap& q : snap->seqs) {
      if (q.label.find("turn-0") != std::string::npos || q.state != SeqState::Finished) continue;
      ++followUps;
      QVERIFY2(q.cached_prompt_tokens >= q.prompt_len / 2, q.label.c_str());
    }
    QCOMPARE(followUps, 12);
  }

  // The UI thread must keep up with a big pool: time the block map's full repaint at 16K blocks
  // and the longest gap between UI-thread timer ticks while a workload runs.
  void staysResponsiveWith16kBlocks() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    EngineConfig cfg = w->host()->modelInfo().config;
    cfg.num_blocks = 16384;
    QSignalSpy loaded(w->host(), &EngineHost::modelLoaded);
    w->host()->applyConfig(cfg);
    QTRY_VERIFY_WITH_TIMEOUT(loaded.count() == 1, kTimeoutMs);
    QTRY_COMPARE_WITH_TIMEOUT(static_cast<int>(w->host()->latest()->blocks.size()), 16384, kTimeoutMs);
    BlockMapWidget* map = w->blockMapPanel()->map();
    map->setCellSize(4);  // every block on screen at once: the worst case for painting
    map->resize(1000, 700);

    qint64 lastTick = 0, worstGap = 0;
    QElapsedTimer clock;
    clock.start();
    QTimer probe;
    probe.setInterval(5);
    connect(&probe, &QTimer::timeout, this, [&] {
      const qint64 now = clock.elapsed();
      if (lastTick) worstGap = std::max(worstGap, now - lastTick);
      lastTick = now;
    });
    probe.start();
    QVERIFY(w->workloadPanel()->run(QStringLiteral("many-short-chats")));
    QTRY_VERIFY_WITH_TIMEOUT(
        w->workloadPanel()->done() == w->workloadPanel()->total() && w->workloadPanel()->total() > 0, 120000);
    probe.stop();

    QElapsedTimer paint;
    qint64 worstPaint = 0;
    for (int i = 0; i < 5; ++i) {
      paint.restart();
      const QPixmap pm = map->grab();
      worstPaint = std::max(worstPaint, paint.elapsed());
    }
    qInfo(
        "16K blocks: block map full repaint %lld ms (worst of 5), longest snapshot hand-out %.1f ms, "
        "longest UI-thread gap during the run %lld ms",
        static_cast<long long>(worstPaint), w->worstSnapshotMs(), static_cast<long long>(worstGap));
    // Generous bounds for a loaded CI machine; the logged numbers are the measurement.
    QVERIFY2(worstPaint < 100, qPrintable(QStringLiteral("paint %1 ms").arg(worstPaint)));
    QVERIFY2(worstGap < 500, qPrintable(QStringLiteral("gap %1 ms").arg(worstGap)));
  }

  void compareRunsTwoEngines() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    ComparePanel* cmp = w->comparePanel();
    cmp->prefixB()->setChecked(true);  // B: prefix caching off
    QString why;
    QVERIFY2(cmp->start(QStringLiteral("shared-system-prompt"), &why), qPrintable(why));
    QTRY_VERIFY_WITH_TIMEOUT(cmp->finished(), kTimeoutMs);
    QTest::qWait(100);
    const int hitRow = tableRow(cmp->table(), QStringLiteral("prefix hit %"));
    QVERIFY(cmp->table()->item(hitRow, 0)->text().toDouble() > 0);
    QCOMPARE(cmp->table()->item(hitRow, 1)->text().toDouble(), 0.0);
  }

  // Paged vs the contiguous baseline on the same workload: the baseline reserves max_model_len
  // per request, so it wastes most of what it reserves and runs fewer requests at once.
  void compareAgainstContiguousBaseline_data() {
    QTest::addColumn<int>("allocB");
    QTest::addColumn<double>("minWasteB");
    QTest::addColumn<double>("maxWasteB");  // the request's own max wastes far less: the policy took effect
    QTest::newRow("reserves max model length") << 2 << 60.0 << 100.0;
    QTest::newRow("reserves the request's own max") << 3 << 20.0 << 90.0;  // peak 76 vs 97
  }
  void compareAgainstContiguousBaseline() {
    QFETCH(int, allocB);
    QFETCH(double, minWasteB);
    QFETCH(double, maxWasteB);
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    ComparePanel* cmp = w->comparePanel();
    cmp->allocatorB()->setCurrentIndex(allocB);  // a contiguous baseline
    QString why;
    QVERIFY2(cmp->start(QStringLiteral("many-short-chats"), &why), qPrintable(why));
    QTRY_VERIFY_WITH_TIMEOUT(cmp->finished(), 120000);
    QTest::qWait(100);
    QTableWidget* t = cmp->table();
    const int waste = tableRow(t, QStringLiteral("peak waste %"));
    const int conc = tableRow(t, QStringLiteral("peak concurrent requests"));
    QVERIFY2(t->item(waste, 1)->text().toDouble() > minWasteB, qPrintable(t->item(waste, 1)->text()));
    QVERIFY2(t->item(waste, 1)->text().toDouble() < maxWasteB, qPrintable(t->item(waste, 1)->text()));
    QVERIFY2(t->item(waste, 0)->text().toDouble() < t->item(waste, 1)->text().toDouble(),
             qPrintable(t->item(waste, 0)->text()));
    QVERIFY(t->item(conc, 0)->text().toInt() > t->item(conc, 1)->text().toInt());
    QCOMPARE(t->item(tableRow(t, QStringLiteral("rejected requests")), 1)->text(), QStringLiteral("0"));
  }

  // Teaching: one prompt with and without a KV cache, each on its own engine. Every point of the
  // plot comes from the engines' per-step snapshots, and the counts follow exactly: with the cache
  // one token computed per generated token, without it the whole sequence so far.
  void teachingNoKvCacheVsCached() {
    MainWindow w;
    w.show();
    w.settingsPanel()->setModelPath(model_path());  // no need to load it in the main engine
    NoCachePanel* p = w.noCachePanel();
    QCOMPARE(p->tokensBox()->value(), 200);  // the default run
    constexpr int N = 40;
    QString why;
    QVERIFY2(p->start(QStringLiteral("Once upon a time"), N, &why), qPrintable(why));
    QVERIFY(!p->start(QStringLiteral("again"), N, &why));  // one run at a time
    QTRY_VERIFY_WITH_TIMEOUT(!p->isRunning(), 60000);
    QVERIFY2(p->finished(), qPrintable(p->statusText()));

    const auto& cached = p->points(NoCachePanel::Cached);
    const auto& none = p->points(NoCachePanel::NoCache);
    QCOMPARE(static_cast<int>(cached.size()), N);
    QCOMPARE(static_cast<int>(none.size()), N);
    QCOMPARE(p->missedSteps(NoCachePanel::Cached), 0);
    QCOMPARE(p->missedSteps(NoCachePanel::NoCache), 0);
    const qint64 P = p->promptTokens(NoCachePanel::Cached);
    QVERIFY(P > 1);
    QCOMPARE(p->promptTokens(NoCachePanel::NoCache), static_cast<int>(P));
    qint64 sumCached = 0, sumNone = 0;
    double msCached = 0, msNone = 0;
    for (int k = 0; k < N; ++k) {
      // Token 1 comes after the prompt's prefill in both runs; then the runs part ways.
      QCOMPARE(cached[k].tokens, k == 0 ? P : 1);
      QCOMPARE(none[k].tokens, P + k);
      QCOMPARE(cached[k].steps, 1);
      QCOMPARE(none[k].steps, 1);
      QVERIFY(cached[k].stepMs > 0 && none[k].stepMs > 0);
      sumCached += cached[k].tokens;
      sumNone += none[k].tokens;
      msCached += cached[k].stepMs;
      msNone += none[k].stepMs;
    }
    // The sums are the engines' own counters: linear vs quadratic.
    const SnapshotPtr a = p->lastSnapshot(NoCachePanel::Cached), b = p->lastSnapshot(NoCachePanel::NoCache);
    QVERIFY(a && b);
    QCOMPARE(static_cast<qint64>(a->counters.tokens_prefilled), P);
    QCOMPARE(static_cast<qint64>(a->counters.tokens_decoded), static_cast<qint64>(N));
    QCOMPARE(sumCached, P + N - 1);
    QCOMPARE(static_cast<qint64>(b->counters.tokens_prefilled), sumNone);
    QCOMPARE(sumNone, N * P + static_cast<qint64>(N) * (N - 1) / 2);
    QVERIFY2(msNone > msCached, qPrintable(QStringLiteral("%1 vs %2 ms").arg(msNone).arg(msCached)));
    QVERIFY(p->sameTokens().value_or(false));  // same greedy tokens either way
    QVERIFY2(p->totalsText().contains(QStringLiteral("same %1 tokens").arg(N)), qPrintable(p->totalsText()));

    // The chart holds exactly these points: tokens and step time of both runs.
    QCustomPlot* plot = p->plot();
    QCOMPARE(plot->graphCount(), 4);
    for (int g = 0; g < 4; ++g) QCOMPARE(plot->graph(g)->dataCount(), N);
    for (int k = 0; k < N; ++k) {
      QCOMPARE(plot->graph(0)->data()->at(k)->value, static_cast<double>(cached[k].tokens));
      QCOMPARE(plot->graph(1)->data()->at(k)->value, cached[k].stepMs);
      QCOMPARE(plot->graph(2)->data()->at(k)->value, static_cast<double>(none[k].tokens));
      QCOMPARE(plot->graph(3)->data()->at(k)->value, none[k].stepMs);
      QCOMPARE(plot->graph(2)->data()->at(k)->key, static_cast<double>(k + 1));
    }
    const auto csv = test::tmp_dir() / "no-kv-cache.csv";
    QVERIFY(p->exportCsv(QString::fromStdString(csv.string())));
    std::ifstream in(csv);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    QCOMPARE(lines, N + 1);
  }

  // Every KV dtype the engine supports is offered, each with its cost per token on the loaded
  // model, and that cost is what the engine then reports.
  void kvDtypesWithBytesPerToken() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    const ModelInfo info = w->host()->modelInfo();
    QVERIFY(info.nLayer > 0 && info.nHeadKv > 0 && info.headDim > 0);
    auto bytes = [&](KvDtype d) {
      KvLayout l;
      l.n_layer = info.nLayer;
      l.n_head_kv = info.nHeadKv;
      l.head_dim = info.headDim;
      l.dtype = d;
      return l.bytes_per_token();
    };
    auto costText = [](int64_t b) {
      return QStringLiteral("%1 bytes per token").arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(b)));
    };
    QComboBox* box = w->settingsPanel()->dtypeBox();
    QComboBox* boxB = w->comparePanel()->dtypeB();
    QCOMPARE(box->count(), static_cast<int>(std::size(kAllKvDtypes)));
    QCOMPARE(boxB->count(), static_cast<int>(std::size(kAllKvDtypes)) + 1);  // + "same as A"
    for (int i = 0; i < box->count(); ++i) {
      const KvDtype d = kAllKvDtypes[i];
      QCOMPARE(box->itemText(i), QString::fromLatin1(kv_dtype_name(d)));
      const QString tip = box->itemData(i, Qt::ToolTipRole).toString();
      QVERIFY2(tip.contains(costText(bytes(d))), qPrintable(tip));
      QVERIFY2(tip.contains(QStringLiteral("-token block")), qPrintable(tip));
      const QString tipB = boxB->itemData(i + 1, Qt::ToolTipRole).toString();
      QCOMPARE(boxB->itemData(i + 1).toString(), QString::fromLatin1(kv_dtype_name(d)));
      QVERIFY2(tipB.contains(costText(bytes(d))), qPrintable(tipB));
    }
    QVERIFY(bytes(KvDtype::INT8) < bytes(KvDtype::F16) && bytes(KvDtype::F16) < bytes(KvDtype::F32));

    // "fp8" (as on the command line) selects fp8_e4m3; pick fp8_e5m2 and apply: the engine's
    // snapshot reports the bytes per token the tooltip promised.
    QVERIFY(w->settingsPanel()->setOverride(QStringLiteral("kv-dtype"), QStringLiteral("fp8")));
    QCOMPARE(box->currentText(), QStringLiteral("fp8_e4m3"));
    QVERIFY(w->settingsPanel()->setOverride(QStringLiteral("kv-dtype"), QStringLiteral("fp8_e5m2")));
    QVERIFY(box->toolTip().contains(costText(bytes(KvDtype::FP8_E5M2))));
    QSignalSpy loaded(w->host(), &EngineHost::modelLoaded);
    w->settingsPanel()->applyButton()->click();
    QTRY_VERIFY_WITH_TIMEOUT(loaded.count() == 1, kTimeoutMs);
    QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(w->host()->latest()->kv_dtype), QStringLiteral("fp8_e5m2"),
                              kTimeoutMs);
    QCOMPARE(w->host()->latest()->memory.kv_bytes_per_token, bytes(KvDtype::FP8_E5M2));
  }

  void plannerShowsTheStatementExample() {
    MainWindow w;
    const QString text = w.plannerPanel()->resultText();
    // 70B at 128K, FP16 KV: 320 GiB if all 64 heads were KV heads, 40 GiB with the real 8.
    QVERIFY2(text.contains(QStringLiteral("(320.0 GiB)")), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("(40.0 GiB)")), qPrintable(text));
    w.plannerPanel()->contextEdit()->setText(QStringLiteral("12x"));  // malformed: explained, no crash
    QVERIFY(w.plannerPanel()->resultText().contains(QStringLiteral("(320.0 GiB)")));
  }

  // A hybrid (Qwen3.5-9B at 32K on one 80 GiB GPU): the fixed state per sequence, and 60
  // sequences fit where the same model with attention in every layer fits 15.
  void plannerShowsAHybridsFixedState() {
    MainWindow w;
    w.plannerPanel()->presetBox()->setCurrentText(QStringLiteral("Qwen3.5-9B"));
    w.plannerPanel()->contextEdit()->setText(QStringLiteral("32K"));
    const QString text = w.plannerPanel()->resultText();
    QVERIFY2(text.contains(QStringLiteral("Recurrent state")), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("<b>60</b> sequences")), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("all 32 layers: <b>15</b>")), qPrintable(text));
  }

  void layoutIsRemembered() {
    {
      auto w = open_window();
      QDockWidget* prefix = w->panelDock(QStringLiteral("prefixDock"));
      prefix->setFloating(true);
      w->close();
    }
    auto w = open_window();
    QVERIFY(w->panelDock(QStringLiteral("prefixDock"))->isFloating());
    w->resetLayout();
    QVERIFY(!w->panelDock(QStringLiteral("prefixDock"))->isFloating());
    w->close();
  }

  void closesMidRunWithoutHanging() {
    auto w = open_window();
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    QVERIFY(w->workloadPanel()->run(QStringLiteral("pool-pressure")));
    w->chatPanel()->current()->send(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->isRunning(), kTimeoutMs);
    QElapsedTimer t;
    t.start();
    w->close();
    w.reset();
    QVERIFY2(t.elapsed() < 5000, qPrintable(QStringLiteral("closing took %1 ms").arg(t.elapsed())));
  }
};

QTEST_MAIN(TestWorkbench)
#include "test_workbench.moc"
