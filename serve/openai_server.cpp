#include "serve/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "chat/reasoning_parser.h"
#include "serve/prometheus_text.h"
#include "telemetry/snapshot_json.h"

namespace kvscope::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Generated text may hold bytes that are not UTF-8 on their own (a byte-fallback token in a
// logprobs entry): replace them rather than fail to answer.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(int status, const std::string& message, const std::string& type, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", status}}}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_json(e.status, e.what(), e.type, e.param)), "application/json");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What one choice has gathered so far.
struct ChoiceAcc {
  std::string text;        // as generated (completions), or the content (chat)
  std::string reasoning;   // chat: the reply's reasoning, apart from its content
  ReasoningParser parser;  // chat with a reasoning format: splits the text as it comes
  std::string finish_reason;
  std::string error;
  int error_status = 0;  // set by the queue when the server, not the request, is the cause
  bool done = false;
  bool role_sent = false;                                     // chat streams open each choice with the assistant role
  json logprobs_content = json::array();                      // chat
  json lp_tokens = json::array(), lp_values = json::array(),  // completions
      lp_top = json::array(), lp_offsets = json::array();
};

struct Accumulated {
  std::vector<ChoiceAcc> choices;
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int32_t reasoning_tokens = -1;  // -1: not parsed
  int finished = 0;
  bool all_done() const { return finished == static_cast<int>(choices.size()); }
  Accumulated(int n, const ReasoningSetup& reasoning) : choices(static_cast<size_t>(n)) {
    for (ChoiceAcc& c : choices) c.parser = ReasoningParser(reasoning);
  }
};

json chat_logprob_entry(const ChannelItem& it) {
  json top = json::array();
  for (const TopLogprob& t : it.top) {
    json bytes = json::array();
    for (unsigned char ch : t.text) bytes.push_back(ch);
    top.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", bytes}});
  }
  json bytes = json::array();
  for (unsigned char ch : it.token_text) bytes.push_back(ch);
  return {{"token", it.token_text}, {"logprob", it.logprob}, {"bytes", bytes}, {"top_logprobs", top}};
}

json completion_logprobs(const ChannelItem& it, size_t offset) {
  json top = json::object();
  for (const TopLogprob& t : it.top) top[t.text] = t.logprob;
  return {{"tokens", {it.token_text}},
          {"token_logprobs", {it.logprob}},
          {"top_logprobs", {top}},
          {"text_offset", {offset}}};
}

json usage_json(const Accumulated& a) {
  json u = {{"prompt_tokens", a.prompt_tokens},
            {"completion_tokens", a.completion_tokens},
            {"total_tokens", a.prompt_tokens + a.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", a.cached_tokens}}}};
  if (a.reasoning_tokens >= 0) u["completion_tokens_details"] = {{"reasoning_tokens", a.reasoning_tokens}};
  return u;
}

// The next piece of a choice's text, split into reasoning and content (all content when the
// request parses no reasoning); at the finish, what the parser held back too.
ReasoningDelta split_text(ChoiceAcc& c, const std::string& text, bool finish) {
  ReasoningDelta d = c.parser.feed(text);
  if (finish) {
    const ReasoningDelta rest = c.parser.finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
  }
  return d;
}

// A chat message's reasoning fields: vLLM's `reasoning` and the older `reasoning_content`, null
// when the reply had none; its content null when the reasoning was all there was (as vLLM).
void put_reasoning(json& msg, const ChoiceAcc& c) {
  const bool thought = c.parser.saw_reasoning();
  if (thought && c.text.empty()) msg["content"] = nullptr;
  msg["reasoning"] = thought ? json(c.reasoning) : json(nullptr);
  msg["reasoning_content"] = msg["reasoning"];
}

// Folds one item into the accumulator (non-streamed answers).
// A choice's Finish item: the choice is done, and the usage numbers it carries are counted.
void count_finish(Accumulated& a, const ChannelItem& it) {
  a.choices.at(static_cast<size_t>(it.index)).done = true;
  ++a.finished;
  a.prompt_tokens = it.prompt_tokens;
  a.completion_tokens += it.completion_tokens;
  if (it.reasoning_tokens >= 0) a.reasoning_tokens = std::max(a.reasoning_tokens, 0) + it.reasoning_tokens;
  if (it.index == 0) a.cached_tokens = it.cached_tokens;  // the samples share the parent's prompt
}

void accumulate(Accumulated& a, const ChannelItem& it, bool chat, bool want_logprobs) {
  ChoiceAcc& c = a.choices.at(static_cast<size_t>(it.index));
  if (it.kind == ChannelItem::Kind::Token) {
    if (want_logprobs) {
      if (chat) {
        c.logprobs_content.push_back(chat_logprob_entry(it));
      } else {
        json top = json::object();
        for (const TopLogprob& t : it.top) top[t.text] = t.logprob;
        c.lp_tokens.push_back(it.token_text);
        c.lp_values.push_back(it.logprob);
        c.lp_top.push_back(top);
        c.lp_offsets.push_back(c.text.size());
      }
    }
    const ReasoningDelta d = split_text(c, it.text, false);
    c.text += d.content;
    c.reasoning += d.reasoning;
    return;
  }
  const ReasoningDelta d = split_text(c, it.text, true);
  c.text += d.content;
  c.reasoning += d.reasoning;
  c.finish_reason = it.finish_reason;
  c.error = it.error;
  c.error_status = it.error_status;
  count_finish(a, it);
}

}  // namespace

struct OpenAiServer::Impl {
  ServingQueue& worker;
  ServedModel model;
  ServerOptions opt;
  httplib::Server svr;
  std::atomic<uint64_t> next_id{1};
  uint64_t id_salt = std::random_device{}();
  std::mutex errors_mu;
  std::map<int, uint64_t> errors;    // status -> count, for kvscope:http_errors_total
  std::atomic<bool> running{false};  // inside run()

  Impl(ServingQueue& w, ServedModel m, ServerOptions o) : worker(w), model(std::move(m)), opt(std::move(o)) {}

  std::string new_id(const char* prefix) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s-%08llx%08llx", prefix, static_cast<unsigned long long>(id_salt & 0xffffffffu),
                  static_cast<unsigned long long>(next_id.fetch_add(1)));
    return buf;
  }

  void routes();
  void configure_transport();  // threads, limits, timeouts, socket options
  void install_guards();       // header limit, API key, OpenAI-shaped errors, error counts
  void install_endpoints();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void answer_whole(httplib::Response& res, const ParsedRequest& pr, const std::shared_ptr<RequestChannel>& ch);
  void answer_stream(httplib::Response& res, const ParsedRequest& pr, const std::shared_ptr<RequestChannel>& ch);
};

