#include "attach/metrics_scraper.h"

#include <httplib.h>

#include <chrono>
#include <stdexcept>

namespace kvscope::attach {
MetricsScraper::MetricsScraper(std::string url, int interval_ms, int timeout_ms)
    : interval_ms_(interval_ms), timeout_ms_(timeout_ms) {
  stats_.url = url;
  if (url.rfind("http://", 0) != 0)
    throw std::invalid_argument("--metrics wants http://HOST:PORT/PATH, got '" + url + "'");
  std::string rest = url.substr(7);
  const size_t slash = rest.find('/');
  path_ = slash == std::string::npos ? "/metrics" : rest.substr(slash);
  std::string hostport = rest.substr(0, slash);
  const size_t colon = hostport.rfind(':');
  host_ = hostport.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      port_ = std::stoi(hostport.substr(colon + 1));
    } catch (const std::exception&) { throw std::invalid_argument("--metrics '" + url + "': bad port"); }
  }
  if (host_.empty() || port_ <= 0 || port_ > 65535)
    throw std::invalid_argument("--metrics '" + url + "': no host or bad port");
  thread_ = std::thread([this] {
    while (!stop_) {
      const auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms_);
      scrape_once();
      while (!stop_ && std::chrono::steady_clock::now() < next)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
}

MetricsScraper::~MetricsScraper() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

ScrapeStats MetricsScraper::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void MetricsScraper::scrape_once() {
  httplib::Client cli(host_, port_);
  const auto t = std::chrono::milliseconds(timeout_ms_);
  cli.set_connection_timeout(t);
  cli.set_read_timeout(t);
  cli.set_write_timeout(t);
  auto res = cli.Get(path_);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.scrapes;
  if (!res) {
    ++stats_.failed;
    stats_.last_error = "no answer: " + httplib::to_string(res.error());
    return;
  }
  if (res->status != 200) {
    ++stats_.failed;
    stats_.last_error = "HTTP " + std::to_string(res->status);
    return;
  }
  const PromText text = parse_prometheus_text(res->body);
  const std::string type = res->get_header_value("Content-Type");
  if (text.samples.empty() || type.find("text/html") != std::string::npos) {
    ++stats_.not_prometheus;
    stats_.last_error = "not Prometheus text (Content-Type '" + type + "'" +
                        (text.first_error.empty() ? "" : ", " + text.first_error) + ")";
    return;
  }
  ++stats_.ok;
  stats_.parse_errors += text.errors;
  summarize_metrics(text, stats_);
}

}  // namespace kvscope::attach
