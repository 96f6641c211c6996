// The window's Serve toggle, driven as a user would (offscreen): turn it on from the Serve menu,
// send real HTTP requests over loopback, see them in the block map beside a chat, rebuild the
// engine under a running request, refuse bad settings, and turn it off again.
#include <QLabel>
#include <QPushButton>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QSignalSpy>
#include <QSpinBox>
#include <QLineEdit>
#include <QtTest>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "panels/block_map_panel.h"
#include "panels/chat_panel.h"
#include "gui_test_support.h"
#include "shell/main_window.h"
#include "serving/serve_controller.h"
#include "serving/serve_dialog.h"
#include "serving/serve_menu.h"
#include "controls/settings_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 30000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

struct HttpAnswer {
  int status = -1;  // -1: could not connect
  std::string body;
};

// One HTTP/1.1 request over a plain loopback socket, read to the end (Connection: close), so
// the test speaks to the server exactly as any client would, with no library of ours between.
HttpAnswer http(int port, const std::string& method, const std::string& path, const std::string& body = "") {
  HttpAnswer a;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return a;
  }
  const std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                          "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) all.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (all.rfind("HTTP/1.1 ", 0) != 0) return a;
  a.status = std::stoi(all.substr(9, 3));
  const size_t head_end = all.find("\r\n\r\n");
  a.body = head_end == std::string::npos ? "" : all.substr(head_end + 4);
  return a;
}

std::string completion(const std::string& prompt, int max_tokens) {
  return nlohmann::json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}}
      .dump();
}

bool shows_label(const Snapshot& s, const std::string& label) {
  for (const SeqSnap& q : s.seqs)
    if (q.label == label && !is_final_state(q.state)) return true;
  return false;
}

}  // namespace

class TestServe : public QObject {
  Q_OBJECT
  std::unique_ptr<MainWindow> w_;

  ServeController* serve() { return w_->serveController(); }
  int port() { return serve()->url().section(QLatin1Char(':'), -1).toInt(); }

