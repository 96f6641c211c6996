// The engine worker's life cycle, driven through the window (offscreen): what the user can do
// while a model is loading (open another, open a broken one, cancel, close the window), and
// closing the window while a workload runs. Each must leave the window up with a clear status,
// or, when closing, the worker thread finished and the worker destroyed, in bounded time.
//
// The "big" model is a ~32 MB random-weight llama (Q8_0) written once per run: large enough
// that its load (read, vocabulary, engine) is still in flight when the next command arrives.
#include <QElapsedTimer>
#include <QPointer>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QThread>
#include <QTimer>
#include <QtTest>
#include <fstream>

#include "panels/chat_panel.h"
#include "shell/main_window.h"
#include "model/synthetic_model.h"
#include "gui_test_support.h"
#include "panels/workload_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 60000;

QString small_model() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }
QString big_model() { return QString::fromStdString((test::tmp_dir() / "lifecycle-big.gguf").string()); }

QString file_name(const QString& path) { return QFileInfo(path).fileName(); }

// Records, on the GUI thread, the longest gap between ticks of a 10 ms timer: how long the UI
// thread was blocked while something else happened.
class StallMeter : public QObject {
 public:
  StallMeter() {
    clock_.start();
    connect(&timer_, &QTimer::timeout, this, [this] { worst_ = std::max(worst_, clock_.restart()); });
    timer_.start(10);
  }
  qint64 worstMs() const { return worst_; }

 private:
  QTimer timer_;
  QElapsedTimer clock_;
  qint64 worst_ = 0;
};

}  // namespace

