// The Lessons panel clicked through offscreen on stories260K: every lesson's title and steps are
// shown, its settings reach the engine (read back from the engine's own snapshot: KV dtype,
// window, sinks, allocator and its reservation policy, pool size), Step advances the engine by
// exactly one step and shows that step's captions, the panel to look at is raised and framed,
// Reset starts the lesson over, Previous / Next move, an invalid preset is refused the way the
// Settings panel refuses it, and --lesson N (showLesson before the model loads) works.
#include <QAction>
#include <QCheckBox>
#include <QLineEdit>
#include <QComboBox>
#include <QDockWidget>
#include <QLabel>
#include <QMenuBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QtTest>

#include "panels/block_map_panel.h"
#include "widgets/block_map_widget.h"
#include "panels/captions_panel.h"
#include "controls/compare_panel.h"
#include "gui_test_support.h"
#include "widgets/highlight_frame.h"
#include "lessons/lessons_panel.h"
#include "shell/main_window.h"
#include "panels/hybrid_state_panel.h"
#include "panels/latent_kv_panel.h"
#include "panels/no_cache_panel.h"
#include "controls/settings_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {
constexpr int kTimeoutMs = 60000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

// What each lesson must have set in the engine, as its snapshot reports it.
struct Expected {
  int lesson;
  const char* dtype;
  int window, sinks;
  bool contiguous;
  const char* reserve;  // the baseline's policy ("" when paged)
  int blocks;
  const char* lookAt;  // dock objectName or "blockMap"
};
const Expected kExpected[] = {
    {1, "f32", 0, 0, false, "", 256, "noCacheDock"},
    {2, "f32", 0, 0, false, "", 256, "plannerDock"},
    {3, "f32", 0, 0, true, "max-model-len", 256, "fragDock"},
    {4, "f32", 0, 0, true, "request", 256, "fragDock"},
    {5, "f32", 0, 0, false, "", 96, "blockMap"},
    {6, "f32", 0, 0, false, "", 64, "prefixDock"},
    {7, "f32", 64, 4, false, "", 256, "blockMap"},
    {8, "int8", 0, 0, false, "", 256, "compareDock"},
    {9, "f32", 0, 0, false, "", 256, "latentDock"},
    {10, "f32", 0, 0, false, "", 256, "hybridDock"},
};
}  // namespace

class TestLessons : public QObject {
  Q_OBJECT
  std::unique_ptr<MainWindow> w_;
  LessonsPanel* lessons_ = nullptr;

  void waitReady(int number) {
    QTRY_VERIFY_WITH_TIMEOUT(lessons_->isReady() && lessons_->lesson().number == number, kTimeoutMs);
  }

