#pragma once
// Reading ../shared/golden records (kvscope-golden/1): the JSON record and its raw float32
// logits file, shared by the golden tests.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

namespace kvscope::test {

inline nlohmann::json load_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  return nlohmann::json::parse(f);
}

// The whole file as float32 values; empty when it cannot be opened.
inline std::vector<float> load_logits(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<float> v;
  if (!f) return v;
  f.seekg(0, std::ios::end);
  v.resize(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

}  // namespace kvscope::test
