// Replays every input in tests/fuzz/regressions/ (minimized crashers found by scripts/fuzz.sh,
// kept with their fixes) through the fuzz target's own function, under ctest and so under the
// ASan/UBSan tree of scripts/sanitizers.sh. Also checks that the harness still reaches its last
// stage on valid models, so a fuzz run that "finds nothing" is not one that tests nothing.
#include <filesystem>
#include <fstream>

#include "fuzz/fuzz_one_input.h"
#include "model/synthetic_model.h"
#include "test_support.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

fs::path regressions_dir() {
  // This file's folder is known at compile time; fall back to walking up from the working dir.
  const fs::path here = kvscope::test::source_dir() / "tests" / "fuzz" / "regressions";
  if (fs::is_directory(here)) return here;
  for (auto p = fs::current_path(); !p.empty(); p = p.parent_path()) {
    if (fs::is_directory(p / "tests/fuzz/regressions")) return p / "tests/fuzz/regressions";
    if (p == p.root_path()) break;
  }
  return here;
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

QString describe(const fuzz::Outcome& o) {
  QString s = QString("parsed %1 config %2 weights %3 tokenizer %4 model %5 generated %6")
                  .arg(o.parsed)
                  .arg(o.config)
                  .arg(o.weights)
                  .arg(o.tokenizer)
                  .arg(o.model)
                  .arg(o.generated);
  if (!o.error.empty()) s += QString(" | %1").arg(QString::fromStdString(o.error).left(200));
  return s;
}

}  // namespace

class TestFuzzRegressions : public QObject {
  Q_OBJECT
 private slots:
  void replay_regressions_data() {
    QTest::addColumn<QString>("file");
    const fs::path dir = regressions_dir();
    QVERIFY2(fs::is_directory(dir), ("missing " + dir.string()).c_str());
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() != ".md") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) QTest::newRow("(none yet)") << QString();
    for (const auto& f : files) QTest::newRow(f.filename().c_str()) << QString::fromStdString(f.string());
  }
  // A crash, sanitizer report, failed harness invariant or undocumented exception type ends the
  // process or escapes here; a documented error is the expected outcome.
  void replay_regressions() {
    QFETCH(QString, file);
    if (file.isEmpty()) QSKIP("no regression inputs yet");
    const auto bytes = read_all(file.toStdString());
    const fuzz::Outcome o = fuzz::run_one(bytes.data(), bytes.size());
    qInfo("%s: %zu bytes: %s", qPrintable(QFileInfo(file).fileName()), bytes.size(), qPrintable(describe(o)));
  }

  void harness_reaches_generation_on_valid_models_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<int>("dtype");
    for (const char* a : {"llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "gpt-oss", "deepseek2", "gemma4", "lfm2",
                          "qwen35", "qwen35moe", "granitehybrid"})
      QTest::newRow(a) << a << int(GgmlType::F32);
    QTest::newRow("llama q8_0") << "llama" << int(GgmlType::Q8_0);
    QTest::newRow("llama q4_0") << "llama" << int(GgmlType::Q4_0);
  }
  void harness_reaches_generation_on_valid_models() {
    QFETCH(QString, arch);
    QFETCH(int, dtype);
    SyntheticSpec s;
    s.arch = arch.toStdString();
    s.n_vocab = 259;
    s.n_embd = 32;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 64;
    s.n_ctx = 64;
    s.sliding_window = 4;
    s.swa_pattern = 2;
    s.dtype = static_cast<GgmlType>(dtype);
    if (s.arch == "granitehybrid") s.ssm_state = 8;     // layer 0 Mamba-2, layer 1 attention (swa_pattern 2)
    if (s.arch == "qwen35" || s.arch == "qwen35moe") {  // layer 0 Gated DeltaNet, layer 1 gated attention
      s.full_attention_interval = 2;
      s.ssm_state = 8;
    }
    if (s.arch == "qwen3moe" || s.arch == "gpt-oss" || s.arch == "deepseek2" || s.arch == "qwen35moe") {
      s.n_expert = 4;
      s.n_expert_used = 2;
    }
    if (s.arch == "gemma4") {  // sliding heads of 4, full heads of 8, per-layer inputs of 8
      s.head_dim_swa = 4;
      s.n_embd_per_layer = 8;
      s.n_head_kv_swa = 2;
    }
    if (s.arch == "deepseek2") {  // a latent row of 16 + 8 RoPE values
      s.kv_lora_rank = 16;
      s.q_lora_rank = 16;
      s.mla_rope = 8;
    }
    const fs::path p = test::tmp_dir() / ("fuzz-harness-" + s.arch + "-" + std::to_string(dtype) + ".gguf");
    write_synthetic_model(s, p.string());
    const auto bytes = read_all(p);
    const fuzz::Outcome o = fuzz::run_one(bytes.data(), bytes.size());
    QVERIFY2(o.generated, qPrintable(describe(o)));
  }

  // The real files: stories260K runs end to end, the vocab-only files load their tokenizer.
  void harness_on_shared_files() {
    for (const char* name : {"stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf"}) {
      const fs::path p = test::models_dir() / name;
      KVSCOPE_REQUIRE_FILE(p);
      const auto bytes = read_all(p);
      const fuzz::Outcome o = fuzz::run_one(bytes.data(), bytes.size());
      QVERIFY2(o.tokenizer, qPrintable(describe(o)));
      qInfo("%s: %s", name, qPrintable(describe(o)));
    }
  }
};

QTEST_GUILESS_MAIN(TestFuzzRegressions)
#include "test_fuzz_regressions.moc"