 private slots:
  void initTestCase() {
    test::start_gui_suite("serve");
    ServeSettings s;
    s.port = 0;  // any free port: suites run side by side
    s.save();
    w_ = std::make_unique<MainWindow>();
    w_->show();
    w_->openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->hasEngine(), kTimeoutMs);
  }

  void theMenuTurnsServingOnAndTheStatusBarSaysWhere() {
    QAction* toggle = w_->serveMenu()->toggle();
    bool inMenuBar = false;
    for (QAction* a : w_->menuBar()->actions())
      if (a->menu() == w_->serveMenu()->menu()) inMenuBar = true;
    QVERIFY(inMenuBar);
    toggle->trigger();
    QVERIFY(toggle->isChecked());
    QVERIFY(serve()->serving());
    QVERIFY2(serve()->url().startsWith(QStringLiteral("http://127.0.0.1:")), qPrintable(serve()->url()));
    QLabel* label = w_->serveMenu()->statusLabel();
    QVERIFY(label->isVisible());
    QVERIFY2(label->text().contains(serve()->url()), qPrintable(label->text()));
    QCOMPARE(http(port(), "GET", "/health").status, 200);
    const HttpAnswer models = http(port(), "GET", "/v1/models");
    QCOMPARE(models.status, 200);
    QCOMPARE(nlohmann::json::parse(models.body)["data"][0]["id"].get<std::string>(), std::string("stories260K"));
  }

  void aRequestIsAnsweredByTheWindowsEngine() {
    const HttpAnswer a = http(port(), "POST", "/v1/completions", completion("Once upon a time", 12));
    QVERIFY2(a.status == 200, a.body.c_str());
    const auto j = nlohmann::json::parse(a.body);
    QCOMPARE(j["usage"]["completion_tokens"].get<int>(), 12);
    QVERIFY(!j["choices"][0]["text"].get<std::string>().empty());
    // The same greedy prompt through the window's own engine (submitText: BOS + text, greedy)
    // gives the same text: one engine, one path.
    QSignalSpy finished(w_->host()->worker(), &EngineThreadWorker::requestFinished);
    w_->host()->submitText(QStringLiteral("Once upon a time"), 12, true, QStringLiteral("check"));
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, kTimeoutMs);
    const auto t = finished.at(0).at(0).value<TurnStats>();
    std::string own;
    for (auto it = t.tokens.end() - 12; it != t.tokens.end(); ++it)
      own += w_->host()->modelInfo().model->tokenizer->token_to_piece(*it);
    QCOMPARE(j["choices"][0]["text"].get<std::string>(), own);
    // /metrics counts it under vLLM's names.
    const HttpAnswer m = http(port(), "GET", "/metrics");
    QCOMPARE(m.status, 200);
    QVERIFY(m.body.find("vllm:generation_tokens_total{model_name=\"stories260K\"} 12") != std::string::npos);
  }

  void externalRequestsShowInTheBlockMapBesideAChat() {
    std::atomic<int> status{0};
    w_->host()->setStepDelay(5);  // slow motion, so both requests are surely live at once
    std::thread client(
        [&] { status = http(port(), "POST", "/v1/completions", completion("One day a little girl", 300)).status; });
    w_->chatPanel()->current()->send(QStringLiteral("Hello there"));
    // Both at once in the window's snapshot: the HTTP request (label "http") and the chat.
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->latest() && shows_label(*w_->host()->latest(), "http") &&
                                 shows_label(*w_->host()->latest(), "chat"),
                             kTimeoutMs);
    bool listed = false;
    QListWidget* list = w_->blockMapPanel()->sequenceList();
    for (int i = 0; i < list->count(); ++i) listed = listed || list->item(i)->text().contains(QStringLiteral("http"));
    QVERIFY2(listed, "the block map's sequence list shows the HTTP request");
    // For a person to look at: the window while it serves (test-tmp/serve-window.png).
    w_->grab().save(QString::fromStdString((test::tmp_dir() / "serve-window.png").string()));
    client.join();
    w_->host()->setStepDelay(0);
    QCOMPARE(status.load(), 200);
    QTRY_VERIFY_WITH_TIMEOUT(!w_->host()->isRunning(), kTimeoutMs);
  }

  void aRebuildEndsRunningRequestsWithAnErrorAndKeepsServing() {
    w_->host()->setStepDelay(5);  // the request is still running when the rebuild comes
    std::atomic<int> status{0};
    std::string body;
    std::thread client([&] {
      const HttpAnswer a = http(port(), "POST", "/v1/completions", completion("Once upon a time", 300));
      body = a.body;
      status = a.status;
    });
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->latest() && shows_label(*w_->host()->latest(), "http"), kTimeoutMs);
    const int before = port();
    w_->settingsPanel()->applyButton()->click();  // rebuilds the engine on the same model
    client.join();
    QVERIFY2(status.load() == 400 || status.load() == 503, body.c_str());
    QVERIFY2(body.find("rebuilt") != std::string::npos, body.c_str());
    w_->host()->setStepDelay(0);
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->hasEngine() && !w_->host()->isLoading(), kTimeoutMs);
    QCOMPARE(port(), before);
    QTRY_COMPARE_WITH_TIMEOUT(http(port(), "POST", "/v1/completions", completion("Once upon a time", 4)).status, 200,
                              kTimeoutMs);
  }

  void badSettingsAreRefusedInTheDialog() {
    ServeSettings s;
    s.host = QStringLiteral("not an address");
    ServeDialog d(s);
    QVERIFY(!d.acceptable());
    QVERIFY2(d.note()->text().contains(QStringLiteral("not an IP address")), qPrintable(d.note()->text()));
    d.hostEdit()->setText(QStringLiteral("0.0.0.0"));
    QVERIFY(d.acceptable());
    QVERIFY2(d.note()->text().contains(QStringLiteral("Other machines")), qPrintable(d.note()->text()));
    d.hostEdit()->setText(QStringLiteral("127.0.0.1"));
    QVERIFY(d.note()->text().contains(QStringLiteral("Only programs on this machine")));
  }

  void aPortInUseIsAnErrorNotACrash() {
    const int taken = port();  // our own server holds it
    ServeController other(w_->host());
    QSignalSpy errors(&other, &ServeController::error);
    ServeSettings s;
    s.port = taken;
    QVERIFY(!other.start(s));
    QCOMPARE(errors.count(), 1);
    QVERIFY2(errors.at(0).at(0).toString().contains(QString::number(taken)), qPrintable(errors.at(0).at(0).toString()));
    QVERIFY(!other.serving());
    QCOMPARE(http(taken, "GET", "/health").status, 200);  // the first server is untouched
  }

  void turningItOffFreesTheRequestsBlocksAndClosesThePort() {
    w_->host()->setStepDelay(5);
    std::atomic<int> status{0};
    std::thread client(
        [&] { status = http(port(), "POST", "/v1/completions", completion("Once upon a time", 300)).status; });
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->latest() && shows_label(*w_->host()->latest(), "http"), kTimeoutMs);
    const int was = port();
    w_->serveMenu()->toggle()->trigger();
    client.join();
    w_->host()->setStepDelay(0);
    QCOMPARE(status.load(), 503);  // "the server is shutting down"
    QVERIFY(!w_->serveMenu()->toggle()->isChecked());
    QVERIFY(!w_->serveMenu()->statusLabel()->isVisible());
    QCOMPARE(http(was, "GET", "/health").status, -1);
    QTRY_VERIFY_WITH_TIMEOUT(w_->host()->latest() && !shows_label(*w_->host()->latest(), "http") &&
                                 w_->host()->latest()->memory.blocks_used == 0,
                             kTimeoutMs);
  }

  void cleanupTestCase() { w_.reset(); }
};

QTEST_MAIN(TestServe)
#include "test_serve.moc"
