#pragma once
// Where tests find the read-only shared models/golden data and a writable scratch folder.
#include <QtTest>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <vector>
#include <string>

namespace kvscope::test {

inline std::filesystem::path shared_dir() {
  const char* env = std::getenv("KVSCOPE_SHARED_DIR");
  return env ? std::filesystem::path(env) : std::filesystem::path("../shared");
}
// The repository root (resources/, tests/fuzz/regressions): set by ctest, because __FILE__ can
// be a relative path (ccache's base_dir rewriting) that means nothing from the test's folder.
inline std::filesystem::path source_dir() {
  const char* env = std::getenv("KVSCOPE_SOURCE_DIR");
  return env ? std::filesystem::path(env) : std::filesystem::path(".");
}
inline std::filesystem::path models_dir() { return shared_dir() / "models"; }
inline std::filesystem::path golden_dir() { return shared_dir() / "golden"; }
inline std::filesystem::path tmp_dir() {
  const char* env = std::getenv("KVSCOPE_TEST_TMP");
  std::filesystem::path p = env ? std::filesystem::path(env) : std::filesystem::temp_directory_path() / "kvscope-test";
  std::filesystem::create_directories(p);
  return p;
}

// n token ids of a 300-token synthetic vocabulary (3..292), a different run per offset: the
// prompts the architecture tests feed.
inline std::vector<int32_t> token_ids(int32_t n, int32_t offset) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(3 + (i * 7 + offset * 13) % 290);
  return t;
}

}  // namespace kvscope::test

// The shared models are part of the test contract: a missing file fails, it does not skip.
#define KVSCOPE_REQUIRE_FILE(path) \
  QVERIFY2(std::filesystem::exists(path), ("missing test data: " + (path).string()).c_str())
