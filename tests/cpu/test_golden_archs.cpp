// The 2025-26 architectures against llama.cpp (../shared/golden/archs, read its README): random-
// weight models written by llama.cpp's own generator, with llama.cpp's raw logits of 24 steps.
// Graded teacher-forced (their top-1/top-2 margins are often < 0.01, so greedy equality is not
// a fair test): the prompt, then each golden token, and every step's 128 logits compared.
// Tolerances: 2e-3 for F32 models (llama.cpp reproduces its own rows to 6e-8; an architecture
// computed wrong is off by 0.04-0.16); a quantized record carries its own (half of what the
// weight quantization moved llama.cpp's logits).
// The paged engine is also held to the plain contiguous reference forward (reference_forward.h)
// on each model, so a difference from llama.cpp is ours to explain, not the paging's.
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "model/model_config.h"
#include "golden_records.h"
#include "paged_harness.h"
#include "reference_forward.h"
#include "test_support.h"

using namespace kvscope;
using nlohmann::json;

namespace {

std::filesystem::path archs_dir() { return test::golden_dir() / "archs"; }

using test::load_json;
using test::load_logits;

// The architectures this suite must cover (issue 27's families, gpt-oss and deepseek2); the
// hybrids in the folder arrive with their own issue and are skipped until then.
const std::set<std::string>& required_archs() {
  static const std::set<std::string> a = {"qwen3moe", "glm4moe", "mistral3", "phi3",
                                          "glm4",     "smollm3", "gpt-oss",  "deepseek2"};
  return a;
}

// The index's cases (kept in a variable: a range-for over a temporary's member would dangle).
json index_cases() { return load_json(archs_dir() / "index.json")["cases"]; }

bool runs(const std::string& arch) {
  const auto& s = supported_architectures();
  return std::find(s.begin(), s.end(), arch) != s.end();
}

}  // namespace

class TestGoldenArchs : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(archs_dir() / "index.json")) QSKIP("../shared/golden/archs is not here");
  }

  // Every case of issue 27's architectures is in the index and loads.
  void index_covers_the_families() {
    std::set<std::string> seen;
    for (const auto& c : index_cases()) seen.insert(c["arch"].get<std::string>());
    for (const auto& a : required_archs()) {
      QVERIFY2(seen.count(a), a.c_str());
      QVERIFY2(runs(a), ("kvscope does not list " + a + " as supported").c_str());
    }
  }

  void teacher_forced_data() {
    QTest::addColumn<QString>("json_name");
    for (const auto& c : index_cases())
      if (runs(c["arch"].get<std::string>()))
        QTest::newRow(c["case"].get<std::string>().c_str()) << QString::fromStdString(c["json"].get<std::string>());
  }
  void teacher_forced() {
    QFETCH(QString, json_name);
    const json g = load_json(archs_dir() / json_name.toStdString());
    const auto model = Model::load((archs_dir() / g["model"].get<std::string>()).string());
    const auto prompt = g["prompt_tokens"].get<std::vector<TokenId>>();
    const auto tokens = g["tokens"].get<std::vector<TokenId>>();
    const auto want = load_logits(archs_dir() / g["logits_file"].get<std::string>());
    const size_t V = static_cast<size_t>(model->config.n_vocab), rows = tokens.size();
    QCOMPARE(want.size(), rows * V);
    const float tol = g.contains("tolerance") ? g["tolerance"].get<float>() : 2e-3f;
    // llama.cpp ran with n_ctx 512 (the record's settings), which picks phi3's long RoPE factors.
    AttentionPolicy policy;
    policy.context_len = g["settings"]["n_ctx"].get<int32_t>();
    test::PagedRun run(model, static_cast<int32_t>(prompt.size() + rows), 16, 7, KvDtype::F32, 2, policy);
    const auto got = run.teacher_forced(prompt, tokens, rows);
    float worst = 0;
    size_t worst_row = 0;
    for (size_t i = 0; i < rows; ++i) {
      const float d = test::max_abs_diff(got[i], want.data() + i * V, V);
      if (d > worst) worst = d, worst_row = i;
    }
    qInfo("%s: max |logit - llama.cpp| %.2e at step %zu (tolerance %.1e)", g["case"].get<std::string>().c_str(),
          static_cast<double>(worst), worst_row, static_cast<double>(tol));
    QVERIFY2(worst <= tol, qPrintable(QString("max diff %1 > %2 at step %3").arg(worst).arg(tol).arg(worst_row)));
  }

  // The paged, batched, threaded forward against the plain reference on the F32 models
  // (prompt and forced tokens fed one by one to the reference).
  void paged_matches_reference_data() {
    QTest::addColumn<QString>("json_name");
    for (const auto& c : index_cases()) {
      const std::string name = c["case"].get<std::string>();
      if (runs(c["arch"].get<std::string>()) && name.find("-q") == std::string::npos &&
          name.find("-iq") == std::string::npos && name.find("mxfp4") == std::string::npos)
        QTest::newRow(name.c_str()) << QString::fromStdString(c["json"].get<std::string>());
    }
  }
  void paged_matches_reference() {
    QFETCH(QString, json_name);
    const json g = load_json(archs_dir() / json_name.toStdString());
    const auto model = Model::load((archs_dir() / g["model"].get<std::string>()).string());
    auto prompt = g["prompt_tokens"].get<std::vector<TokenId>>();
    const auto tokens = g["tokens"].get<std::vector<TokenId>>();
    prompt.resize(24);  // enough positions to cross smollm3's no-RoPE layer and two blocks
    test::PagedRun run(model, 32, 8, 3);
    const auto got = run.teacher_forced(prompt, {tokens.begin(), tokens.begin() + 4}, 5);
    test::ReferenceForward ref(model);
    std::vector<float> want;
    for (TokenId t : prompt) want = ref.step(t);
    const size_t V = static_cast<size_t>(model->config.n_vocab);
    QVERIFY(test::max_abs_diff(got[0], want.data(), V) < 2e-4f);
    for (size_t i = 0; i < 4; ++i) {
      want = ref.step(tokens[i]);
      QVERIFY2(test::max_abs_diff(got[i + 1], want.data(), V) < 2e-4f, qPrintable(QString("step %1").arg(i + 1)));
    }
  }
};

QTEST_GUILESS_MAIN(TestGoldenArchs)
#include "test_golden_archs.moc"
