// The attach window: the block map fed a fleet-sized picture (8 instances, 100,000 cached
// blocks) and the memory-over-time plots fed 8 full timelines lay out and paint a frame with
// the bands and point counts the picture implies (the frame time is printed: docs/attach.md's
// numbers, measured on a quiet machine; never asserted here); a scripted two-rank engine on loopback (ZMQ XPUB sockets
// and a /metrics served by cpp-httplib) must show up in the plots and the sharing panel with the
// counts the script implies; the window opens on a silent endpoint with its honest header; the
// dialog's instance lines parse and bad ones are refused with a reason; a recording (kvscope-cli
// attach --record) plays back under the scrubber with the counts of its time, and a damaged
// or missing one shows its reason in the window.
#include <QApplication>
#include <QElapsedTimer>
#include <QLabel>
#include <QPixmap>
#include <QSlider>
#include <QTabWidget>
#include <QToolButton>
#include <QtTest>

#include <httplib.h>
#include <qcustomplot.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <chrono>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "attach/event_recording.h"
#include "attach/instance_timeline.h"
#include "attach_view/attach_block_map.h"
#include "attach_view/attach_overlap_panel.h"
#include "attach_view/attach_timeline_panel.h"
#include "attach_view/attach_window.h"
#include "attach_view/recording_scrubber.h"
#include "gui_test_support.h"
#include "test_support.h"
#include "kv_events/kv_events_codec.h"

using namespace kvscope::ui;
namespace kve = kvscope::kv_events;

namespace {

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

kve::KvBlockStored stored(std::vector<kve::BlockHash> hs, std::optional<kve::BlockHash> parent) {
  kve::KvBlockStored s;
  s.block_hashes = std::move(hs);
  s.parent_block_hash = parent;
  s.block_size = 16;
  s.token_ids.resize(16 * s.block_hashes.size(), 7);
  return s;
}

// Two data-parallel ranks of one scripted engine on ports base and base + 1. XPUB sockets tell
// when the window's SUB has subscribed, so no batch is lost to ZeroMQ's slow joiner.
struct ScriptedRanks {
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<zmq::socket_t>> pubs;
  int base = 0;
  int64_t seq[2] = {0, 0};
  bool bind() {
    std::mt19937 rng(static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
    for (int tries = 0; tries < 50; ++tries) {
      const int p = 20000 + static_cast<int>(rng() % 30000);
      try {
        pubs.clear();
        for (int r = 0; r < 2; ++r) {
          pubs.push_back(std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::xpub));
          pubs.back()->bind("tcp://127.0.0.1:" + std::to_string(p + r));
        }
        base = p;
        return true;
      } catch (const zmq::error_t&) {}
    }
    return false;
  }
  bool subscribed(int rank, int ms) {
    zmq::pollitem_t item{pubs[rank]->handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(ms)) <= 0) return false;
    zmq::message_t m;
    return pubs[rank]->recv(m) && m.size() >= 1 && static_cast<const char*>(m.data())[0] == 1;
  }
  void publish(int rank, std::vector<kve::KvEvent> events) {
    const std::string payload = kve::encode_kv_event_batch({unix_now(), std::move(events), rank});
    const std::string sq = kve::encode_sequence_number(seq[rank]++);
    std::vector<zmq::const_buffer> f = {zmq::buffer(std::string_view("")), zmq::buffer(sq), zmq::buffer(payload)};
    zmq::send_multipart(*pubs[rank], f);
  }
};

// A vLLM-like /metrics whose numbers the test changes.
struct ScriptedMetrics {
  httplib::Server svr;
  std::thread thread;
  std::mutex mu;
  std::string text;
  int port = 0;
  void set(double usage, int hits, int queries, int preemptions) {
    std::lock_guard<std::mutex> l(mu);
    text = "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine=\"0\"} " + std::to_string(usage) +
           "\nvllm:prefix_cache_hits_total{engine=\"0\"} " + std::to_string(hits) +
           "\nvllm:prefix_cache_queries_total{engine=\"0\"} " + std::to_string(queries) +
           "\nvllm:num_preemptions_total{engine=\"0\"} " + std::to_string(preemptions) + "\n";
  }
  void start() {
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu);
      res.set_content(text, "text/plain; version=0.0.4");
    });
    port = svr.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { svr.listen_after_bind(); });
  }
  ~ScriptedMetrics() {
    svr.stop();
    if (thread.joinable()) thread.join();
  }
};

