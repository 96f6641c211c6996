// The drawn prefix tree (offscreen): its layout on a known forest (and a cycle a broken source
// could send), the prefix panel fed by the real engine on stories260K with two requests that
// share a system prompt (node counts, hover text with the tokens, the live path drawn orange,
// then everything cached and evictable once they finish), a 16,384-block tree laid out and
// painted at far zoom as strips and at near zoom as nodes (times reported; the frame bench
// measures them), and the attach window's merged tree for a
// scripted two-instance ZMQ stream (node count, which instances hold which node).
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <QApplication>
#include <QElapsedTimer>
#include <QMouseEvent>
#include <QWheelEvent>
#include <QImage>
#include <QTabWidget>
#include <QtTest>
#include <time.h>

#include "attach/cache_view.h"
#include "attach/prefix_forest.h"
#include "attach_view/attach_window.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "gui_test_support.h"
#include "kv_events/kv_events_codec.h"
#include "panels/prefix_panel.h"
#include "attach_view/prefix_tree_attach_source.h"
#include "devtools/prefix_tree_bench.h"
#include "widgets/prefix_tree_widget.h"

using namespace kvscope;
using namespace kvscope::ui;
using KvHash = kvscope::kv_events::BlockHash;

namespace {

std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load((test::models_dir() / "stories260K.gguf").string());
  return m;
}

VocabPtr vocab_of(const Model& m) {
  auto v = std::make_shared<Vocab>();
  for (TokenId id = 0; id < m.tokenizer->n_vocab(); ++id)
    v->pieces.push_back(QString::fromStdString(m.tokenizer->token_to_piece(id, true)));
  return v;
}

std::vector<TokenId> tokens(int n, int salt) {
  std::vector<TokenId> t;
  for (int i = 0; i < n; ++i) t.push_back(10 + (i * 7 + salt * 31) % 480);
  return t;
}

PrefixTreeNode node(int parent, int refs = 1) {
  PrefixTreeNode n;
  n.parent = parent;
  n.refCount = refs;
  return n;
}

// Orange (live) pixels inside r of the widget's picture.
int live_pixels(PrefixTreeWidget* w, QRectF r) {
  const QImage img = w->grab().toImage();
  int n = 0;
  for (int y = static_cast<int>(r.top()) - 1; y <= static_cast<int>(r.bottom()) + 1; ++y)
    for (int x = static_cast<int>(r.left()) - 1; x <= static_cast<int>(r.right()) + 1; ++x) {
      if (!img.rect().contains(x, y)) continue;
      const QColor c = img.pixelColor(x, y);
      n += c.red() > 200 && c.green() > 110 && c.green() < 170 && c.blue() < 90;
    }
  return n;
}

double cpu_ms() {  // this thread's CPU time: the machine is shared
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int index_of_block(const PrefixTreeLayout& L, BlockId b) {
  for (int i = 0; i < L.size(); ++i)
    if (L.nodes()[static_cast<size_t>(i)].id == static_cast<uint64_t>(b)) return i;
  return -1;
}

}  // namespace