void OpenAiServer::Impl::routes() {
  configure_transport();
  install_guards();
  install_endpoints();
}

void OpenAiServer::Impl::configure_transport() {
  svr.new_task_queue = [n = opt.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  svr.set_payload_max_length(opt.max_body_bytes);
  svr.set_read_timeout(opt.read_timeout_s, 0);
  svr.set_write_timeout(opt.read_timeout_s, 0);
  svr.set_keep_alive_max_count(100);
  // httplib's default also sets SO_REUSEPORT, with which a second server (another `serve`, or
  // the window's Serve toggle) binds the same port and the kernel splits the connections
  // between the two. SO_REUSEADDR alone: a restart still binds at once, a port in use is refused.
  svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

void OpenAiServer::Impl::install_guards() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.headers.size() > opt.max_headers) {
      send_error(res, ApiError(431,
                               "too many request headers (" + std::to_string(req.headers.size()) + ", at most " +
                                   std::to_string(opt.max_headers) + ")",
                               "", "invalid_request_error"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!opt.api_key.empty() && req.path != "/health") {
      const std::string want = "Bearer " + opt.api_key;
      if (req.get_header_value("Authorization") != want) {
        send_error(res, ApiError(401, "Unauthorized: a valid 'Authorization: Bearer <key>' header is required"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib's own refusals (unknown path, body too large, unparsable request line) get
  // OpenAI-shaped bodies too; answers that already carry one are left alone.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    switch (res.status) {
      case 404:
        msg = "Not Found: no endpoint " + req.method + " " + req.path;
        break;
      case 405:
        msg = "Method Not Allowed";
        break;
      case 413:
        msg = "the request body is larger than the server's limit";
        break;
      case 414:
        msg = "the request URI is too long";
        break;
      case 400:
        msg = "Bad Request: the HTTP request could not be parsed";
        break;
      default:
        msg = "HTTP error " + std::to_string(res.status);
    }
    res.set_content(dump(error_json(res.status, msg, ApiError::default_type(res.status), "")), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) { what = e.what(); } catch (...) {
    }
    res.status = 500;
    res.set_content(dump(error_json(500, "internal error: " + what, "internal_server_error", "")), "application/json");
  });
  svr.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    if (res.status < 400) return;
    std::lock_guard<std::mutex> lk(errors_mu);
    ++errors[res.status];
  });
}

void OpenAiServer::Impl::install_endpoints() {
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json m = {{"id", model.name},
                    {"object", "model"},
                    {"created", unix_now()},
                    {"owned_by", "kvscope"},
                    {"root", model.aliases.empty() ? model.name : model.aliases.front()},
                    {"max_model_len", model.max_model_len}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    MetricsContext ctx;
    ctx.model_name = model.name;
    {
      std::lock_guard<std::mutex> lk(errors_mu);
      ctx.http_refused = errors;
    }
    const SnapshotPtr snap = worker.latest_snapshot();
    res.set_content(render_prometheus(*snap, worker.metrics(), ctx), "text/plain; version=0.0.4; charset=utf-8");
  });
  // kvscope's own view: the engine's latest snapshot (blocks, hashes, sequences) as JSON.
  svr.Get("/kvscope/snapshot", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump(to_json(*worker.latest_snapshot())), "application/json");
  });
  svr.Post("/v1/completions",
           [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
  svr.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
}

void OpenAiServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto arrival = Clock::now();
  std::shared_ptr<RequestChannel> ch;
  ParsedRequest pr;
  try {
    pr = chat ? parse_chat_request(req.body, model) : parse_completion_request(req.body, model);
    pr.job.arrival = arrival;
    ch = worker.submit(pr.job);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  if (pr.stream)
    answer_stream(res, pr, ch);
  else
    answer_whole(res, pr, ch);
}

void OpenAiServer::Impl::answer_whole(httplib::Response& res, const ParsedRequest& pr,
                                      const std::shared_ptr<RequestChannel>& ch) {
  Accumulated a(pr.job.n, pr.job.reasoning);
  const bool lp = pr.job.logprobs >= 0;
  while (!a.all_done())
    for (const ChannelItem& it : ch->take(std::chrono::milliseconds(500))) accumulate(a, it, pr.chat, lp);
  for (const ChoiceAcc& c : a.choices)
    if (c.finish_reason == "error" || c.finish_reason == "cancelled") {
      // The engine refused it after admission (e.g. more blocks than the whole pool: 400,
      // nothing a retry would fix), or the server caused it (stopping, engine rebuilt: 503).
      const int status = c.error_status ? c.error_status : c.finish_reason == "cancelled" ? 503 : 400;
      send_error(res, ApiError(status, c.error.empty() ? "the request was cancelled" : c.error));
      return;
    }
  json choices = json::array();
  for (size_t i = 0; i < a.choices.size(); ++i) {
    const ChoiceAcc& c = a.choices[i];
    if (pr.chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      put_reasoning(message, c);
      choices.push_back({{"index", i},
                         {"message", message},
                         {"logprobs", lp ? json{{"content", c.logprobs_content}} : json(nullptr)},
                         {"finish_reason", c.finish_reason}});
    } else {
      json lpj = nullptr;
      if (lp)
        lpj = {{"tokens", c.lp_tokens},
               {"token_logprobs", c.lp_values},
               {"top_logprobs", c.lp_top},
               {"text_offset", c.lp_offsets}};
      choices.push_back({{"index", i}, {"text", c.text}, {"logprobs", lpj}, {"finish_reason", c.finish_reason}});
    }
  }
  const json body = {{"id", new_id(pr.chat ? "chatcmpl" : "cmpl")},
                     {"object", pr.chat ? "chat.completion" : "text_completion"},
                     {"created", unix_now()},
                     {"model", pr.model},
                     {"choices", choices},
                     {"usage", usage_json(a)}};
  res.set_content(dump(body), "application/json");
}

namespace {

// A stream's state, shared by the content provider's calls and its releaser.
struct StreamState {
  std::shared_ptr<RequestChannel> ch;
  ParsedRequest pr;
  std::string id;
  int64_t created = 0;
  Accumulated a{1, {}};
  std::vector<ChannelItem> first;  // taken before the headers went out
  bool finished = false;           // [DONE] sent

  json chunk(json choices) const {
    return json{{"id", id},
                {"object", pr.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", pr.model},
                {"choices", std::move(choices)}};
  }
  // The server-sent events for one item from the engine ("" when there is nothing to show yet).
  std::string events_for(const ChannelItem& it);
  // The usage chunk (when asked for) and [DONE] once every choice has finished, else "".
  std::string closing_events() const;
};

std::string StreamState::events_for(const ChannelItem& it) {
  const bool lp = pr.job.logprobs >= 0;
  ChoiceAcc& c = a.choices.at(static_cast<size_t>(it.index));
  const bool fin = it.kind == ChannelItem::Kind::Finish;
  if (fin) count_finish(a, it);
  const ReasoningDelta d = split_text(c, it.text, fin);
  if (!fin && d.empty() && !lp) return "";  // nothing to show yet (a partial UTF-8 character or marker)
  std::string out;
  json choice = {{"index", it.index}};
  if (fin && it.finish_reason == "error") {
    // Headers are out: the error travels as an event, as vLLM sends it.
    const int status = it.error_status ? it.error_status : 400;
    out += "data: " + dump(error_json(status, it.error, ApiError::default_type(status), "")) + "\n\n";
    choice["finish_reason"] = "error";
  } else {
    choice["finish_reason"] = fin ? json(it.finish_reason) : json(nullptr);
  }
  if (pr.chat) {
    json delta = json::object();
    if (!c.role_sent) {
      delta["role"] = "assistant";
      c.role_sent = true;
    }
    // While thinking, the deltas carry `reasoning` (vLLM's field) and `reasoning_content` (the
    // older name); then `content`.
    if (!d.reasoning.empty()) {
      delta["reasoning"] = d.reasoning;
      delta["reasoning_content"] = d.reasoning;
    }
    if (!d.content.empty() || (!fin && d.reasoning.empty())) delta["content"] = d.content;
    choice["delta"] = delta;
    choice["logprobs"] = lp && !fin ? json{{"content", json::array({chat_logprob_entry(it)})}} : json(nullptr);
  } else {
    choice["text"] = it.text;
    choice["logprobs"] = lp && !fin ? completion_logprobs(it, c.text.size()) : json(nullptr);
  }
  c.text += it.text;
  out += "data: " + dump(chunk(json::array({choice}))) + "\n\n";
  return out;
}

std::string StreamState::closing_events() const {
  if (!a.all_done()) return "";
  std::string out;
  if (pr.include_usage) {
    json u = chunk(json::array());
    u["usage"] = usage_json(a);
    out += "data: " + dump(u) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace

void OpenAiServer::Impl::answer_stream(httplib::Response& res, const ParsedRequest& pr,
                                       const std::shared_ptr<RequestChannel>& ch) {
  auto st = std::make_shared<StreamState>();
  st->ch = ch;
  st->pr = pr;
  st->id = new_id(pr.chat ? "chatcmpl" : "cmpl");
  st->created = unix_now();
  st->a = Accumulated(pr.job.n, pr.job.reasoning);
  // Wait for the first word from the engine before answering, so that a request the engine
  // refuses outright still gets its error status rather than a 200 stream.
  while (st->first.empty()) st->first = ch->take(std::chrono::milliseconds(500));
  for (const ChannelItem& it : st->first)
    if (it.kind == ChannelItem::Kind::Finish && it.finish_reason == "error" && pr.job.n == 1) {
      send_error(res, ApiError(it.error_status ? it.error_status : 400, it.error));
      return;
    }
  ServingQueue& w = worker;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, &w](size_t, httplib::DataSink& sink) {
        std::vector<ChannelItem> items =
            st->first.empty() ? st->ch->take(std::chrono::milliseconds(200)) : std::exchange(st->first, {});
        std::string out;
        for (const ChannelItem& it : items) out += st->events_for(it);
        out += st->closing_events();
        if (!out.empty()) {
          // A client that went away fails the write (or is no longer writable): cancel its
          // request now so its blocks go back to the pool at once.
          if (!sink.is_writable() || !sink.write(out.data(), out.size())) {
            w.cancel(st->ch);
            return false;
          }
        }
        if (st->a.all_done()) {
          st->finished = true;
          sink.done();
        }
        return true;
      },
      [st, &w](bool success) {
        if (!success && !st->a.all_done()) w.cancel(st->ch);
      });
}

OpenAiServer::OpenAiServer(ServingQueue& worker, ServedModel model, ServerOptions opt)
    : impl_(std::make_unique<Impl>(worker, std::move(model), std::move(opt))) {
  impl_->routes();
}

OpenAiServer::~OpenAiServer() { stop(); }

void OpenAiServer::bind() {
  // A write to a socket whose peer has gone must fail (and cancel its request), not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  const ServerOptions& o = impl_->opt;
  if (o.port == 0) {
    port_ = impl_->svr.bind_to_any_port(o.host);
    if (port_ <= 0) throw std::runtime_error("cannot listen on " + o.host + " (any port)");
  } else {
    if (!impl_->svr.bind_to_port(o.host, o.port))
      throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                               " (in use, or not an address of this machine)");
    port_ = o.port;
  }
}

void OpenAiServer::run() {
  impl_->running.store(true);
  impl_->svr.listen_after_bind();
  impl_->running.store(false);
}

bool OpenAiServer::listening() const { return impl_->svr.is_running(); }

void OpenAiServer::stop() {
  if (!impl_) return;
  // httplib's stop() does nothing until its listen loop has begun: a stop that comes while
  // run() is just starting waits for that, or the loop would start afterwards and never end.
  while (impl_->running.load() && !impl_->svr.is_running()) std::this_thread::yield();
  impl_->svr.stop();
}

}  // namespace kvscope::serve