// A recording as `kvscope-cli attach --record` writes one: two ranks over 10 s. Rank 0 stores
// A1 A2 at 1 s, B1 B2 B3 at 3 s, drops A2 at 6 s; rank 1 stores A1 A2 at 2 s and C1 at 8 s.
std::string write_recording(const std::string& name) {
  const std::string path = (kvscope::test::tmp_dir() / name).string();
  const double t0 = 1700000000;
  kvscope::attach::EventRecorder rec(path);
  rec.begin({{"tcp://gpu-a:5557", "", "", 0, 0}, {"tcp://gpu-a:5558", "", "", 1, 0}}, t0);
  int64_t seq[2] = {0, 0};
  const auto send = [&](size_t rank, double t, std::vector<kve::KvEvent> ev) {
    rec.message(rank,
                {"", kve::encode_sequence_number(seq[rank]++),
                 kve::encode_kv_event_batch({t0 + t - 0.01, std::move(ev), static_cast<int>(rank)})},
                t0 + t);
  };
  send(0, 1, {stored({11, 12}, std::nullopt)});
  send(1, 2, {stored({11, 12}, std::nullopt)});
  send(0, 3, {stored({21, 22, 23}, 12)});
  send(0, 6, {kve::KvBlockRemoved{{23}, "GPU", std::nullopt}});
  send(1, 8, {stored({31}, 12)});
  send(1, 10, {});
  rec.flush();
  return path;
}

}  // namespace