class TestPrefixTree : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { kvscope::test::start_gui_suite("prefix_tree"); }

  void layout_places_a_known_forest() {
    // 0 -> {1 -> {3, 4}, 2}; 5 alone; 6 <-> 7 a cycle; 8's parent out of range.
    std::vector<PrefixTreeNode> v = {node(-1), node(0), node(0), node(1), node(1),
                                     node(-1), node(7), node(6), node(99)};
    PrefixTreeLayout L;
    L.build(v);
    QCOMPARE(L.size(), 9);
    QCOMPARE(L.columns(), 3);
    QCOMPARE(L.depthOf(3), 2);
    QCOMPARE(L.rowOf(3), 0.0);
    QCOMPARE(L.rowOf(4), 1.0);
    QCOMPARE(L.rowOf(1), 0.5);  // centred on its children
    QCOMPARE(L.rowOf(2), 2.0);
    QCOMPARE(L.rowOf(0), 1.25);
    QCOMPARE(L.rowOf(5), 3.0);
    QCOMPARE(L.rows(), 6);                                            // leaves: 3, 4, 2, 5, the cycle's end, 8
    QVERIFY(L.nodes()[6].parent == -1 || L.nodes()[7].parent == -1);  // the cycle was cut
    QCOMPARE(L.nodes()[8].parent, -1);
    const auto r = L.rangeInColumn(0, 1.0, 3.5);  // roots 0 (1.25) and 5 (3.0)
    QCOMPARE(r.second - r.first, 2);
    QCOMPARE(L.nearestInColumn(2, 0.9), 4);
    QCOMPARE(L.nearestInColumn(7, 0.0), -1);
  }

  // The wheel zooms around the cursor (the node under it stays put), a drag pans by the mouse's
  // path, a double-click fits the whole tree again.
  void wheel_zooms_and_drag_pans() {
    PrefixTreeWidget w;
    w.resize(600, 300);
    w.show();
    w.setNodes(synthetic_prefix_forest(2000));
    const double fitted = w.zoom();
    const int i = 1000;
    const QPointF at = w.nodeRect(i).center();
    QWheelEvent wheel(at, w.mapToGlobal(at), QPoint(), QPoint(0, 240), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase,
                      false);
    QApplication::sendEvent(&w, &wheel);
    QCOMPARE(w.zoom(), fitted * 1.25 * 1.25);
    QVERIFY(std::abs(w.nodeRect(i).center().y() - at.y()) < 1.0);
    const QRectF before = w.nodeRect(i);
    auto mouse = [&](QEvent::Type t, QPointF p, Qt::MouseButtons b) {
      QMouseEvent e(t, p, w.mapToGlobal(p), Qt::LeftButton, b, Qt::NoModifier);
      QApplication::sendEvent(&w, &e);
    };
    mouse(QEvent::MouseButtonPress, QPointF(100, 100), Qt::LeftButton);
    mouse(QEvent::MouseMove, QPointF(130, 80), Qt::LeftButton);
    mouse(QEvent::MouseMove, QPointF(160, 60), Qt::LeftButton);
    mouse(QEvent::MouseButtonRelease, QPointF(160, 60), Qt::NoButton);
    QCOMPARE(w.nodeRect(i).topLeft(), before.topLeft() + QPointF(60, -40));
    w.setNodes(synthetic_prefix_forest(2000));  // a new snapshot keeps the user's view
    QCOMPARE(w.nodeRect(i).topLeft(), before.topLeft() + QPointF(60, -40));
    QMouseEvent dbl(QEvent::MouseButtonDblClick, QPointF(10, 10), w.mapToGlobal(QPointF(10, 10)), Qt::LeftButton,
                    Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &dbl);
    QCOMPARE(w.zoom(), fitted);
  }

  void engine_tree_of_two_requests_sharing_a_system_prompt() {
    EngineConfig cfg;
    cfg.block_size = 16;
    cfg.num_blocks = 64;
    auto m = stories();
    Engine e(m, std::make_unique<CpuBackend>(m, 1), cfg);
    ModelInfo info;
    info.vocab = vocab_of(*m);
    PrefixPanel panel;
    panel.resize(1000, 500);
    panel.show();
    panel.resetForEngine(info);
    auto feed = [&] { panel.showSnapshot(e.snapshot()); };
    // The system prompt: 2 full blocks. Each request adds 8 tokens of its own (3rd block, partial).
    const std::vector<TokenId> system = tokens(32, 0);
    auto request = [&](int salt) {
      Request r;
      r.prompt = system;
      const auto own = tokens(8, salt);
      r.prompt.insert(r.prompt.end(), own.begin(), own.end());
      r.max_new_tokens = 6;
      r.ignore_eos = true;
      return r;
    };
    const SeqId a = e.submit(request(1));
    while (e.sequence(a).num_computed < 40) {
      QVERIFY(e.step());
      feed();
    }
    const SeqId b = e.submit(request(2));
    while (e.sequence(b).num_computed < 40) {
      QVERIFY(e.step());
      feed();
    }
    panel.rebuildNow();
    const PrefixTreeLayout& L = panel.tree()->layout();
    // Two shared blocks (ref 2), one partial tail per request: 4 nodes, all on live paths.
    QCOMPARE(L.size(), 4);
    QCOMPARE(L.sharedCount(), 2);
    QCOMPARE(L.liveCount(), 4);
    QCOMPARE(L.columns(), 3);
    QCOMPARE(L.rows(), 2);
    QCOMPARE(L.evictableLeafCount(), 0);
    QVERIFY2(panel.treeCaption().startsWith(QStringLiteral("4 blocks · 2 shared")), qPrintable(panel.treeCaption()));
    QVERIFY(panel.countersText().contains(QStringLiteral("hit 32 tokens")));  // the numbers stay above the tree
    const SnapshotPtr s = e.snapshot();
    const BlockId first = e.snapshot()->seqs[0].block_table[0];
    const int i = index_of_block(L, first);
    QVERIFY(i >= 0);
    QCOMPARE(L.nodes()[static_cast<size_t>(i)].parent, -1);
    // Hover: the block's tokens as text, its hash, ref count and the hit B made on it.
    const QPointF centre = panel.tree()->nodeRect(i).center();
    QCOMPARE(panel.tree()->nodeAt(centre), i);
    const QString hover = panel.tree()->hoverText(panel.tree()->nodeAt(centre));
    const QString text = info.vocab->text(system.data(), 16);
    QVERIFY2(hover.contains(text), qPrintable(hover + " / " + text));
    QVERIFY2(hover.contains(QStringLiteral("ref count 2 · hits 1")), qPrintable(hover));
    QVERIFY2(hover.contains(QStringLiteral("hash %1").arg(
                 static_cast<qulonglong>(s->blocks[static_cast<size_t>(first)].hash), 16, 16, QLatin1Char('0'))),
             qPrintable(hover));
    QVERIFY(hover.contains(QStringLiteral("on a live request's path")));
    QVERIFY2(live_pixels(panel.tree(), panel.tree()->nodeRect(i)) > 20, "the live path is drawn orange");
    // Both finish: the shared blocks stay cached with ref 0 (the partial tails are freed).
    while (e.step()) feed();
    feed();
    panel.rebuildNow();
    const PrefixTreeLayout& after = panel.tree()->layout();
    QCOMPARE(after.size(), 2);
    QCOMPARE(after.liveCount(), 0);
    QCOMPARE(after.evictableLeafCount(), 1);
    const int j = index_of_block(after, first);
    QVERIFY(j >= 0);
    QVERIFY(panel.tree()->hoverText(j).contains(QStringLiteral("evictable")));
    QVERIFY(panel.tree()->hoverText(j).contains(text));  // remembered after its tables let go
    QCOMPARE(live_pixels(panel.tree(), panel.tree()->nodeRect(j)), 0);
  }

  void sixteen_k_blocks_lay_out_and_paint_within_a_frame() {
    // The same measurement `kvscope --frame-bench` reports (best of 3 on a shared machine).
    const QJsonObject m = measure_prefix_tree(16384, 3, 1000, 420);
    auto ms = [&](const char* k) { return m[QLatin1String(k)].toDouble(); };
    const int strips = m[QStringLiteral("far_strips")].toInt(), nodes = m[QStringLiteral("near_nodes")].toInt();
    qInfo(
        "16,384 blocks: layout + far frame %.2f ms wall / %.2f ms UI-thread CPU (%d strips), near frame %.2f / %.2f ms (%d nodes)",
        ms("layout_and_far_frame_ms"), ms("layout_and_far_frame_cpu_ms"), strips, ms("near_frame_ms"),
        ms("near_frame_cpu_ms"), nodes);
    QCOMPARE(m[QStringLiteral("blocks")].toInt(), 16384);
    QVERIFY(m[QStringLiteral("far_draws_strips")].toBool());
    // At most one rectangle per pixel row of each of the 32 columns: far fewer than the blocks.
    QVERIFY2(strips <= 420 * 32 && strips < 16384 / 2, qPrintable(QString::number(strips)));
    QVERIFY2(nodes > 50, qPrintable(QString::number(nodes)));
    // The times are reported, not asserted (speed belongs to `kvscope --frame-bench`, whose JSON
    // docs/window-and-lessons.md quotes): a sanitizer tree or a loaded machine would fail any
    // bound set here.
    // What is asserted is why it is fast: the far view draws strips, not one rectangle per block.
  }

  // 8 instances x 12,500 blocks: the session thread lays the merged tree out for every picture
  // (4 a second), so it should cost well under the 250 ms between pictures (reported here; the
  // frame bench measures it); the UI thread only takes the finished layout and paints the
  // visible part. Asserted: the layout holds every node and marks the fleet-wide ones shared.
  void merged_tree_of_a_100k_fleet() {
    using namespace kvscope::kv_events;
    std::vector<attach::CacheView> views(8);
    for (size_t i = 0; i < views.size(); ++i) {
      KvEventBatch b;
      b.ts = 1;
      for (int chain = 0; chain < 500; ++chain) {  // 500 chains of 25 blocks, the first 5 fleet-wide
        KvBlockStored s;
        for (int k = 0; k < 25; ++k)
          s.block_hashes.push_back(
              KvHash(k < 5 ? 1000000ull * (chain + 1) + k : (i + 1) * 100000000ull + chain * 100 + k));
        s.token_ids.assign(16 * 25, 7);
        s.medium = "GPU";
        b.events.push_back(std::move(s));
      }
      views[i].apply(b);
    }
    std::vector<const attach::CacheView*> ptrs;
    for (const auto& v : views) ptrs.push_back(&v);
    const attach::MergedTree merged = attach::merge_trees(ptrs);
    QElapsedTimer t;
    t.start();
    const double cpu0 = cpu_ms();
    const auto layout = merged_tree_layout(merged, ptrs);
    const double layoutMs = t.nsecsElapsed() / 1e6, layoutCpu = cpu_ms() - cpu0;
    QCOMPARE(layout->size(), 500 * 5 + 8 * 500 * 20);
    QCOMPARE(layout->sharedCount(), 500 * 5);
    PrefixTreeWidget w;
    w.resize(1000, 600);
    QPixmap pm(1000, 600);
    t.start();
    w.setTree(layout);
    w.render(&pm);
    const double frameMs = t.nsecsElapsed() / 1e6;
    qInfo(
        "merged tree of 8 x 12,500 blocks: layout %.1f ms wall / %.1f ms CPU (session thread), take + far frame %.2f ms (UI thread)",
        layoutMs, layoutCpu, frameMs);
  }

  void attach_window_shows_the_merged_tree_of_two_instances() {
    using namespace kvscope::kv_events;
    zmq::context_t ctx(1);
    zmq::socket_t pub0(ctx, zmq::socket_type::pub), pub1(ctx, zmq::socket_type::pub);
    pub0.bind("tcp://127.0.0.1:*");
    pub1.bind("tcp://127.0.0.1:*");
    const QString ep0 = QString::fromStdString(pub0.get(zmq::sockopt::last_endpoint));
    const QString ep1 = QString::fromStdString(pub1.get(zmq::sockopt::last_endpoint));
    AttachWindow w(parse_attach_lines({ep0, ep1}, 1, QStringLiteral("kv")));
    w.resize(1000, 700);
    w.show();
    auto stored = [](std::vector<KvHash> hs, std::optional<KvHash> parent) {
      KvBlockStored s;
      s.block_hashes = std::move(hs);
      s.parent_block_hash = parent;
      s.token_ids.resize(16 * s.block_hashes.size());
      for (size_t i = 0; i < s.token_ids.size(); ++i)
        s.token_ids[i] = static_cast<int64_t>(i + 100 * s.block_hashes[0].bits());
      s.medium = "GPU";
      return s;
    };
    // Instance 0 caches the chain 1 -> 2 -> 3, instance 1 the chain 1 -> 2 -> 4.
    const KvEventBatch b0{1, {stored({1, 2, 3}, std::nullopt)}, 0};
    const KvEventBatch b1{1, {stored({1, 2}, std::nullopt), stored({4}, KvHash(2))}, 0};
    auto send = [](zmq::socket_t& pub, const KvEventBatch& b) {
      const std::string sq = encode_sequence_number(0), payload = encode_kv_event_batch(b);
      std::vector<zmq::const_buffer> f = {zmq::buffer(std::string_view("kv")), zmq::buffer(sq), zmq::buffer(payload)};
      zmq::send_multipart(pub, f);
    };
    // Until the subscriptions reach the publishers their messages are dropped: resend.
    QTRY_VERIFY_WITH_TIMEOUT((send(pub0, b0), send(pub1, b1), w.mergedTree()->layout().size() == 4), 15000);
    const PrefixTreeLayout& L = w.mergedTree()->layout();
    QCOMPARE(L.sharedCount(), 2);  // blocks 1 and 2 on both instances
    QCOMPARE(L.columns(), 3);
    QCOMPARE(L.rows(), 2);
    std::map<uint64_t, uint32_t> mask;
    for (const PrefixTreeNode& n : L.nodes()) mask[n.id] = n.instances;
    QCOMPARE(mask[1], 3u);
    QCOMPARE(mask[2], 3u);
    QCOMPARE(mask[3], 1u);
    QCOMPARE(mask[4], 2u);
    int four = -1;
    for (int i = 0; i < L.size(); ++i)
      if (L.nodes()[static_cast<size_t>(i)].id == 4) four = i;
    QCOMPARE(L.nodes()[static_cast<size_t>(L.nodes()[static_cast<size_t>(four)].parent)].id, uint64_t(2));
    const QString hover = w.mergedTree()->hoverText(four);
    QVERIFY2(hover.contains(QStringLiteral("cached on 1 instance(s): %1 rank 0").arg(ep1)), qPrintable(hover));
    QVERIFY2(hover.contains(QStringLiteral("[400 401 402")), qPrintable(hover));
    auto* tabs = w.findChild<QTabWidget*>(QStringLiteral("attachTabs"));
    QVERIFY(tabs);
    tabs->setCurrentWidget(w.mergedTree());
    QVERIFY(w.mergedTree()->isVisible());
    // Its picture, for docs/window-and-lessons.md (docs/screenshots/attach-merged-tree.png is a copy).
    QVERIFY(w.grab().save(QString::fromStdString((test::tmp_dir() / "attach-merged-tree.png").string())));
  }
};

QTEST_MAIN(TestPrefixTree)
#include "test_prefix_tree.moc"
