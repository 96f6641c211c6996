// What the CUDA backend refuses before uploading anything (cuda/cuda_model_support.h), checked
// on the CPU: its source is compiled into this test, so it runs on machines without nvcc too.
#include <QtTest>

#include "../cuda/cuda_model_support.h"
#include "model/synthetic_model.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::string missing_for(const std::string& arch, int32_t n_expert = 0, const std::string& rope_scaling = "") {
  SyntheticSpec s;
  s.rope_scaling = rope_scaling;
  s.rope_factor = 4.0f;
  s.arch = arch;
  s.n_vocab = 300;
  s.n_embd = 64;
  s.n_layer = 4;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_expert = n_expert;
  s.n_expert_used = n_expert > 0 ? 2 : 0;
  s.head_dim_swa = 8;  // gemma4: sliding heads of 8 beside full ones of 16
  s.n_head_kv_swa = 2;
  const auto path = test::tmp_dir() / ("cuda-support-" + arch + rope_scaling + ".gguf");
  write_synthetic_model(s, path.string());
  return cuda_missing_piece(*Model::load(path.string()));
}

}  // namespace

class TestCudaModelSupport : public QObject {
  Q_OBJECT
 private slots:
  void runs_what_it_implements() {
    for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3", "glm4"}) QCOMPARE(missing_for(arch), std::string());
  }
  void names_the_missing_piece() {
    QVERIFY(missing_for("qwen3moe", 4).find("mixture-of-experts") != std::string::npos);
    QVERIFY(missing_for("glm4moe", 4).find("mixture-of-experts") != std::string::npos);
    QVERIFY(missing_for("mistral3", 4).find("mixture-of-experts") != std::string::npos);
    QVERIFY(missing_for("smollm3").find("without RoPE") != std::string::npos);
    QVERIFY(missing_for("gpt-oss", 4).find("attention sinks") != std::string::npos);
    QVERIFY(missing_for("deepseek2", 4).find("latent attention") != std::string::npos);
    QVERIFY(missing_for("gemma4").find("per-layer head shapes") != std::string::npos);
    QVERIFY(missing_for("lfm2").find("recurrent layers") != std::string::npos);
    QVERIFY(missing_for("llama", 0, "yarn").find("YaRN") != std::string::npos);
    QCOMPARE(missing_for("llama", 0, "linear"), std::string());
  }
};

QTEST_GUILESS_MAIN(TestCudaModelSupport)
#include "test_cuda_model_support.moc"
