// The attach window without a network: the block map fed a fleet-sized picture (8 instances,
// 100,000 cached blocks) must lay out and paint a frame within 16 ms on the UI thread; the
// window opens on a real (local, silent) endpoint with its honest header; the dialog's
// instance lines parse and bad ones are refused with a reason.
#include <QApplication>
#include <QElapsedTimer>
#include <QLabel>
#include <QPixmap>
#include <QtTest>

#include "attach_block_map.h"
#include "attach_window.h"
#include "gui_test_support.h"

using namespace kvscope::ui;

class TestAttachWindow : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { kvscope::test::start_gui_suite("attach_window"); }

  void fleet_of_100k_blocks_paints_within_a_frame() {
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
    QVERIFY2(ms < 16, qPrintable(QString::number(ms)));
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
    QTRY_VERIFY_WITH_TIMEOUT(w.picture() != nullptr, 15000);  // replay times out, the loop goes on
    QCOMPARE(w.picture()->instances.size(), size_t(2));
  }

  void dialog_lines_parse_or_are_refused() {
    const AttachTargets t = parse_attach_lines({QStringLiteral("tcp://a:5557 replay tcp://a:5558 metrics http://a:8000/metrics"),
                                                QStringLiteral(""), QStringLiteral("tcp://b:5557 http://b:8000/metrics")},
                                               1, QStringLiteral("kv"));
    QCOMPARE(t.specs.size(), size_t(2));
    QCOMPARE(t.specs[0].replay, std::string("tcp://a:5558"));
    QCOMPARE(t.specs[1].source, 1);
    QCOMPARE(t.metrics.at(1), std::string("http://b:8000/metrics"));
    QCOMPARE(t.specs[1].topic, std::string("kv"));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_attach_lines({QStringLiteral(" ")}, 1, QString()));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_attach_lines({QStringLiteral("tcp://a:1 tcp://a:2 tcp://a:3")}, 1, QString()));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, parse_attach_lines({QStringLiteral("tcp://a")}, 2, QString()));
  }
};

QTEST_MAIN(TestAttachWindow)
#include "test_attach_window.moc"
