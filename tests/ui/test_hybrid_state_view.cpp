// A hybrid recurrent model (a synthetic qwen35: three Gated DeltaNet layers, one attention
// layer) in the real window, offscreen: the block map's state strip shows each running
// sequence's slot in its colour and the checkpoints held, the prefix tree marks the blocks whose
// end a checkpoint saved (the same blocks the engine's checkpoints key on), and the memory panel
// keeps the fixed per-sequence state apart from the per-token KV. A plain model hides all three.
#include <QtTest>
#include <set>

#include "gui_test_support.h"
#include "hybrid_models.h"
#include "model/synthetic_model.h"
#include "panels/block_map_panel.h"
#include "panels/memory_panel.h"
#include "panels/prefix_panel.h"
#include "shell/main_window.h"
#include "test_support.h"
#include "widgets/live_label.h"
#include "widgets/prefix_tree_widget.h"
#include "widgets/state_strip_widget.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 120000;

QString qwen35_model() {
  const auto path = test::tmp_dir() / "ui-hybrid-state-qwen35.gguf";
  write_synthetic_model(test::hybrid_spec("qwen35"), path.string());
  return QString::fromStdString(path.string());
}

Request request(const std::vector<TokenId>& prompt, const char* label) {
  Request r;
  r.prompt = prompt;
  r.max_new_tokens = 4;
  r.ignore_eos = true;
  r.label = label;
  return r;
}

}  // namespace

class TestHybridStateView : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::start_gui_suite("hybrid-state-view"); }

  void stateStripCheckpointsAndMemorySplit() {
    MainWindow w;
    w.resize(1400, 900);
    w.show();
    w.openModel(qwen35_model());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    StateStripWidget* strip = w.blockMapPanel()->stateStrip();
    // Every snapshot the window got: which sequences the strip showed holding a slot.
    std::set<SeqId> shownOwners;
    connect(w.host(), &EngineHost::snapshot, this, [&](const SnapshotPtr&, const EventBatch&) {
      for (SeqId id : strip->slotOwners())
        if (id >= 0) shownOwners.insert(id);
    });
    w.host()->setEveryStep(true);

    // Two prompts of 150 tokens sharing the first 140: the first leaves a checkpoint at 128
    // (every:8 blocks of 16), the second restores it.
    std::vector<TokenId> a = test::token_ids(150, 5), b = a;
    for (size_t i = 140; i < b.size(); ++i) b[i] = (b[i] + 7) % 290 + 5;
    w.host()->submit(request(a, "first"));
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest() && w.host()->latest()->counters.requests_finished == 1, kTimeoutMs);
    w.host()->submit(request(b, "second"));
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest()->counters.requests_finished == 2, kTimeoutMs);
    const SnapshotPtr snap = w.host()->latest();
    QVERIFY(snap->state.on);

    QVERIFY(strip->isVisible());
    QCOMPARE(static_cast<int>(strip->slotOwners().size()), snap->state.slots_total);
    QCOMPARE(shownOwners.size(), size_t{2});  // each request held a slot while it ran
    QCOMPARE(strip->checkpointSlots(), snap->state.checkpoints_total);
    QVERIFY(strip->checkpointsHeld() >= 1);
    QCOMPARE(strip->checkpointsHeld(), snap->state.checkpoints_used);
    QVERIFY2(strip->caption().contains(QStringLiteral("per sequence")), qPrintable(strip->caption()));
    const SeqSnap* second = nullptr;
    for (const SeqSnap& q : snap->seqs)
      if (q.label == "second") second = &q;
    QVERIFY(second);
    QCOMPARE(second->cached_prompt_tokens, 128);  // the hit ended at the checkpoint

    // The prefix tree: a diamond on each block a ready checkpoint ends on, at its depth.
    w.prefixPanel()->show();
    w.prefixPanel()->rebuildNow();
    const PrefixTreeLayout& L = w.prefixPanel()->tree()->layout();
    std::multiset<int> checkpointBlocks;
    for (const StateSnap::Checkpoint& c : snap->state.checkpoints) checkpointBlocks.insert(c.tokens / snap->block_size);
    QVERIFY(L.checkpointCount() >= 1);
    for (int i = 0; i < L.size(); ++i)
      if (L.nodes()[static_cast<size_t>(i)].checkpoint)
        QVERIFY2(checkpointBlocks.contains(L.depthOf(i) + 1), qPrintable(QString::number(L.depthOf(i))));
    QVERIFY(checkpointBlocks.contains(8));
    QVERIFY2(w.prefixPanel()->treeCaption().contains(QStringLiteral("state checkpoint was saved")),
             qPrintable(w.prefixPanel()->treeCaption()));

    // The memory panel: the state per sequence apart from the KV per token.
    LiveLabel* line = w.memoryPanel()->stateLine();
    QVERIFY(!line->isHidden());
    QVERIFY2(line->plainText().contains(QStringLiteral("Fixed per sequence")), qPrintable(line->plainText()));
    QVERIFY2(line->plainText().contains(QStringLiteral("per token: %1 tokens × %2 B")
                                            .arg(snap->memory.slots_filled)
                                            .arg(snap->memory.kv_bytes_per_token)),
             qPrintable(line->plainText()));

    // A model without recurrent layers hides them again.
    w.openModel(QString::fromStdString((test::models_dir() / "stories260K.gguf").string()));
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine() && w.host()->modelInfo().modelConfig.arch != "qwen35", kTimeoutMs);
    w.host()->submit(request(test::token_ids(20, 5), "plain"));
    QTRY_VERIFY_WITH_TIMEOUT(
        w.host()->latest() && !w.host()->latest()->state.on && w.host()->latest()->counters.requests_finished == 1,
        kTimeoutMs);
    QTRY_VERIFY(strip->isHidden());
    QTRY_VERIFY(line->isHidden());
  }
};

QTEST_MAIN(TestHybridStateView)
#include "test_hybrid_state_view.moc"
