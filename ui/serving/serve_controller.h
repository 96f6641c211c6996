#pragma once
// The window's Serve toggle: an OpenAI-compatible HTTP server (serve/, the same one as
// `kvscope-cli serve`) in front of the engine the window is showing. Its HTTP threads submit
// through a ServingQueue that the window's own engine thread takes in between steps
// (EngineThreadWorker::setServing), so external requests join the chats' and scenarios' continuous
// batch and appear in the block map and every other panel. When the engine is rebuilt, requests
// running at that moment end with an error; when another model loads (or the context length
// changes), the server restarts on the same address with it.
#include <QObject>
#include <QString>
#include <memory>
#include <thread>

#include "serve/openai_server.h"
#include "serve/serving_queue.h"
#include "engine_bridge/ui_types.h"

namespace kvscope::ui {

class EngineHost;

struct ServeSettings {
  QString host = QStringLiteral("127.0.0.1");  // loopback unless the user asks otherwise
  int port = 8000;                             // 0: any free port
  QString apiKey;                              // empty: no key needed
  int maxQueued = 64;
  // A problem a user should fix before serving (empty: fine), e.g. a port out of range.
  QString problem() const;
  bool loopback() const;
  static ServeSettings load();  // from QSettings (serve/host, serve/port, serve/apiKey)
  void save() const;
};

class ServeController : public QObject {
  Q_OBJECT
 public:
  explicit ServeController(EngineHost* host, QObject* parent = nullptr);
  ~ServeController() override;

  // Starts serving the current engine; false (and error emitted) when there is no engine yet,
  // the settings are invalid or the address cannot be bound.
  bool start(const ServeSettings& s);
  void stop();
  bool serving() const { return static_cast<bool>(server_); }
  QString url() const;                  // http://host:port while serving
  serve::ServeMetrics metrics() const;  // of the requests served since start

 signals:
  void servingChanged(bool on, const QString& url);
  void error(const QString& message);

 private:
  bool listen();  // builds and binds the server on the current model; false: error emitted
  void shutDownServer();
  void onModelLoaded(const ModelInfo& info);

  EngineHost* host_;
  ServeSettings settings_;
  std::shared_ptr<serve::ServingQueue> queue_;
  std::unique_ptr<serve::OpenAiServer> server_;
  std::thread serverThread_;
  std::shared_ptr<const Model> servedModel_;
  int servedContext_ = 0;
  int boundPort_ = 0;
};

}  // namespace kvscope::ui
