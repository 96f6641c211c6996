// Prints what attach's Prometheus parser reads from a file, as JSON (for the peer test that
// compares it with prometheus_client's own parser): usage: attach_prom_dump FILE
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attach/prometheus_parse.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: attach_prom_dump FILE\n";
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const kvscope::attach::PromText p = kvscope::attach::parse_prometheus_text(ss.str());
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : p.samples) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : s.labels) labels[k] = v;
    // JSON has no NaN or Inf: the value as text too.
    samples.push_back({{"name", s.name}, {"labels", labels}, {"value", std::to_string(s.value)}, {"v", s.value}});
  }
  std::cout << nlohmann::json{{"samples", samples},
                              {"errors", p.errors},
                              {"first_error", p.first_error},
                              {"types", p.types},
                              {"helps", p.helps}}
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
  return 0;
}
