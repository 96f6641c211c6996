#include "serving/serve_controller.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QSettings>
#include <QThread>
#include <algorithm>

#include <arpa/inet.h>

#include "engine_bridge/engine_host.h"

namespace kvscope::ui {

namespace {

// An IPv4 or IPv6 address in numeric form (what the server binds; names are not resolved).
bool is_ip_address(const QString& h, bool* loopback = nullptr) {
  const QByteArray a = h.toLatin1();
  unsigned char buf[16];
  if (inet_pton(AF_INET, a.constData(), buf) == 1) {
    if (loopback) *loopback = buf[0] == 127;
    return true;
  }
  if (inet_pton(AF_INET6, a.constData(), buf) == 1) {
    static const unsigned char one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (loopback) *loopback = std::equal(buf, buf + 16, one);
    return true;
  }
  return false;
}

}  // namespace

QString ServeSettings::problem() const {
  if (port < 0 || port > 65535) return QObject::tr("The port must be in 0..65535 (0: any free port).");
  if (host.trimmed().isEmpty()) return QObject::tr("The host must not be empty (127.0.0.1 serves this machine only).");
  if (!is_ip_address(host.trimmed()) && host.trimmed() != QLatin1String("localhost"))
    return QObject::tr("'%1' is not an IP address of this machine (e.g. 127.0.0.1, or 0.0.0.0 for every interface).")
        .arg(host);
  if (maxQueued < 1) return QObject::tr("The queue limit must be at least 1.");
  return {};
}

bool ServeSettings::loopback() const {
  const QString h = host.trimmed();
  bool lo = false;
  return h == QLatin1String("localhost") || (is_ip_address(h, &lo) && lo);
}

ServeSettings ServeSettings::load() {
  QSettings q;
  ServeSettings s;
  s.host = q.value(QStringLiteral("serve/host"), s.host).toString();
  s.port = q.value(QStringLiteral("serve/port"), s.port).toInt();
  s.apiKey = q.value(QStringLiteral("serve/apiKey"), s.apiKey).toString();
  return s;
}

void ServeSettings::save() const {
  QSettings q;
  q.setValue(QStringLiteral("serve/host"), host);
  q.setValue(QStringLiteral("serve/port"), port);
  q.setValue(QStringLiteral("serve/apiKey"), apiKey);
}

ServeController::ServeController(EngineHost* host, QObject* parent) : QObject(parent), host_(host) {
  connect(host_, &EngineHost::modelLoaded, this, &ServeController::onModelLoaded);
}

ServeController::~ServeController() { stop(); }

QString ServeController::url() const {
  return serving() ? QStringLiteral("http://%1:%2").arg(settings_.host.trimmed()).arg(boundPort_) : QString();
}

serve::ServeMetrics ServeController::metrics() const { return queue_ ? queue_->metrics() : serve::ServeMetrics{}; }

bool ServeController::start(const ServeSettings& s) {
  stop();
  if (const QString p = s.problem(); !p.isEmpty()) {
    emit error(p);
    return false;
  }
  if (!host_->hasEngine()) {
    emit error(tr("Load a model first: the server serves the engine the window shows."));
    return false;
  }
  settings_ = s;
  boundPort_ = s.port;
  queue_ = std::make_shared<serve::ServingQueue>(serve::WorkerLimits{s.maxQueued});
  if (!listen()) {
    queue_.reset();
    return false;
  }
  host_->setServing(queue_);
  emit servingChanged(true, url());
  return true;
}

bool ServeController::listen() {
  const ModelInfo& info = host_->modelInfo();
  if (!info.model || !info.model->tokenizer) {
    emit error(tr("This model has no tokenizer, so it cannot be served."));
    return false;
  }
  serve::ServedModel sm;
  sm.name = QFileInfo(info.path).completeBaseName().toStdString();
  sm.aliases = {info.path.toStdString()};
  sm.tokenizer = info.model->tokenizer.get();
  sm.chat_template = info.chatTemplateChoice;
  sm.max_model_len = info.contextLength;
  sm.n_vocab = info.nVocab;
  sm.max_piece_bytes = serve::longest_piece_bytes(*info.model->tokenizer);
  serve::ServerOptions opt;
  opt.host = settings_.host.trimmed().toStdString();
  opt.port = boundPort_;
  opt.api_key = settings_.apiKey.toStdString();
  opt.http_threads = 16;      // a desktop's clients, not a fleet's
  servedModel_ = info.model;  // the server's tokenizer pointer stays valid while it runs
  servedContext_ = info.contextLength;
  auto server = std::make_unique<serve::OpenAiServer>(*queue_, sm, opt);
  try {
    server->bind();
  } catch (const std::exception& e) {
    emit error(tr("Cannot serve: %1").arg(QString::fromUtf8(e.what())));
    servedModel_.reset();
    return false;
  }
  boundPort_ = server->bound_port();  // a restart after a model change keeps a picked port
  server_ = std::move(server);
  serverThread_ = std::thread([s = server_.get()] { s->run(); });
  // Until its loop runs, a stop() would not reach it (OpenAiServer::stop waits only inside run()).
  QElapsedTimer t;
  t.start();
  while (!server_->listening() && t.elapsed() < 5000) QThread::msleep(1);
  return true;
}

void ServeController::shutDownServer() {
  if (!server_) return;
  server_->stop();
  if (serverThread_.joinable()) serverThread_.join();
  server_.reset();
  servedModel_.reset();
}

void ServeController::stop() {
  if (!queue_) return;
  // The order matters: the queue answers every waiting HTTP thread first, so that the server's
  // pool can be joined; then the engine thread cancels what was still running (blocks freed).
  queue_->close();
  shutDownServer();
  host_->setServing(nullptr);
  queue_.reset();
  emit servingChanged(false, {});
}

void ServeController::onModelLoaded(const ModelInfo& info) {
  if (!server_) return;
  // The worker has moved the queue to the new engine already. Another model (another
  // tokenizer) or another context length: serve those on the same address. Same model, same
  // length: the server stays up (its requests checks still hold).
  if (info.model == servedModel_ && info.contextLength == servedContext_) return;
  shutDownServer();
  if (!listen()) {
    queue_->close();
    host_->setServing(nullptr);
    queue_.reset();
    emit servingChanged(false, {});
  }
}

}  // namespace kvscope::ui
