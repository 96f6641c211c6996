// The capacity planner's arithmetic: the problem statement's 70B table at 128K context, the
// real grouped-query figures, sliding-window / sink / shared-prefix accounting, and the same
// per-token bytes as the engine reports.
#include <QtTest>

#include "kv/kv_layout.h"
#include "kv/kv_planner.h"
#include "model/model.h"
#include "test_support.h"

using namespace kvscope;

namespace {

constexpr int64_t GiB = 1LL << 30;
constexpr int64_t MiB = 1LL << 20;

PlanInput input(const std::string& preset, int64_t context, const std::string& weights, KvDtype kv) {
  PlanInput in;
  in.model = *find_plan_preset(preset);
  in.context = context;
  in.weights = weights;
  in.kv_dtype = kv;
  return in;
}

}  // namespace

class TestPlanner : public QObject {
  Q_OBJECT
 private slots:
  // The statement: 70B at 128K context. FP16 weights 140 GB (decimal: 70e9 x 2 B); KV 320 "GB"
  // at FP16 counting all 64 heads as KV heads, which is 2.5 MiB/token x 131072 = 320 GiB;
  // INT4 weights 35 GB; FP8 KV 160 GiB of elements; FP8 + 32K window 40 GiB of elements.
  void statement_table_70b_128k() {
    PlanInput in = input("70B", *parse_token_count("128K"), "f16", KvDtype::F16);
    QCOMPARE(in.context, int64_t{131072});
    in.mha = true;
    PlanResult r = plan_memory(in);
    QCOMPARE(r.weights_bytes, int64_t{140'000'000'000});
    QCOMPARE(r.kv_heads, 64);
    QCOMPARE(r.kv_bytes_per_token, int64_t{2 * 80 * 64 * 128 * 2});  // 2.5 MiB
    QCOMPARE(r.kv_bytes, 320 * GiB);
    QCOMPARE(r.kv_scale_bytes, int64_t{0});
    QCOMPARE(r.total_bytes, 140'000'000'000 + 320 * GiB);
    QCOMPARE(r.gpus, 6);  // 483.6 GB / 80 GiB = 5.6

    in.weights = "int4";
    QCOMPARE(plan_memory(in).weights_bytes, int64_t{35'000'000'000});

    in.kv_dtype = KvDtype::FP8_E4M3;
    r = plan_memory(in);
    QCOMPARE(r.kv_element_bytes, 160 * GiB);
    // Our FP8 KV carries one f32 scale per token per head: +4 B per 128 elements (+3.1%).
    QCOMPARE(r.kv_scale_bytes, 2LL * 80 * 64 * 4 * 131072);
    QCOMPARE(r.kv_scale_bytes, 5 * GiB);
    QCOMPARE(r.kv_bytes, 165 * GiB);

    in.window = 32768;
    r = plan_memory(in);
    QCOMPARE(r.kv_element_bytes, 40 * GiB);
    QCOMPARE(r.groups.size(), size_t{1});
    QCOMPARE(r.groups[0].tokens_per_seq, int64_t{32768});
    QCOMPARE(r.total_bytes, 35'000'000'000 + 40 * GiB + 40 * GiB / 32);
    QCOMPARE(r.gpus, 1);
  }

  // What the statement's formula misses: Llama-70B has 8 KV heads (GQA), so FP16 KV at 128K is
  // 40 GiB, not 320.
  void grouped_query_attention() {
    PlanResult r = plan_memory(input("70B", 131072, "f16", KvDtype::F16));
    QCOMPARE(r.kv_heads, 8);
    QCOMPARE(r.kv_bytes_per_token, int64_t{327'680});  // 320 KiB per token
    QCOMPARE(r.kv_bytes, 40 * GiB);
    QCOMPARE(r.gpus, 3);  // 140 GB + 42.9 GB = 183 GB over 80 GiB GPUs
    QCOMPARE(plan_memory(input("Llama-3-70B", 131072, "f16", KvDtype::F16)).kv_bytes, 40 * GiB);
    QCOMPARE(plan_memory(input("Llama-2-70B", 4096, "f16", KvDtype::F16)).weights_bytes, int64_t{137'960'000'000});
    QCOMPARE(plan_memory(input("Qwen2.5-7B", 1, "f16", KvDtype::F16)).kv_bytes_per_token,
             int64_t{2 * 28 * 4 * 128 * 2});
    QCOMPARE(plan_memory(input("llama-3-70b", 1, "bf16", KvDtype::F16)).weights_bytes, int64_t{141'100'000'000});
  }

  // Models with their own sliding window: Mistral 7B v0.1 (every layer, 4096) and Gemma 3 27B
  // (52 local layers with 1024, 10 global).
  void model_sliding_windows() {
    PlanInput in = input("Mistral-7B", 32768, "f16", KvDtype::F16);
    in.batch = 8;
    PlanResult r = plan_memory(in);
    QCOMPARE(r.kv_bytes_per_token, int64_t{131'072});
    QCOMPARE(r.groups.size(), size_t{1});
    QCOMPARE(r.groups[0].window, 4096);
    QCOMPARE(r.kv_bytes, 8 * 4096 * 131072LL);  // 4 GiB instead of 32
    in.window = 1000;                           // a smaller window of our own narrows it
    QCOMPARE(plan_memory(in).groups[0].tokens_per_seq, int64_t{1000});

    r = plan_memory(input("Gemma-3-27B", 131072, "f16", KvDtype::F16));
    QCOMPARE(r.groups.size(), size_t{2});
    const int64_t layer_token = 2 * 16 * 128 * 2;
    QCOMPARE(r.groups[0].n_layer, 10);
    QCOMPARE(r.groups[1].n_layer, 52);
    QCOMPARE(r.kv_bytes, 10 * 131072 * layer_token + 52 * 1024 * layer_token);
    QCOMPARE(r.kv_bytes, 10 * GiB + 416 * MiB);
  }

  // MoE presets: the experts are FFN weights, so two models with the same attention store the
  // same KV per token whatever their experts (Qwen3-30B-A3B and -235B-A22B: 4 KV heads of 128),
  // while their weights differ by their total parameters.
  void moe_presets_kv_is_attention_only() {
    const PlanResult small = plan_memory(input("Qwen3-30B-A3B", 32768, "bf16", KvDtype::F16));
    const PlanResult big = plan_memory(input("Qwen3-235B-A22B", 32768, "bf16", KvDtype::F16));
    QCOMPARE(small.kv_bytes_per_token, int64_t{48 * 2 * 4 * 128 * 2});
    QCOMPARE(big.kv_bytes_per_token, int64_t{94 * 2 * 4 * 128 * 2});
    QCOMPARE(small.kv_bytes_per_token / 48, big.kv_bytes_per_token / 94);
    QCOMPARE(small.weights_bytes, int64_t{61'000'000'000});
    const PlanModel glm = *find_plan_preset("GLM-4.5");
    QCOMPARE(glm.n_expert, 160);
    QCOMPARE(glm.n_expert_used, 8);
    QCOMPARE(plan_memory(input("GLM-4.5", 131072, "fp8", KvDtype::F16)).kv_bytes_per_token,
             int64_t{92 * 2 * 8 * 128 * 2});
    for (const char* name : {"GLM-4.5-Air", "GLM-4.7", "Mistral-Small-3.2", "Phi-4", "SmolLM3-3B"})
      QVERIFY2(find_plan_preset(name).has_value(), name);
  }

  // gpt-oss-20b at 128K: 12 full layers keep every token, 12 sliding ones 128; 8 KV heads of 64.
  void gpt_oss_two_pools() {
    const PlanResult r = plan_memory(input("gpt-oss-20b", 131072, "f16", KvDtype::F16));
    const int64_t layer_token = 2 * 8 * 64 * 2;
    QCOMPARE(r.kv_bytes_per_token, 24 * layer_token);
    QCOMPARE(r.groups.size(), size_t{2});
    QCOMPARE(r.groups[0].n_layer, 12);
    QCOMPARE(r.groups[1].window, 128);
    QCOMPARE(r.kv_bytes, 12 * 131072 * layer_token + 12 * 128 * layer_token);  // 3 GiB + 3 MiB
  }

  // Gemma 4: each kind of layer with its own head shape, and the layers that read an earlier
  // layer's KV storing none. E2B: 35 layers, 3 full (1 KV head of 512) and 12 sliding (1 of 256)
  // keep KV, the other 20 borrow; 31B: 10 full layers of 4 x 512 and 50 sliding of 16 x 256.
  void gemma4_shapes_and_shared_kv() {
    const PlanResult e2b = plan_memory(input("Gemma-4-E2B", 131072, "bf16", KvDtype::F16));
    QCOMPARE(e2b.kv_bytes_per_token, int64_t{3 * 2 * 1 * 512 * 2 + 12 * 2 * 1 * 256 * 2});
    QCOMPARE(e2b.groups.size(), size_t{2});
    QCOMPARE(e2b.groups[0].n_layer, 3);
    QCOMPARE(e2b.groups[1].n_layer, 12);
    QCOMPARE(e2b.kv_bytes, int64_t{131072} * 3 * 2048 + int64_t{512} * 12 * 1024);
    QVERIFY2(e2b.formula.find("20 layers read an earlier layer's KV") != std::string::npos, e2b.formula.c_str());
    const PlanResult b31 = plan_memory(input("Gemma-4-31B", 4096, "bf16", KvDtype::F16));
    QCOMPARE(b31.kv_bytes_per_token, int64_t{10 * 2 * 4 * 512 * 2 + 50 * 2 * 16 * 256 * 2});
    const PlanResult int8 = plan_memory(input("Gemma-4-31B", 4096, "bf16", KvDtype::INT8));
    QCOMPARE(int8.kv_bytes_per_token, int64_t{10 * 2 * 4 * (512 + 4) + 50 * 2 * 16 * (256 + 4)});
  }

  // Hybrids: Qwen3.5-9B's 24 Gated DeltaNet layers keep 32 x 128 x 128 f32 + 3 x 8192 bf16 values
  // each per sequence, its 8 full layers 4 KV heads of 256 per token. At 32K on one 80 GiB GPU
  // beside 18 GB of bf16 weights: 60 sequences, against 15 for the same model with attention in
  // all 32 layers; the state equals the KV of 24 attention layers at 524 tokens.
  void hybrid_fixed_and_marginal_cost() {
    const PlanResult r = plan_memory(input("Qwen3.5-9B", 32768, "bf16", KvDtype::F16));
    const int64_t state_layer = int64_t{32} * 128 * 128 * 4 + int64_t{3} * (2 * 16 * 128 + 32 * 128) * 2;
    QCOMPARE(state_layer, int64_t{2146304});
    QCOMPARE(r.kv_bytes_per_token, int64_t{8 * 2 * 4 * 256 * 2});
    QCOMPARE(r.state_bytes_per_seq, 24 * state_layer);
    QCOMPARE(r.total_bytes, r.weights_bytes + r.kv_bytes + r.state_bytes);
    QCOMPARE(r.fit_gpus, 1);
    const double room = 80.0 * (1LL << 30) - 18e9;
    QCOMPARE(r.seqs_fit, static_cast<int64_t>(room / (24.0 * state_layer + 32768.0 * r.kv_bytes_per_token)));
    QCOMPARE(r.seqs_fit, int64_t{60});
    QCOMPARE(r.seqs_fit_full_attention, int64_t{15});
    QCOMPARE(r.break_even_tokens, int64_t{524});
    // fp8 KV shrinks only the attention layers' part: the state stays (vLLM RFC 55196's point).
    const PlanResult fp8 = plan_memory(input("Qwen3.5-9B", 32768, "bf16", KvDtype::FP8_E4M3));
    QCOMPARE(fp8.state_bytes_per_seq, r.state_bytes_per_seq);
    QVERIFY(fp8.kv_bytes_per_token < r.kv_bytes_per_token);
    // Eighty billion parameters need two GPUs before any sequence.
    QCOMPARE(plan_memory(input("Qwen3-Next-80B-A3B", 32768, "bf16", KvDtype::F16)).fit_gpus, 2);
  }

  // Latent attention: DeepSeek-V3 caches one row of 512 latent + 64 RoPE values per token and
  // layer (68.6 KiB per token in f16, the figure DeepSeek's paper gives as 70 KB), where the same
  // model counted as multi-head would cache 128 heads x (192 + 128): 71 times more. Kimi K2, with
  // half the heads, caches exactly as much. The 4-bit codecs are refused with the reason.
  void latent_presets() {
    const PlanResult ds = plan_memory(input("DeepSeek-V3", 131072, "fp8", KvDtype::F16));
    QCOMPARE(ds.kv_bytes_per_token, int64_t{61 * 576 * 2});
    QCOMPARE(ds.kv_element_bytes_per_token, int64_t{61 * 576 * 2});
    QVERIFY2(ds.formula.find("512 latent + 64 RoPE key") != std::string::npos, ds.formula.c_str());
    PlanInput mha = input("DeepSeek-V3", 131072, "fp8", KvDtype::F16);
    mha.mha = true;
    const PlanResult wide = plan_memory(mha);
    QCOMPARE(wide.kv_bytes_per_token, int64_t{61LL * 128 * (192 + 128) * 2});
    QCOMPARE(wide.kv_bytes_per_token / ds.kv_bytes_per_token, int64_t{71});
    QCOMPARE(plan_memory(input("Kimi-K2", 131072, "fp8", KvDtype::F16)).kv_bytes_per_token, ds.kv_bytes_per_token);
    const PlanResult int8 = plan_memory(input("DeepSeek-R1", 4096, "fp8", KvDtype::INT8));
    QCOMPARE(int8.kv_bytes_per_token, int64_t{61 * (576 + 4)});
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, plan_memory(input("DeepSeek-V3", 4096, "fp8", KvDtype::KIVI4)));
  }

  // Sinks keep S extra positions; a shared prefix is stored once for the whole batch, but only
  // the part of it that every sequence still keeps.
  void window_sinks_and_shared_prefix() {
    PlanModel m{"toy", 1e9, 2, 4, 2, 64, 4096, 0, 0, 0, ""};
    PlanInput in;
    in.model = m;
    in.weights = "f16";
    in.kv_dtype = KvDtype::F32;
    in.context = 1000;
    in.batch = 4;
    in.shared_prefix = 600;
    const int64_t tok = 2 * 2 * 2 * 64 * 4;  // all layers
    PlanResult r = plan_memory(in);
    QCOMPARE(r.groups[0].tokens_stored, int64_t{600 + 4 * 400});
    QCOMPARE(r.kv_bytes, (600 + 4 * 400) * tok);
    in.window = 300;
    in.sinks = 4;
    r = plan_memory(in);
    QCOMPARE(r.groups[0].tokens_per_seq, int64_t{304});
    QCOMPARE(r.groups[0].tokens_stored, int64_t{4 + 4 * 300});  // sinks shared, window private
    in.shared_prefix = 800;                                     // the window [700, 1000) now overlaps the prefix by 100
    QCOMPARE(plan_memory(in).groups[0].tokens_stored, int64_t{4 + 100 + 4 * 200});
    in.context = 200;  // shorter than the window: everything is kept
    in.shared_prefix = 0;
    QCOMPARE(plan_memory(in).groups[0].tokens_per_seq, int64_t{200});
  }

  void parsing_and_errors() {
    QCOMPARE(*parse_token_count("131072"), int64_t{131072});
    QCOMPARE(*parse_token_count("32k"), int64_t{32768});
    QCOMPARE(*parse_token_count("1M"), int64_t{1048576});
    QVERIFY(!parse_token_count("0"));
    QVERIFY(!parse_token_count("12x"));
    QVERIFY(!parse_token_count("K"));
    QCOMPARE(*weight_bits("Q4_0"), 4.5);
    QVERIFY(!weight_bits("int3"));
    QVERIFY(!find_plan_preset("GPT-5"));
    PlanInput in = input("70B", 1000, "f16", KvDtype::F16);
    in.weights = "int3";
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, plan_memory(in));
    in.weights = "f16";
    in.sinks = 4;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, plan_memory(in));  // sinks without a window
    in.sinks = 0;
    in.shared_prefix = 2000;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, plan_memory(in));
  }

  // The planner's per-token figure is the engine's (KvLayout::bytes_per_token), scales included.
  void same_bytes_as_engine() {
    KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf");
    auto model = Model::load((test::models_dir() / "stories260K.gguf").string());
    const ModelConfig& c = model->config;
    PlanModel m{"stories260K", 260e3, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_ctx_train, 0, 0, 0, ""};
    for (KvDtype t : kAllKvDtypes) {
      PlanInput in;
      in.model = m;
      in.weights = "f32";
      in.kv_dtype = t;
      in.context = 100;
      KvLayout L{c.n_layer, c.n_head_kv, c.head_dim, 16, 1, t};
      const PlanResult r = plan_memory(in);
      QCOMPARE(r.kv_bytes_per_token, L.bytes_per_token());
      QCOMPARE(r.kv_bytes, 100 * L.bytes_per_token());
    }
    PlanInput in;
    in.model = m;
    in.weights = "f32";
    in.kv_dtype = KvDtype::INT8;
    in.context = 1;
    QCOMPARE(plan_memory(in).kv_bytes_per_token, int64_t{480});
  }
};

QTEST_APPLESS_MAIN(TestPlanner)
#include "test_planner.moc"