 private slots:
  void initTestCase() {
    test::start_gui_suite("lessons");
    w_ = std::make_unique<MainWindow>();
    w_->show();
    lessons_ = w_->lessonsPanel();
    QVERIFY(lessons_);
    // --lesson N: asked for before the model has loaded, applied once it has.
    QVERIFY(w_->showLesson(6));
    QVERIFY(!w_->showLesson(11));
    w_->openModel(model_path());
    waitReady(6);
    QVERIFY(w_->panelDock(QStringLiteral("lessonsDock"))->isVisible());
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->latest() && w_->host()->latest()->memory.blocks_total == 64, kTimeoutMs);
  }

  void helpMenuOpensTheLessons() {
    QDockWidget* dock = w_->panelDock(QStringLiteral("lessonsDock"));
    dock->hide();
    QAction* lessonsAction = nullptr;
    for (QAction* m : w_->menuBar()->actions())
      if (m->menu() && m->text() == QStringLiteral("&Help"))
        for (QAction* a : m->menu()->actions())
          if (a->text() == QStringLiteral("&Lessons")) lessonsAction = a;
    QVERIFY(lessonsAction);
    lessonsAction->trigger();
    QVERIFY(dock->isVisible());
  }

  // Every lesson, in order, through the Next button.
  void everyLessonAppliesStepsAndHighlights() {
    lessons_->showLesson(1);
    for (const Expected& e : kExpected) {
      if (e.lesson > 1) {
        QVERIFY(lessons_->nextButton()->isEnabled());
        QTest::mouseClick(lessons_->nextButton(), Qt::LeftButton);
      }
      waitReady(e.lesson);
      const Lesson* l = find_lesson(e.lesson);
      QVERIFY(l);
      QVERIFY2(
          lessons_->titleLabel()->text().contains(QStringLiteral("Lesson %1 of 10 · %2").arg(e.lesson).arg(l->title)),
          qPrintable(lessons_->titleLabel()->text()));
      QVERIFY(lessons_->stepsLabel()->text().contains(l->steps.front().toHtmlEscaped()));
      QCOMPARE(lessons_->previousButton()->isEnabled(), e.lesson > 1);
      QCOMPARE(lessons_->nextButton()->isEnabled(), e.lesson < 10);

      // The new engine's first snapshot says what it runs with.
      QTRY_VERIFY_WITH_TIMEOUT(
          w_->host()->latest() && w_->host()->latest()->step == 0 && w_->host()->latest()->kv_dtype == e.dtype,
          kTimeoutMs);
      const SnapshotPtr s0 = w_->host()->latest();
      QCOMPARE(s0->window, e.window);
      QCOMPARE(s0->sinks, e.sinks);
      QCOMPARE(s0->allocator.contiguous, e.contiguous);
      if (e.contiguous)
        QCOMPARE(QString::fromStdString(s0->allocator.reserve_policy), QString::fromLatin1(e.reserve));
      else
        QCOMPARE(s0->memory.blocks_total, e.blocks);
      QCOMPARE(w_->host()->modelInfo().config.kv_dtype, *parse_kv_dtype(e.dtype));

      // The panel to look at: raised (visible) and framed.
      QWidget* target = QString::fromLatin1(e.lookAt) == QLatin1String("blockMap")
                            ? static_cast<QWidget*>(w_->blockMapPanel())
                            : w_->panelDock(QString::fromLatin1(e.lookAt))->widget();
      QCOMPARE(lessons_->highlighted(), target);
      QVERIFY(target->isVisible());
      HighlightFrame* frame = HighlightFrame::on(target);
      QVERIFY(frame);
      QVERIFY(frame->isVisible());
      QCOMPARE(frame->size(), target->size());

      // Step: exactly one engine step, then the captions of what it did.
      QSignalSpy stepped(lessons_, &LessonsPanel::stepped);
      QTest::mouseClick(lessons_->stepButton(), Qt::LeftButton);
      QTRY_VERIFY_WITH_TIMEOUT(!stepped.isEmpty(), kTimeoutMs);
      QCOMPARE(stepped.at(0).at(0).toULongLong(), quint64(1));
      QCOMPARE(lessons_->lastSteppedTo(), quint64(1));
      QCOMPARE(w_->host()->latest()->step, quint64(1));
      QVERIFY(w_->host()->isPaused());
      QVERIFY2(!lessons_->lastCaptions().isEmpty(), "the first step of every scenario allocates blocks");
      QVERIFY(lessons_->captionLabel()->text().contains(QStringLiteral("Step 1 just happened")));
      QVERIFY(lessons_->captionLabel()->text().contains(lessons_->lastCaptions().front().toHtmlEscaped()));
      QVERIFY(w_->captionsPanel()->captionCount() > 0);  // the captions panel shows the same step
      QTRY_VERIFY(lessons_->engineLabel()->text().contains(QStringLiteral("KV %1").arg(QString::fromLatin1(e.dtype))));

      if (e.lesson == 1) {
        QTRY_VERIFY_WITH_TIMEOUT(!w_->noCachePanel()->isRunning() && !w_->noCachePanel()->points(1).empty(),
                                 kTimeoutMs);
      }
      if (e.lesson == 7) {
        // Enough steps for the window to drop blocks, marked on the map...
        for (int i = 0; i < 80; ++i) lessons_->step();
        QTRY_VERIFY_WITH_TIMEOUT(lessons_->lastSteppedTo() >= 81, kTimeoutMs);
        QTRY_VERIFY_WITH_TIMEOUT(w_->blockMapPanel()->map()->counts().dropped > 0, kTimeoutMs);
      }
      if (e.lesson == 8) {
        // ...and lesson 8's new engine (same pool size, no window) starts without those marks.
        QCOMPARE(w_->blockMapPanel()->map()->counts().dropped, 0);
        QCOMPARE(w_->comparePanel()->dtypeB()->currentData().toString(), QStringLiteral("kivi4"));
        QVERIFY(w_->comparePanel()->qualityRun()->isChecked());
      }
      if (e.lesson == 9) {
        // The Latent KV panel's two runs, every number from each engine: 4 layers x (64 latent + 16
        // RoPE) x 2 B against 4 layers x 2 x 4 KV heads x 32 x 2 B, so the same 512 KiB holds 51
        // blocks of the first and 16 of the second, and the prompt fills as many blocks in both.
        LatentKvPanel* p = w_->latentKvPanel();
        QTRY_VERIFY_WITH_TIMEOUT(!p->isRunning() && p->finished(), kTimeoutMs);
        QCOMPARE(p->lastSnapshot(LatentKvPanel::Latent)->memory.kv_bytes_per_token, int64_t{4 * 80 * 2});
        QCOMPARE(p->lastSnapshot(LatentKvPanel::Gqa)->memory.kv_bytes_per_token, int64_t{4 * 2 * 4 * 32 * 2});
        QVERIFY(p->cell(LatentKvPanel::Latent, LatentKvPanel::PerToken)->text().contains(QStringLiteral("640 B")));
        QVERIFY(p->cell(LatentKvPanel::Gqa, LatentKvPanel::PerToken)->text().contains(QStringLiteral("2,048 B")));
        QVERIFY(p->cell(LatentKvPanel::Latent, LatentKvPanel::RowFormula)
                    ->text()
                    .contains(QStringLiteral("64 latent + 16 RoPE key")));
        QVERIFY(p->cell(LatentKvPanel::Latent, LatentKvPanel::Pool)->text().contains(QStringLiteral("51 blocks")));
        QVERIFY(p->cell(LatentKvPanel::Gqa, LatentKvPanel::Pool)->text().contains(QStringLiteral("16 blocks")));
        QVERIFY(p->peakBlocks(LatentKvPanel::Latent) > 0);
        QCOMPARE(p->peakBlocks(LatentKvPanel::Latent), p->peakBlocks(LatentKvPanel::Gqa));
      }
      if (e.lesson == 10) {
        // The Hybrid state panel's two runs. By hand: qwen35's six Gated DeltaNet layers each keep
        // 4 value heads x 64 x 64 f32 plus 3 conv taps of 2 x 2 x 64 + 4 x 64 channels:
        // (16384 + 1536) x 4 B x 6 = 430,080 B per sequence; KV f16 is 2 layers x 2 x 2 heads x 32
        // x 2 B = 512 B per token against qwen3's 8 layers' 2,048 B: break-even at 430080 / 1536
        // = 280 tokens, and the measured curves (a point per 64-token chunk) cross at the first
        // point past it.
        HybridStatePanel* p = w_->hybridStatePanel();
        QTRY_VERIFY_WITH_TIMEOUT(!p->isRunning() && p->finished(), kTimeoutMs);
        QCOMPARE(p->lastSnapshot(HybridStatePanel::Hybrid)->state.bytes_per_slot, int64_t{430080});
        QCOMPARE(p->lastSnapshot(HybridStatePanel::Hybrid)->memory.kv_bytes_per_token, int64_t{512});
        QCOMPARE(p->lastSnapshot(HybridStatePanel::Dense)->memory.kv_bytes_per_token, int64_t{2048});
        QVERIFY(!p->lastSnapshot(HybridStatePanel::Dense)->state.on);
        QCOMPARE(p->breakEvenTokens(), int64_t{280});
        QCOMPARE(p->measuredCrossing(), int64_t{320});
        const auto& h = p->points(HybridStatePanel::Hybrid);
        const auto& d = p->points(HybridStatePanel::Dense);
        QVERIFY(h.size() >= 16 && d.size() >= 16);
        QCOMPARE(h.front().tokens, int64_t{64});
        QCOMPARE(h.front().state_bytes, int64_t{430080});  // the whole state from the first chunk on
        QVERIFY(h.front().total() > d.front().total());    // short: the hybrid holds more
        QVERIFY(h.back().total() < d.back().total());      // long: much less
        QVERIFY2(p->resultText().contains(QStringLiteral("Break-even: 280 tokens")), qPrintable(p->resultText()));
      }
    }
  }

  void resetStartsOverAndPreviousGoesBack() {
    waitReady(10);
    QTest::mouseClick(lessons_->previousButton(), Qt::LeftButton);
    waitReady(9);
    QTest::mouseClick(lessons_->previousButton(), Qt::LeftButton);
    waitReady(8);
    QTest::mouseClick(lessons_->previousButton(), Qt::LeftButton);
    waitReady(7);
    QCOMPARE(w_->comparePanel()->windowB()->text(), QStringLiteral("0"));
    QCOMPARE(lessons_->lastSteppedTo(), quint64(0));
    lessons_->step();
    lessons_->step();  // before the first one's snapshot came: two steps all the same
    QTRY_COMPARE_WITH_TIMEOUT(lessons_->lastSteppedTo(), quint64(2), kTimeoutMs);
    QCOMPARE(w_->host()->latest()->step, quint64(2));
    QTest::mouseClick(lessons_->resetButton(), Qt::LeftButton);
    waitReady(7);
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->latest()->step == 0 && w_->host()->latest()->window == 64, kTimeoutMs);
  }

  // An invalid preset goes through the Settings panel's rules and is refused there; the engine
  // that runs is left alone.
  void invalidPresetIsRefused() {
    waitReady(7);
    QSignalSpy loaded(w_->host(), &EngineHost::modelLoaded);
    QSignalSpy refused(lessons_, &LessonsPanel::refused);
    Lesson bad;
    bad.number = 99;
    bad.title = QStringLiteral("sinks without a window");
    bad.settings = {{QStringLiteral("sinks"), QStringLiteral("4")}};
    QVERIFY(!lessons_->applyLesson(bad));
    QCOMPARE(refused.count(), 1);
    QVERIFY2(lessons_->statusLabel()->text().contains(QStringLiteral("sinks need a sliding window")),
             qPrintable(lessons_->statusLabel()->text()));
    QVERIFY(!w_->settingsPanel()->applyButton()->isEnabled());
    QVERIFY(w_->settingsPanel()->fieldNote(QStringLiteral("sinks")).contains(QStringLiteral("sliding window")));
    QTest::qWait(300);
    QCOMPARE(loaded.count(), 0);
    QCOMPARE(w_->host()->modelInfo().config.window, 64);  // still lesson 7's engine

    bad.settings = {{QStringLiteral("baseline-reserve"), QStringLiteral("sometimes")}};
    QVERIFY(!lessons_->applyLesson(bad));
    QVERIFY(lessons_->statusLabel()->text().contains(QStringLiteral("baseline-reserve")));
  }

  void cleanupTestCase() { w_.reset(); }
};

QTEST_MAIN(TestLessons)
#include "test_lessons.moc"