class TestAttachWindow : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { kvscope::test::start_gui_suite("attach_window"); }

  void fleet_of_100k_blocks_paints_a_frame() {
    auto pic = std::make_shared<AttachPicture>();
    for (int i = 0; i < 8; ++i) {
      AttachInstancePicture ip;
      ip.endpoint = QStringLiteral("tcp://node-%1:5557").arg(i);
      for (int b = 0; b < 12500; ++b) {
        AttachCell c;
        c.medium = b < 2500 ? QStringLiteral("CPU") : QStringLiteral("GPU");  // sorted by tier, as pictures are
        c.hash = QString::number(b);
        c.root_key = static_cast<uint64_t>(b / 20);
        c.depth = b % 20 + 1;
        c.tokens = 16;
        ip.cells.push_back(c);
      }
      pic->instances.push_back(std::move(ip));
    }
    AttachBlockMap map;
    map.resize(1200, 800);
    QPixmap pm(1200, 800);
    double ms = 1e9;
    for (int rep = 0; rep < 3; ++rep) {  // the best of 3: a shared, loaded machine
      QElapsedTimer t;
      t.start();
      map.setPicture(pic);
      map.render(&pm, QPoint(), QRegion(0, 0, 1200, 800));  // one visible frame
      ms = std::min(ms, t.nsecsElapsed() / 1e6);
    }
    qInfo("8 instances, 100,000 blocks: layout + one frame in %.2f ms", ms);
    QCOMPARE(map.bands(), 16);  // 8 instances x (GPU, CPU)
    // The time is reported, not asserted: speed is a benchmark's job (a loaded machine or a
    // sanitizer build would fail a budget without anything being wrong).
  }

  void scripted_two_ranks_fill_the_plots_and_the_sharing_panel() {
    ScriptedRanks pub;
    QVERIFY(pub.bind());
    ScriptedMetrics metrics;
    metrics.set(0.25, 100, 200, 3);  // before the attach: only a baseline
    metrics.start();
    AttachWindow w(parse_attach_lines(
        {QStringLiteral("tcp://127.0.0.1:%1 metrics http://127.0.0.1:%2/metrics").arg(pub.base).arg(metrics.port)}, 2,
        QString()));
    w.show();
    w.tabs()->setCurrentIndex(1);
    QVERIFY(pub.subscribed(0, 30000));
    QVERIFY(pub.subscribed(1, 30000));
    // Both ranks cache the shared prefix A1 A2; rank 0 then B1, rank 1 C1 C2.
    pub.publish(0, {stored({11, 12}, std::nullopt), stored({21}, 12)});
    pub.publish(1, {stored({11, 12}, std::nullopt), stored({31, 32}, 12)});
    auto pic = [&] { return w.picture(); };
    QTRY_VERIFY_WITH_TIMEOUT(pic() && pic()->instances.size() == 2 && pic()->instances[0].cells.size() == 3 &&
                                 pic()->instances[1].cells.size() == 4,
                             30000);
    AttachOverlapPanel* o = w.overlapPanel();
    QCOMPARE(o->holderBars(), (std::vector<double>{3, 2}));  // B1 C1 C2 on one rank, A1 A2 on both
    QCOMPARE(o->uniqueBars(), (std::vector<double>{1, 2}));
    QCOMPARE(o->sharedBars(), (std::vector<double>{2, 2}));
    QVERIFY2(o->numbersText().contains(QStringLiteral("<b>2</b> prefixes on 2+ instances")),
             qPrintable(o->numbersText()));
    QVERIFY(o->numbersText().contains(QStringLiteral("<b>2</b> blocks (<b>32</b> tokens) cached more than once")));
    QVERIFY(o->numbersText().contains(QStringLiteral("<b>28.6%</b> of the cached blocks")));  // 2 of 7 copies

    // The baseline must have been scraped before the counters move (the scraper starts with the
    // window, but on a loaded machine its first answer may come late).
    QTRY_VERIFY_WITH_TIMEOUT(pic()->instances[0].timeline_summary.usage_last == 0.25, 30000);
    // The engine's counters move: 30 hits in 40 lookups, one preemption; then rank 0 evicts B1.
    metrics.set(0.5, 130, 240, 4);
    QTRY_VERIFY_WITH_TIMEOUT(pic()->instances[0].timeline_summary.preemptions == 1, 30000);
    pub.publish(0, {kve::KvBlockRemoved{{21}, "GPU", std::nullopt}});
    QTRY_VERIFY_WITH_TIMEOUT(pic()->instances[0].cells.size() == 2, 30000);
    AttachTimelinePanel* t = w.timelinePanel();
    using S = AttachTimelinePanel::Series;
    const auto shown = pic();
    for (size_t i = 0; i < 2; ++i) {
      const auto& ip = shown->instances[i];
      const auto& sum = ip.timeline_summary;
      int with_usage = 0, with_hits = 0, with_lag = 0;
      for (const auto& x : ip.timeline)
        with_usage += !std::isnan(x.usage), with_hits += !std::isnan(x.hit_rate()), with_lag += !std::isnan(x.lag_s());
      qInfo("instance %zu: %zu samples, %d with usage, %d with a hit rate, %d with lag; %llu live events, lag %.4f s",
            i, ip.timeline.size(), with_usage, with_hits, with_lag, static_cast<unsigned long long>(sum.live_events),
            sum.lag_s_mean);
      QVERIFY(ip.timeline.size() >= 4);
      QCOMPARE(t->pointCount(i, S::CachedBlocks), static_cast<int>(ip.timeline.size()));
      QCOMPARE(t->pointCount(i, S::EventsPerS), static_cast<int>(ip.timeline.size()));
      QCOMPARE(t->pointCount(i, S::Usage), with_usage);
      QVERIFY(with_usage >= 2);
      QCOMPARE(t->pointCount(i, S::HitRate), with_hits);
      QCOMPARE(with_hits, 1);  // one scrape saw lookups; the others none (a gap, not 0%)
      QCOMPARE(t->pointCount(i, S::Lag), with_lag);
      QVERIFY(with_lag >= 1);
      QCOMPARE(t->pointCount(i, S::Preemptions), 1);  // both ranks share the endpoint's /metrics
      QCOMPARE(sum.hit_rate, 0.75);
      QCOMPARE(sum.usage_peak, 0.5);
      QCOMPARE(sum.live_events, i == 0 ? uint64_t(3) : uint64_t(2));
      QCOMPARE(sum.cached_blocks_last, i == 0 ? uint64_t(2) : uint64_t(4));
      QCOMPARE(sum.cached_blocks_peak, i == 0 ? uint64_t(3) : uint64_t(4));
    }
    QCOMPARE(o->holderBars(), (std::vector<double>{2, 2}));
    QCOMPARE(o->uniqueBars(), (std::vector<double>{0, 2}));
  }

  void fleet_timelines_plot_a_frame() {
    // 8 instances after a long attach: each timeline thinned to its cap, with metrics.
    auto pic = std::make_shared<AttachPicture>();
    kvscope::attach::ScrapeStats m;
    m.url = "http://x/metrics";
    for (int i = 0; i < 8; ++i) {
      kvscope::attach::InstanceTimeline tl;
      for (int k = 0; k < 20000; ++k) {
        m.ok = static_cast<uint64_t>(k / 4 + 1);
        m.values = {{"kv_cache_usage_perc", 0.5 + 0.4 * std::sin(k / 300.0 + i)},
                    {"prefix_cache_hits_total", k * 3.0},
                    {"prefix_cache_queries_total", k * 5.0},
                    {"num_preemptions_total", static_cast<double>(k / 1000)}};
        tl.add({1000 + 0.25 * k, static_cast<uint64_t>(12500 + 2000 * std::sin(k / 500.0)),
                static_cast<uint64_t>(k) * 40, static_cast<uint64_t>(k) * 4, k * 0.004, &m});
      }
      AttachInstancePicture ip;
      ip.endpoint = QStringLiteral("tcp://node-%1:5557").arg(i);
      ip.timeline = tl.samples();
      ip.timeline_summary = tl.summary();
      pic->instances.push_back(std::move(ip));
    }
    QVERIFY(pic->instances[0].timeline.size() <= 480);
    AttachTimelinePanel panel;
    panel.resize(1200, 800);
    QPixmap pm(1200, 800);
    panel.setPicture(pic);  // a first frame: fonts and buffers are set up once, not per frame
    panel.replotNow();
    panel.render(&pm, QPoint(), QRegion(0, 0, 1200, 800));
    double ms = 1e9;
    for (int rep = 0; rep < 5; ++rep) {  // the best of 5: a shared, loaded machine
      for (auto& ip : pic->instances) ip.timeline_revision = static_cast<uint64_t>(rep + 2);  // new data: all redrawn
      QElapsedTimer t;
      t.start();
      panel.setPicture(pic);
      panel.replotNow();
      panel.render(&pm, QPoint(), QRegion(0, 0, 1200, 800));
      ms = std::min(ms, t.nsecsElapsed() / 1e6);
    }
    qInfo("8 instances x %zu samples: data + replot + one frame in %.2f ms", pic->instances[0].timeline.size(), ms);
    QCOMPARE(panel.instances(), size_t(8));
    QCOMPARE(panel.pointCount(7, AttachTimelinePanel::Series::CachedBlocks),
             static_cast<int>(pic->instances[7].timeline.size()));
    QVERIFY(panel.pointCount(7, AttachTimelinePanel::Series::Preemptions) >= 10);
    // Reported, not asserted (see the block map's case above).
    // A user's zoom stops following: new data no longer moves the view, until Follow is ticked.
    QCPAxis* x = panel.plot()->axisRect()->axis(QCPAxis::atBottom);
    QVERIFY(panel.followBox()->isChecked());
    x->setRange(10, 20);
    QVERIFY(!panel.followBox()->isChecked());
    for (auto& ip : pic->instances) ip.timeline_revision = 100;
    panel.setPicture(pic);
    QCOMPARE(x->range().lower, 10.0);
    panel.followBox()->setChecked(true);
    QCOMPARE(x->range().lower, 0.0);
  }

  void window_has_the_honest_header_and_survives_a_silent_endpoint() {
    AttachTargets t = parse_attach_lines({QStringLiteral("tcp://127.0.0.1:1 replay tcp://127.0.0.1:2")}, 2, QString());
    QCOMPARE(t.specs.size(), size_t(2));
    AttachWindow w(std::move(t));
    w.show();
    auto* header = w.findChild<QLabel*>(QStringLiteral("attachHonestHeader"));
    QVERIFY(header);
    QVERIFY(header->text().contains(QStringLiteral("physical block ids")));
    QVERIFY(header->text().contains(QStringLiteral("per-request block tables")));
    QTRY_VERIFY_WITH_TIMEOUT(w.picture() != nullptr, 30000);  // replay times out, the loop goes on
    QCOMPARE(w.picture()->instances.size(), size_t(2));
  }

  void recording_plays_back_under_the_scrubber() {
    AttachWindow w(QString::fromStdString(write_recording("attach-window-recording.jsonl")));
    w.resize(1000, 700);
    w.show();
    RecordingScrubber* sc = w.scrubber();
    QVERIFY(sc);
    // Read on the session's thread; the first picture is the whole recording.
    QTRY_VERIFY_WITH_TIMEOUT(w.picture() && w.pictureSeconds() == 10.0, 30000);
    QCOMPARE(sc->span(), 10.0);
    auto cells = [&](size_t i) { return w.picture()->instances.at(i).cells.size(); };
    QCOMPARE(cells(0), size_t(4));  // A1 A2 B1 B2 (B3 dropped)
    QCOMPARE(cells(1), size_t(3));  // A1 A2 C1
    QVERIFY2(w.blockMap()->bandTitle(0).contains(QStringLiteral("· 4 blocks")), qPrintable(w.blockMap()->bandTitle(0)));

    // Back to 4.5 s: rank 0 has A1 A2 B1 B2 B3, rank 1 A1 A2; the panels say so.
    sc->seekTo(4.5);
    QTRY_VERIFY_WITH_TIMEOUT(w.pictureSeconds() == 4.5, 30000);
    QCOMPARE(cells(0), size_t(5));
    QCOMPARE(cells(1), size_t(2));
    QVERIFY(w.blockMap()->bandTitle(0).contains(QStringLiteral("· 5 blocks")));
    QVERIFY(w.blockMap()->bandTitle(1).contains(QStringLiteral("· 2 blocks")));
    QCOMPARE(w.overlapPanel()->holderBars(), (std::vector<double>{3, 2}));  // B1 B2 B3 on one, A1 A2 on both
    QCOMPARE(w.picture()->instances[0].timeline_summary.cached_blocks_last, uint64_t(5));
    const int points_early = w.timelinePanel()->pointCount(0, AttachTimelinePanel::Series::CachedBlocks);
    QVERIFY(w.statsLabel()->text().contains(QStringLiteral("5 blocks")));

    // The slider itself (a user's drag): 1.5 s, before rank 1 stored anything.
    sc->slider()->setValue(sc->slider()->maximum() * 15 / 100);
    QTRY_VERIFY_WITH_TIMEOUT(std::abs(w.pictureSeconds() - 1.5) < 1e-9, 30000);
    QCOMPARE(cells(0), size_t(2));
    QCOMPARE(cells(1), size_t(0));
    QCOMPARE(w.overlapPanel()->holderBars(), (std::vector<double>{2, 0}));
    QVERIFY(w.timelinePanel()->pointCount(0, AttachTimelinePanel::Series::CachedBlocks) < points_early);

    // Play at 60x from 7 s: it runs to the end by itself and stops there.
    sc->seekTo(7);
    sc->setSpeed(60);
    sc->setPlaying(true);
    QTRY_VERIFY_WITH_TIMEOUT(!sc->playing() && w.pictureSeconds() == 10.0, 30000);
    QCOMPARE(cells(1), size_t(3));
    QCOMPARE(sc->playButton()->text(), QStringLiteral("Play"));
    QPixmap shot = w.grab();
    QVERIFY(!shot.isNull());
  }

  void damaged_or_missing_recordings_show_why() {
    const std::string good = write_recording("attach-window-damaged.jsonl");
    {
      std::ofstream f(good, std::ios::app);
      f << "{\"t\":1700000011,\"i\":7,\"msg\":[]}\n";  // line 8: an instance the header lacks
    }
    for (const QString& path : {QString::fromStdString(good), QStringLiteral("/nonexistent/recording.jsonl")}) {
      AttachWindow w(path);
      w.show();
      QTRY_VERIFY_WITH_TIMEOUT(w.statsLabel()->text().contains(QStringLiteral("Cannot play this recording")), 30000);
      QVERIFY(!w.scrubber()->isEnabled());
      QVERIFY(!w.picture());
      qInfo("%s", qPrintable(w.statsLabel()->text()));
    }
    AttachWindow w(QString::fromStdString(good));
    QTRY_VERIFY_WITH_TIMEOUT(w.statsLabel()->text().contains(QStringLiteral("line 8: instance 7")), 30000);
  }

  void dialog_lines_parse_or_are_refused() {
    const AttachTargets t =
        parse_attach_lines({QStringLiteral("tcp://a:5557 replay tcp://a:5558 metrics http://a:8000/metrics"),
                            QStringLiteral(""), QStringLiteral("tcp://b:5557 http://b:8000/metrics")},
                           1, QStringLiteral("kv"));
    QCOMPARE(t.specs.size(), size_t(2));
    QCOMPARE(t.specs[0].replay, std::string("tcp://a:5558"));
    QCOMPARE(t.specs[1].source, 1);
    QCOMPARE(t.metrics.at(1), std::string("http://b:8000/metrics"));
    QCOMPARE(t.specs[1].topic, std::string("kv"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_attach_lines({QStringLiteral(" ")}, 1, QString()));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             parse_attach_lines({QStringLiteral("tcp://a:1 tcp://a:2 tcp://a:3")}, 1, QString()));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_attach_lines({QStringLiteral("tcp://a")}, 2, QString()));
  }
};

QTEST_MAIN(TestAttachWindow)
#include "test_attach_window.moc"