class TestLifecycle : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    test::start_gui_suite("lifecycle");  // never the user's real settings

    SyntheticSpec s;
    s.n_vocab = 4096;
    s.n_embd = 512;
    s.n_layer = 8;
    s.n_head = 8;
    s.n_head_kv = 4;
    s.n_ff = 1536;
    s.n_ctx = 2048;
    s.dtype = GgmlType::Q8_0;
    write_synthetic_model(s, big_model().toStdString());
    QVERIFY(QFileInfo(big_model()).size() > 20 * 1024 * 1024);
  }

  void init() { QSettings().clear(); }

  // Open the big model, then the small one before the first load is done: the worker runs them
  // in order, the window ends on the small one, says so, and works.
  void openAnotherWhileLoading() {
    MainWindow w;
    w.show();
    QSignalSpy loaded(w.host(), &EngineHost::modelLoaded);
    w.openModel(big_model());
    QVERIFY(w.host()->isLoading());
    QVERIFY2(w.statusBar()->currentMessage().startsWith(QStringLiteral("Loading")),
             qPrintable(w.statusBar()->currentMessage()));
    w.openModel(small_model());
    QTRY_VERIFY_WITH_TIMEOUT(loaded.count() == 2 && !w.host()->isLoading(), kTimeoutMs);
    QCOMPARE(loaded.at(0).at(0).value<ModelInfo>().path, big_model());
    QCOMPARE(loaded.at(1).at(0).value<ModelInfo>().path, small_model());
    QCOMPARE(w.host()->modelInfo().path, small_model());
    QCOMPARE(w.errorCount(), 0);
    QVERIFY2(w.windowTitle().contains(file_name(small_model())), qPrintable(w.windowTitle()));
    // The description, or as much of it as fits with "…" and the whole of it in the tooltip.
    const QString msg = w.statusBar()->currentMessage(), desc = w.host()->modelInfo().description;
    if (msg.endsWith(QChar(0x2026))) {
      QVERIFY2(desc.startsWith(msg.chopped(1)), qPrintable(msg));
      QCOMPARE(w.statusBar()->toolTip(), desc);
    } else {
      QCOMPARE(msg, desc);
    }

    ConversationWidget* chat = w.chatPanel()->current();
    chat->send(QStringLiteral("Once upon a time"));
    QVERIFY(chat->isBusy());
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    QCOMPARE(chat->lastStats()->state, QStringLiteral("finished"));
  }

  // A broken file opened while a good one loads: the good one ends up loaded, the broken one is
  // reported by name, and nothing is left "loading".
  void openBrokenFileWhileLoading() {
    const auto bad = test::tmp_dir() / "lifecycle-broken.gguf";
    {
      std::ofstream f(bad, std::ios::binary);
      f << "GGUF but not really";
    }
    MainWindow w;
    w.show();
    w.openModel(big_model());
    w.openModel(QString::fromStdString(bad.string()));
    QTRY_VERIFY_WITH_TIMEOUT(w.errorCount() == 1 && !w.host()->isLoading(), kTimeoutMs);
    QVERIFY2(w.lastError().contains(QStringLiteral("Could not load")) &&
                 w.lastError().contains(QStringLiteral("lifecycle-broken.gguf")),
             qPrintable(w.lastError()));
    QVERIFY(w.host()->hasEngine());
    QCOMPARE(w.host()->modelInfo().path, big_model());
    QVERIFY2(w.statusBar()->currentMessage().startsWith(QStringLiteral("Could not load")),
             qPrintable(w.statusBar()->currentMessage()));
  }

  // "Cancel" while loading: Stop-all, pause and a chat message arrive before the engine exists.
  // None may crash or leave work behind: the load completes, the engine is idle and empty, the
  // UI thread was never blocked by the load, and the next chat runs normally.
  void cancelWhileLoading() {
    MainWindow w;
    w.show();
    StallMeter stalls;
    w.openModel(small_model());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine() && !w.host()->isLoading(), kTimeoutMs);
    ConversationWidget* chat = w.chatPanel()->current();

    w.openModel(big_model());
    chat->send(QStringLiteral("sent while the next model loads"));  // queued behind the load
    w.host()->cancelAll();
    w.host()->setPaused(true);
    w.host()->setPaused(false);
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->modelInfo().path == big_model() && !w.host()->isLoading(), kTimeoutMs);
    // The chat turn was queued behind the load, so it reached the new engine and cancelAll
    // cancelled it (or the conversation was reset when the new model arrived): either way it is
    // over, and not left "running".
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    if (chat->lastStats())
      QVERIFY2(chat->lastStats()->state != QStringLiteral("running"), qPrintable(chat->lastStats()->state));
    QTRY_VERIFY_WITH_TIMEOUT(
        w.host()->latest() && w.host()->latest()->running == 0 && w.host()->latest()->memory.blocks_used == 0,
        kTimeoutMs);
    QCOMPARE(w.errorCount(), 0);

    chat->send(QStringLiteral("hello"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    QVERIFY(chat->lastStats().has_value());
    QCOMPARE(chat->lastStats()->state, QStringLiteral("finished"));
    qInfo("longest UI-thread stall over two loads and a chat: %lld ms", stalls.worstMs());
    QVERIFY2(stalls.worstMs() < 2000, qPrintable(QStringLiteral("the UI thread stalled %1 ms").arg(stalls.worstMs())));
  }

  // Closing the window while the model loads: the load is one uninterruptible call on the
  // worker thread, so closing waits for it, then the thread ends and the worker is destroyed.
  void closeWhileLoading() {
    auto w = std::make_unique<MainWindow>();
    w->show();
    QPointer<EngineThreadWorker> worker = w->host()->worker();
    QThread* thread = worker->thread();
    w->openModel(big_model());
    QVERIFY(w->host()->isLoading());
    QElapsedTimer t;
    t.start();
    w->close();
    QVERIFY(thread->isFinished());  // closeEvent joined the worker thread
    w.reset();
    const qint64 ms = t.elapsed();
    qInfo("closed during a model load in %lld ms", ms);
    QVERIFY(worker.isNull());  // destroyed on its thread as the thread ended
    QVERIFY2(ms < 30000, qPrintable(QStringLiteral("closing took %1 ms").arg(ms)));
  }

  // Closing mid-workload (several sequences stepping, a chat streaming): the step loop stops at
  // the next step boundary, the thread ends, the worker (and the engine it owns) is destroyed.
  void closeMidWorkloadStopsWorkerThread() {
    auto w = std::make_unique<MainWindow>();
    w->show();
    w->openModel(small_model());
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->hasEngine(), kTimeoutMs);
    w->host()->setStepDelay(5);  // keeps it running for the whole test
    QVERIFY(w->workloadPanel()->run(QStringLiteral("pool-pressure")));
    w->chatPanel()->current()->send(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(w->host()->isRunning() && w->host()->latest() && w->host()->latest()->running > 0,
                             kTimeoutMs);
    QPointer<EngineThreadWorker> worker = w->host()->worker();
    QThread* thread = worker->thread();
    QVERIFY(thread->isRunning());
    QElapsedTimer t;
    t.start();
    w->close();
    QVERIFY(thread->isFinished());
    w.reset();
    const qint64 ms = t.elapsed();
    qInfo("closed mid-workload in %lld ms", ms);
    QVERIFY(worker.isNull());
    QVERIFY2(ms < 5000, qPrintable(QStringLiteral("closing took %1 ms").arg(ms)));
  }
};

QTEST_MAIN(TestLifecycle)
#include "test_lifecycle.moc"
