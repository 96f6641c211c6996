// Model files that parse as GGUF but do not make a model kvscope can run, each refused by
// Model::load with a message that names the problem (never a crash). The GGUF-level matrix
// (magic, v1, truncation, overflow, offsets, overlap, alignment...) is in test_gguf.cpp; this is
// the model level: shapes, vocabulary, layers, heads, tensors, types, non-finite weights, and a
// file that changes on disk while it is loaded.
//
// Files are random-weight models from write_synthetic_model, copied through GgufWriter with one
// edit (tests/fuzz/gguf_rewrite.h).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "fuzz/gguf_rewrite.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "test_support.h"

using namespace kvscope;
namespace fs = std::filesystem;
using kvscope::test::RewriteEdits;
using kvscope::test::TensorCopy;

namespace {

// 2 layers, n_embd 32, 4 query heads of 8, 2 KV heads, n_ff 64, 259 tokens: ~60 KiB.
SyntheticSpec tiny(const std::string& arch = "llama") {
  SyntheticSpec s;
  s.arch = arch;
  s.n_vocab = 259;
  s.n_embd = 32;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 64;
  s.n_ctx = 128;
  if (arch == "qwen3moe" || arch == "glm4moe" || arch == "gpt-oss" || arch == "deepseek2") {  // 8 experts, 2 routed
    s.n_expert = 8;
    s.n_expert_used = 2;
  }
  if (arch == "lfm2") s.swa_pattern = 2;           // layer 0 a short convolution, layer 1 attention
  if (arch == "granitehybrid") s.swa_pattern = 2;  // layer 0 Mamba-2, layer 1 attention
  if (arch == "qwen35") {                          // layer 0 Gated DeltaNet, layer 1 gated attention
    s.full_attention_interval = 2;
    s.ssm_state = 8;
    s.rope_dim = 4;
  }
  if (arch == "gemma4") {  // layers 0, 2 slide (head 4), 1, 3 are full (head 8)
    s.n_layer = 4;
    s.swa_pattern = 2;
    s.head_dim_swa = 4;
    s.n_head_kv_swa = 2;
    s.n_embd_per_layer = 8;
  }
  if (arch == "deepseek2") {  // a latent row of 16 + 8 RoPE dims
    s.kv_lora_rank = 16;
    s.q_lora_rank = 16;
    s.mla_rope = 8;
  }
  return s;
}

fs::path tmp_path(const std::string& name) { return test::tmp_dir() / ("model-errors-" + name + ".gguf"); }

std::shared_ptr<GgufFile> base_file(const std::string& arch = "llama") {
  const fs::path p = tmp_path("base-" + arch);
  write_synthetic_model(tiny(arch), p.string());
  return GgufFile::open(p.string());
}

// Writes base (of arch) with the edits, plus metadata overrides applied by `meta`.
fs::path make(const std::string& name, const RewriteEdits& edits, const std::function<void(GgufWriter&)>& meta = {},
              const std::string& arch = "llama") {
  auto f = base_file(arch);
  GgufWriter w = test::rewrite_gguf(*f, edits);
  if (meta) meta(w);
  const fs::path p = tmp_path(name);
  w.write(p.string());
  return p;
}
fs::path make_meta(const std::string& name, const std::function<void(GgufWriter&)>& meta) {
  return make(name, {}, meta);
}

// The message Model::load refuses `p` with, prefixed by the exception type; "" if it loads.
std::string load_error(const fs::path& p) {
  try {
    Model::load(p.string());
  } catch (const GgufError& e) { return std::string("GgufError: ") + e.what(); } catch (const ModelError& e) {
    return std::string("ModelError: ") + e.what();
  } catch (const std::runtime_error& e) {
    return std::string("runtime_error: ") + e.what();
  } catch (const std::exception& e) { return std::string("WRONG EXCEPTION TYPE: ") + e.what(); }
  return {};
}

#define EXPECT_LOAD_ERROR(path, ...)                                             \
  do {                                                                           \
    const std::string msg_ = load_error(path);                                   \
    QVERIFY2(!msg_.empty(), "the broken model was accepted");                    \
    QVERIFY2(msg_.find("WRONG EXCEPTION") == std::string::npos, msg_.c_str());   \
    for (const char* word_ : {__VA_ARGS__})                                      \
      QVERIFY2(msg_.find(word_) != std::string::npos,                            \
               ("message lacks '" + std::string(word_) + "': " + msg_).c_str()); \
    qInfo("%s", msg_.c_str());                                                   \
  } while (0)

RewriteEdits edit_tensor(const std::string& name, std::function<void(TensorCopy&)> fn) {
  RewriteEdits e;
  e.tensor = [name, fn](TensorCopy& c) {
    if (c.name == name) fn(c);
  };
  return e;
}

// Greedy or sampled generation on a loaded model; every generated id must be in the vocabulary.
struct GenResult {
  SeqState state;
  std::string error;
  std::vector<TokenId> output;
  int64_t non_finite_logits = 0;
};
GenResult generate(const std::shared_ptr<Model>& m, float temperature, int n_new) {
  EngineConfig cfg;
  cfg.num_blocks = 32;
  cfg.block_size = 8;
  Engine e(m, std::make_unique<CpuBackend>(m, 1), cfg);
  Request r;
  r.prompt = m->tokenizer->encode("hello there", true, false);
  r.max_new_tokens = n_new;
  r.ignore_eos = true;
  r.record_logits = true;
  r.sampling.temperature = temperature;
  r.sampling.top_k = 0;
  r.sampling.seed = 7;
  const SeqId id = e.submit(r);
  e.run_until_idle();
  GenResult g{e.sequence(id).state, e.sequence(id).error, e.sequence(id).output_tokens()};
  for (const auto& row : e.recorded_logits(id))
    for (float x : row) g.non_finite_logits += !std::isfinite(x);
  return g;
}

}  // namespace

class TestModelErrors : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    // The unedited copy loads: every failure below comes from its one edit.
    const fs::path p = make("unedited", {});
    QCOMPARE(load_error(p), std::string());
    for (const char* arch : {"qwen2", "qwen3", "gemma3", "qwen3moe", "glm4moe", "mistral3", "phi3", "glm4", "smollm3",
                             "gpt-oss", "deepseek2", "gemma4", "lfm2"})
      QCOMPARE(load_error(make(std::string("unedited-") + arch, {}, {}, arch)), std::string());
  }

  // --- shapes and sizes ---------------------------------------------------------------------

  void wrong_tensor_shape_for_architecture() {
    // attn_k must be [n_embd, n_head_kv * head_dim] = [32, 16].
    EXPECT_LOAD_ERROR(make("shape-attn-k", edit_tensor("blk.0.attn_k.weight",
                                                       [](TensorCopy& c) {
                                                         c.ne = {32, 8};
                                                         c.data.resize(32 * 8);
                                                       })),
                      "ModelError", "blk.0.attn_k.weight", "[32, 8]", "expected [32, 16]");
    // ffn_down written transposed: [n_embd, n_ff] instead of [n_ff, n_embd].
    EXPECT_LOAD_ERROR(make("shape-ffn-down-transposed", edit_tensor("blk.1.ffn_down.weight",
                                                                    [](TensorCopy& c) {
                                                                      c.ne = {32, 64};
                                                                    })),
                      "blk.1.ffn_down.weight", "[32, 64]", "expected [64, 32]");
    // A norm with the wrong length, and a matrix with an extra dimension.
    EXPECT_LOAD_ERROR(make("shape-norm", edit_tensor("output_norm.weight",
                                                     [](TensorCopy& c) {
                                                       c.ne = {16};
                                                       c.data.resize(16);
                                                     })),
                      "output_norm.weight", "[16]", "expected [32]");
    EXPECT_LOAD_ERROR(make("shape-3d", edit_tensor("blk.0.attn_q.weight",
                                                   [](TensorCopy& c) {
                                                     c.ne = {32, 16, 2};
                                                   })),
                      "blk.0.attn_q.weight", "[32, 16, 2]");
    // Architecture-specific tensors: qwen3's per-head q/k norms are [head_dim] = [8].
    EXPECT_LOAD_ERROR(make("shape-qwen3-qnorm",
                           edit_tensor("blk.0.attn_q_norm.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {32};
                                         c.data.resize(32, 1.0f);
                                       }),
                           {}, "qwen3"),
                      "blk.0.attn_q_norm.weight", "expected [8]");
  }

  void architecture_tensor_missing() {
    // qwen2 needs q/k/v biases, gemma3 its post-norms: the same tensor set as llama is not enough.
    RewriteEdits drop_bias;
    drop_bias.tensor = [](TensorCopy& c) { c.keep = c.name != "blk.1.attn_v.bias"; };
    EXPECT_LOAD_ERROR(make("qwen2-no-bias", drop_bias, {}, "qwen2"), "missing tensor 'blk.1.attn_v.bias'");
    RewriteEdits drop_post;
    drop_post.tensor = [](TensorCopy& c) { c.keep = c.name.find("post_ffw_norm") == std::string::npos; };
    EXPECT_LOAD_ERROR(make("gemma3-no-post-norm", drop_post, {}, "gemma3"),
                      "missing tensor 'blk.0.post_ffw_norm.weight'");
  }

  // Inconsistent MoE settings and expert tensors: the key or tensor is named, and the file.
  void moe_settings_and_tensors_checked() {
    auto moe_meta = [](const char* name, std::function<void(GgufWriter&)> meta) {
      return make(name, {}, std::move(meta), "qwen3moe");
    };
    EXPECT_LOAD_ERROR(moe_meta("moe-0-experts", [](GgufWriter& w) { w.set_u32("qwen3moe.expert_count", 0); }),
                      "ModelError", "qwen3moe.expert_count = 0", "out of range", "moe-0-experts");
    EXPECT_LOAD_ERROR(moe_meta("moe-used-9-of-8", [](GgufWriter& w) { w.set_u32("qwen3moe.expert_used_count", 9); }),
                      "qwen3moe.expert_used_count = 9", "[1, 8]");
    RewriteEdits no_router;
    no_router.tensor = [](TensorCopy& c) { c.keep = c.name != "blk.1.ffn_gate_inp.weight"; };
    EXPECT_LOAD_ERROR(make("moe-no-router", no_router, {}, "qwen3moe"), "missing tensor 'blk.1.ffn_gate_inp.weight'",
                      "moe-no-router");
    // 8 experts of 32 rows each, written as 4 experts of 64.
    EXPECT_LOAD_ERROR(make("moe-expert-shape",
                           edit_tensor("blk.0.ffn_up_exps.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {32, 64, 4};
                                       }),
                           {}, "qwen3moe"),
                      "blk.0.ffn_up_exps.weight", "expected [32, 32, 8]");
    // glm4moe: its selection bias, shared expert and gating function.
    RewriteEdits no_bias;
    no_bias.tensor = [](TensorCopy& c) { c.keep = c.name != "blk.1.exp_probs_b.bias"; };
    EXPECT_LOAD_ERROR(make("glm4moe-no-bias", no_bias, {}, "glm4moe"), "missing tensor 'blk.1.exp_probs_b.bias'");
    EXPECT_LOAD_ERROR(
        make(
            "glm4moe-gating", {}, [](GgufWriter& w) { w.set_u32("glm4moe.expert_gating_func", 7); }, "glm4moe"),
        "glm4moe.expert_gating_func = 7");
    EXPECT_LOAD_ERROR(make(
                          "glm4moe-dense-lead", {},
                          [](GgufWriter& w) { w.set_u32("glm4moe.leading_dense_block_count", 5); }, "glm4moe"),
                      "glm4moe.leading_dense_block_count = 5");
  }

  // gpt-oss: its learned sinks (one per query head), its sliding window and per-layer pattern.
  void gpt_oss_sinks_and_window_checked() {
    EXPECT_LOAD_ERROR(make("gpt-oss-sinks-shape",
                           edit_tensor("blk.1.attn_sinks.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {2};
                                         c.data.resize(2);
                                       }),
                           {}, "gpt-oss"),
                      "blk.1.attn_sinks.weight", "expected [4]", "gpt-oss-sinks-shape");
    EXPECT_LOAD_ERROR(
        make(
            "gpt-oss-window-0", {}, [](GgufWriter& w) { w.set_u32("gpt-oss.attention.sliding_window", 0); }, "gpt-oss"),
        "gpt-oss.attention.sliding_window is 0");
    EXPECT_LOAD_ERROR(
        make(
            "gpt-oss-pattern", {},
            [](GgufWriter& w) { w.set_i32_array("gpt-oss.attention.sliding_window_pattern", {1}); }, "gpt-oss"),
        "sliding_window_pattern has 1 entries for 2 layers");
  }

  // gemma4: its per-layer flags, its window, and the layers that borrow KV.
  void gemma4_shared_kv_and_window_checked() {
    auto meta = [](const std::string& name, std::function<void(GgufWriter&)> fn) {
      return make("gemma4-" + name, {}, std::move(fn), "gemma4");
    };
    // Layer 3 (full) would read layer 2's KV, a sliding layer.
    EXPECT_LOAD_ERROR(meta("shared-kind", [](GgufWriter& w) { w.set_u32("gemma4.attention.shared_kv_layers", 1); }),
                      "gemma4.attention.shared_kv_layers", "would read the KV of layer 2", "gemma4-shared-kind");
    EXPECT_LOAD_ERROR(meta("shared-all", [](GgufWriter& w) { w.set_u32("gemma4.attention.shared_kv_layers", 3); }),
                      "gemma4.attention.shared_kv_layers = 3 leaves 1 layers");
    EXPECT_LOAD_ERROR(meta("shared-range", [](GgufWriter& w) { w.set_u32("gemma4.attention.shared_kv_layers", 4); }),
                      "gemma4.attention.shared_kv_layers = 4 is out of range");
    EXPECT_LOAD_ERROR(meta("window-0", [](GgufWriter& w) { w.set_u32("gemma4.attention.sliding_window", 0); }),
                      "gemma4.attention.sliding_window is 0");
    EXPECT_LOAD_ERROR(
        meta("pattern-number", [](GgufWriter& w) { w.set_u32("gemma4.attention.sliding_window_pattern", 2); }),
        "gemma4.attention.sliding_window_pattern must hold one flag per layer");
    EXPECT_LOAD_ERROR(meta("kv-heads",
                           [](GgufWriter& w) {
                             w.set_i32_array("gemma4.attention.head_count_kv", {2, 2, 1, 2});
                           }),
                      "gemma4.attention.head_count_kv differs between layers of the same kind");
    EXPECT_LOAD_ERROR(meta("kv-heads-3",
                           [](GgufWriter& w) {
                             w.set_i32_array("gemma4.attention.head_count_kv", {3, 2, 3, 2});
                           }),
                      "gemma4.attention.head_count_kv", "do not divide");
    EXPECT_LOAD_ERROR(meta("value-length", [](GgufWriter& w) { w.set_u32("gemma4.attention.value_length_swa", 8); }),
                      "gemma4.attention.value_length_swa must equal");
    EXPECT_LOAD_ERROR(make("gemma4-ple-shape",
                           edit_tensor("blk.1.inp_gate.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {32, 4};
                                         c.data.resize(128);
                                       }),
                           {}, "gemma4"),
                      "blk.1.inp_gate.weight", "expected [32, 8]");
  }

  // lfm2: the convolution's taps, which layers are recurrent, and at least one attention layer.
  void lfm2_recurrent_layers_checked() {
    auto meta = [](const std::string& name, std::function<void(GgufWriter&)> fn) {
      return make("lfm2-" + name, {}, std::move(fn), "lfm2");
    };
    EXPECT_LOAD_ERROR(meta("kernel-0", [](GgufWriter& w) { w.set_u32("lfm2.shortconv.l_cache", 0); }),
                      "lfm2.shortconv.l_cache = 0 is out of range", "lfm2-kernel-0");
    EXPECT_LOAD_ERROR(meta("recurrent-with-kv",
                           [](GgufWriter& w) {
                             w.set_i32_array("lfm2.attention.recurrent_layers", {1, 1});
                           }),
                      "lfm2.attention.recurrent_layers marks layer 1 recurrent", "gives it 2 KV heads");
    EXPECT_LOAD_ERROR(meta("no-attention",
                           [](GgufWriter& w) {
                             w.set_i32_array("lfm2.attention.head_count_kv", {0, 0});
                           }),
                      "lfm2.attention.head_count_kv is 0 in every layer");
    EXPECT_LOAD_ERROR(meta("no-taps", [](GgufWriter& w) { w.set_u32("lfm2.shortconv.l_cache", 1); }),
                      "lfm2.shortconv.l_cache = 1");
    EXPECT_LOAD_ERROR(make("lfm2-conv-shape",
                           edit_tensor("blk.0.shortconv.conv.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {2, 32};
                                         c.data.resize(64);
                                       }),
                           {}, "lfm2"),
                      "blk.0.shortconv.conv.weight", "expected [3, 32]");
  }

  // qwen35: the ssm.* keys, which layers run the delta rule, and the M-RoPE sections.
  void qwen35_recurrent_layers_checked() {
    auto meta = [](const std::string& name, std::function<void(GgufWriter&)> fn) {
      return make("qwen35-" + name, {}, std::move(fn), "qwen35");
    };
    EXPECT_LOAD_ERROR(meta("state-0", [](GgufWriter& w) { w.set_u32("qwen35.ssm.state_size", 0); }),
                      "qwen35.ssm.state_size = 0 is out of range", "qwen35-state-0");
    EXPECT_LOAD_ERROR(meta("kernel-0", [](GgufWriter& w) { w.set_u32("qwen35.ssm.conv_kernel", 0); }),
                      "qwen35.ssm.conv_kernel = 0 is out of range");
    EXPECT_LOAD_ERROR(meta("interval", [](GgufWriter& w) { w.set_u32("qwen35.full_attention_interval", 3); }),
                      "qwen35.full_attention_interval = 3 is out of range");
    EXPECT_LOAD_ERROR(meta("recurrent-with-kv",
                           [](GgufWriter& w) {
                             w.set_i32_array("qwen35.attention.recurrent_layers", {1, 0});
                             w.set_i32_array("qwen35.attention.head_count_kv", {2, 2});
                           }),
                      "qwen35.attention.head_count_kv gives recurrent layer 0 2 KV heads");
    EXPECT_LOAD_ERROR(meta("no-attention",
                           [](GgufWriter& w) {
                             w.set_i32_array("qwen35.attention.recurrent_layers", {1, 1});
                           }),
                      "qwen35.attention.recurrent_layers marks every layer recurrent");
    EXPECT_LOAD_ERROR(meta("inner", [](GgufWriter& w) { w.set_u32("qwen35.ssm.inner_size", 40); }),
                      "qwen35.ssm.inner_size 40 != ssm.time_step_rank x ssm.state_size (32)");
    EXPECT_LOAD_ERROR(meta("groups", [](GgufWriter& w) { w.set_u32("qwen35.ssm.group_count", 3); }),
                      "qwen35.ssm.group_count 3 does not divide ssm.time_step_rank 4");
    EXPECT_LOAD_ERROR(meta("sections",
                           [](GgufWriter& w) {
                             w.set_i32_array("qwen35.rope.dimension_sections", {1, 0, 0, 1});
                           }),
                      "qwen35.rope.dimension_sections puts rotated pair 1 in the fourth");
    EXPECT_LOAD_ERROR(make("qwen35-conv-shape",
                           edit_tensor("blk.0.ssm_conv1d.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {3, 64};
                                         c.data.resize(192);
                                       }),
                           {}, "qwen35"),
                      "blk.0.ssm_conv1d.weight", "expected [4, 64]");
  }

  // granitehybrid: the Mamba-2 sizes, which layers recur, and its MoE form refused by name.
  void granitehybrid_recurrent_layers_checked() {
    auto meta = [](const std::string& name, std::function<void(GgufWriter&)> fn) {
      return make("granite-" + name, {}, std::move(fn), "granitehybrid");
    };
    EXPECT_LOAD_ERROR(meta("inner", [](GgufWriter& w) { w.set_u32("granitehybrid.ssm.inner_size", 48); }),
                      "granitehybrid.ssm.inner_size 48 is not 2 x embedding_length (64)", "granite-inner");
    EXPECT_LOAD_ERROR(meta("state-0", [](GgufWriter& w) { w.set_u32("granitehybrid.ssm.state_size", 0); }),
                      "granitehybrid.ssm.state_size = 0 is out of range");
    EXPECT_LOAD_ERROR(meta("kernel-1", [](GgufWriter& w) { w.set_u32("granitehybrid.ssm.conv_kernel", 1); }),
                      "granitehybrid.ssm.conv_kernel = 1 is out of range");
    EXPECT_LOAD_ERROR(meta("groups", [](GgufWriter& w) { w.set_u32("granitehybrid.ssm.group_count", 3); }),
                      "ssm.group_count 3");
    EXPECT_LOAD_ERROR(meta("no-attention",
                           [](GgufWriter& w) {
                             w.set_i32_array("granitehybrid.attention.head_count_kv", {0, 0});
                           }),
                      "granitehybrid.attention.head_count_kv is 0 in every layer");
    EXPECT_LOAD_ERROR(meta("moe", [](GgufWriter& w) { w.set_u32("granitehybrid.expert_count", 4); }),
                      "granitehybrid.expert_count is 4", "mixture-of-experts");
    EXPECT_LOAD_ERROR(make("granite-conv-shape",
                           edit_tensor("blk.0.ssm_conv1d.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {3, 96};
                                         c.data.resize(288);
                                       }),
                           {}, "granitehybrid"),
                      "blk.0.ssm_conv1d.weight", "expected [4, 192]");
  }

  // deepseek2's latent attention: its ranks and widths must describe one latent row per token.
  void deepseek2_latent_shape_checked() {
    EXPECT_LOAD_ERROR(make(
                          "deepseek2-kv-lora-0", {},
                          [](GgufWriter& w) { w.set_u32("deepseek2.attention.kv_lora_rank", 0); }, "deepseek2"),
                      "deepseek2.attention.kv_lora_rank = 0 is out of range", "deepseek2-kv-lora-0");
    EXPECT_LOAD_ERROR(make(
                          "deepseek2-key-length", {},
                          [](GgufWriter& w) { w.set_u32("deepseek2.attention.key_length", 16); }, "deepseek2"),
                      "deepseek2.attention.key_length 16", "kv_lora_rank + rope = 24");
    RewriteEdits old_form;  // a file converted before llama.cpp's latent form
    old_form.keep_key = [](const std::string& k) { return k != "deepseek2.attention.key_length_mla"; };
    EXPECT_LOAD_ERROR(make("deepseek2-old-form", old_form, {}, "deepseek2"), "key_length_mla is missing",
                      "convert the model again");
    EXPECT_LOAD_ERROR(make("deepseek2-k-b-shape",
                           edit_tensor("blk.1.attn_k_b.weight",
                                       [](TensorCopy& c) {
                                         c.ne = {8, 8, 4};
                                         c.data.resize(8 * 8 * 4);
                                       }),
                           {}, "deepseek2"),
                      "blk.1.attn_k_b.weight", "expected [8, 16, 4]");
  }

  void vocabulary_size_mismatch() {
    // 259 tokens in the tokenizer, 300 rows in the embedding (and the output matrix).
    RewriteEdits more_rows;
    more_rows.tensor = [](TensorCopy& c) {
      if (c.name == "token_embd.weight" || c.name == "output.weight") {
        c.ne = {32, 300};
        c.data.resize(32 * 300, 0.01f);
      }
    };
    EXPECT_LOAD_ERROR(make("vocab-mismatch", more_rows), "ModelError", "vocabulary size mismatch", "259", "300");
    // Embedding right, output matrix not.
    EXPECT_LOAD_ERROR(make("vocab-mismatch-output", edit_tensor("output.weight",
                                                                [](TensorCopy& c) {
                                                                  c.ne = {32, 258};
                                                                  c.data.resize(32 * 258);
                                                                })),
                      "output.weight", "expected [32, 259]");
  }

  void zero_layer_model() {
    EXPECT_LOAD_ERROR(make_meta("zero-layers", [](GgufWriter& w) { w.set_u32("llama.block_count", 0); }), "ModelError",
                      "llama.block_count = 0", "out of range");
  }

  void head_counts_do_not_divide() {
    EXPECT_LOAD_ERROR(make_meta("heads-3-kv", [](GgufWriter& w) { w.set_u32("llama.attention.head_count_kv", 3); }),
                      "ModelError", "head counts do not divide", "4 query heads", "3 KV heads");
    // n_embd 32 is not a multiple of 5 heads and no key_length says otherwise.
    auto f = base_file();
    RewriteEdits e;
    e.keep_key = [](const std::string& k) {
      return k != "llama.attention.key_length" && k != "llama.attention.value_length" &&
             k != "llama.rope.dimension_count";
    };
    GgufWriter w = test::rewrite_gguf(*f, e);
    w.set_u32("llama.attention.head_count", 5);
    w.set_u32("llama.attention.head_count_kv", 5);
    w.write(tmp_path("heads-5").string());
    EXPECT_LOAD_ERROR(tmp_path("heads-5"), "not a multiple of head_count 5");
    // Heads that divide but do not match the tensors: 8 heads of 8 need attn_q [32, 64].
    EXPECT_LOAD_ERROR(make_meta("heads-8", [](GgufWriter& w) { w.set_u32("llama.attention.head_count", 8); }),
                      "blk.0.attn_q.weight", "expected [32, 64]");
  }

  void missing_tensor() {
    RewriteEdits e;
    e.tensor = [](TensorCopy& c) { c.keep = c.name != "blk.1.ffn_up.weight"; };
    EXPECT_LOAD_ERROR(make("missing-ffn-up", e), "ModelError", "missing tensor 'blk.1.ffn_up.weight'");
    // The header promises a third layer the file does not have.
    EXPECT_LOAD_ERROR(make_meta("missing-layer", [](GgufWriter& w) { w.set_u32("llama.block_count", 3); }),
                      "missing tensor 'blk.2.");
  }

  void unsupported_architecture() {
    EXPECT_LOAD_ERROR(make_meta("mamba", [](GgufWriter& w) { w.set_string("general.architecture", "mamba"); }),
                      "ModelError", "unsupported architecture 'mamba'", "llama, qwen2, qwen3, gemma3");
    RewriteEdits no_arch;
    no_arch.keep_key = [](const std::string& k) { return k != "general.architecture"; };
    EXPECT_LOAD_ERROR(make("no-arch", no_arch), "missing 'general.architecture'");
  }

  void unsupported_tensor_type() {
    // q8_1 is a real ggml type (32 elements in 36 bytes) that kvscope does not multiply: ggml
    // uses it for activations only. The still-refused IQ*/TQ* types have 256-element blocks,
    // which this model's 32-wide rows cannot hold, so they would fail on shape first.
    EXPECT_LOAD_ERROR(make("q8_1", edit_tensor("blk.0.attn_q.weight",
                                               [](TensorCopy& c) {
                                                 c.raw = true;
                                                 c.raw_type = 9;
                                                 c.raw_bytes.assign(32 * 36, 0);
                                               })),
                      "ModelError", "blk.0.attn_q.weight", "q8_1", "does not support");
    // A type number ggml never defined: nothing can size it.
    EXPECT_LOAD_ERROR(make("type-77", edit_tensor("blk.1.ffn_gate.weight",
                                                  [](TensorCopy& c) {
                                                    c.raw = true;
                                                    c.raw_type = 77;
                                                    c.raw_bytes.assign(64, 0);
                                                  })),
                      "blk.1.ffn_gate.weight", "unknown type 77");
  }

  // A SentencePiece vocabulary with neither a <0xFF> token nor an unknown token cannot encode a
  // prompt holding that byte: refused at load, not at the first such prompt.
  void tokenizer_cannot_encode_every_byte() {
    auto f = base_file();
    GgufWriter w = test::rewrite_gguf(*f);
    GgufValue toks = *f->find("tokenizer.ggml.tokens");
    toks.arr[3 + 0xFF].s = "<0xFG>";  // ids 3..258 are <0x00>..<0xFF>
    w.set("tokenizer.ggml.tokens", toks);
    w.set_u32("tokenizer.ggml.unknown_token_id", 99999);  // out of range: no unknown token
    w.write(tmp_path("no-byte-ff").string());
    EXPECT_LOAD_ERROR(tmp_path("no-byte-ff"), "ModelError", "cannot encode byte 0xFF", "no unknown token");
  }

  // --- non-finite weights -------------------------------------------------------------------

  // Norms, biases and q/k norms are read into f32 at load: a NaN or Inf there is refused.
  void nan_inf_in_small_tensors_refused() {
    EXPECT_LOAD_ERROR(
        make("nan-attn-norm", edit_tensor("blk.0.attn_norm.weight", [](TensorCopy& c) { c.data[5] = std::nanf(""); })),
        "ModelError", "blk.0.attn_norm.weight", "NaN or Inf");
    EXPECT_LOAD_ERROR(
        make("inf-output-norm", edit_tensor("output_norm.weight", [](TensorCopy& c) { c.data[0] = -INFINITY; })),
        "output_norm.weight", "NaN or Inf");
    EXPECT_LOAD_ERROR(
        make("nan-qwen2-bias", edit_tensor("blk.1.attn_k.bias", [](TensorCopy& c) { c.data[2] = NAN; }), {}, "qwen2"),
        "blk.1.attn_k.bias", "NaN or Inf");
  }

  // Weight matrices are NOT scanned at load: they stay zero-copy in the mapping, and a scan
  // would read the whole file (seconds for a multi-GiB model) before the first token. A NaN or
  // Inf there loads; generation must still not crash nor emit out-of-vocabulary ids. The
  // non-finite logits it produces are counted here; the engine is where to refuse them.
  void nan_inf_in_matrices_do_not_crash_generation_data() {
    QTest::addColumn<QString>("tensor");
    QTest::addColumn<int>("index");
    QTest::addColumn<float>("value");
    QTest::addColumn<float>("temperature");
    // One NaN row of the output matrix: one NaN logit among finite ones (the hard case for a
    // sampler that sorts), greedy and sampled.
    QTest::newRow("output row NaN, greedy") << "output.weight" << 32 * 40 + 3 << NAN << 0.0f;
    QTest::newRow("output row NaN, sampled") << "output.weight" << 32 * 40 + 3 << NAN << 0.9f;
    QTest::newRow("output row +Inf, sampled") << "output.weight" << 32 * 100 << INFINITY << 0.9f;
    QTest::newRow("attn_q Inf, sampled") << "blk.0.attn_q.weight" << 17 << INFINITY << 0.9f;
    QTest::newRow("ffn_down NaN, greedy") << "blk.1.ffn_down.weight" << 5 << NAN << 0.0f;
    QTest::newRow("embedding NaN, sampled") << "token_embd.weight" << 32 * 1 + 1 << NAN << 0.9f;  // BOS row
  }
  void nan_inf_in_matrices_do_not_crash_generation() {
    QFETCH(QString, tensor);
    QFETCH(int, index);
    QFETCH(float, value);
    QFETCH(float, temperature);
    const std::string name = tensor.toStdString();
    const fs::path p = make("nonfinite-" + name + "-" + std::to_string(index),
                            edit_tensor(name, [&](TensorCopy& c) { c.data[static_cast<size_t>(index)] = value; }));
    QCOMPARE(load_error(p), std::string());  // loads: matrices are not scanned (see above)
    auto m = Model::load(p.string());
    const GenResult g = generate(m, temperature, 24);
    const int32_t n_vocab = m->config.n_vocab;
    for (TokenId t : g.output) QVERIFY(t >= 0 && t < n_vocab);
    if (g.error.empty()) {
      QCOMPARE(g.state, SeqState::Finished);
      QCOMPARE(g.output.size(), size_t(24));
    } else {
      // Once the engine refuses non-finite logits, the request ends early with a reason.
      QVERIFY(g.state != SeqState::Waiting && g.state != SeqState::Running);
    }
    qInfo("%s[%d] = %g, T = %.1f: %s, %lld non-finite logits over %zu steps %s", name.c_str(), index, value,
          temperature, seq_state_name(g.state), static_cast<long long>(g.non_finite_logits), g.output.size(),
          g.non_finite_logits && g.error.empty() ? " (NOT REPORTED by the engine)" : g.error.c_str());
  }

  // --- the file on disk changes while it is loaded ------------------------------------------

  // Replacing the file (write a new one, rename over it: what converters and downloaders do)
  // or deleting it leaves the loaded model intact.
  void file_replaced_or_deleted_while_loaded_keeps_working() {
    const fs::path p = tmp_path("replaced");
    write_synthetic_model(tiny(), p.string());
    auto m = Model::load(p.string());
    const auto before = generate(m, 0.0f, 8).output;
    SyntheticSpec other = tiny();
    other.seed = 99;
    write_synthetic_model(other, (p.string() + ".new"));
    fs::rename(p.string() + ".new", p);
    QCOMPARE(generate(m, 0.0f, 8).output, before);
    fs::remove(p);
    QCOMPARE(generate(m, 0.0f, 8).output, before);
  }

  // Truncating the model's file in place while it is loaded (`cp other.gguf model.gguf`,
  // `> model.gguf`, a download restarting into the same file), or growing it. Through a file
  // mapping the kernel would drop the pages past the new end and the next weight read would
  // raise SIGBUS; the loader copies the tensor data into memory it owns instead (gguf_file.h),
  // so nothing the file does after the load can reach the engine.
  void file_that_changes_size_while_mapped() {
    const fs::path p = tmp_path("truncated");
    write_synthetic_model(tiny(), p.string());
    auto m = Model::load(p.string());
    const auto before = generate(m, 0.0f, 8);
    QCOMPARE(before.state, SeqState::Finished);
    const uint64_t data_offset = m->file->data_offset();
    QCOMPARE(m->file->resident_bytes() >= m->weights.total_bytes, true);

    // Read every byte of every tensor in a child first: if the data were still file-backed,
    // SIGBUS would end the child (exit 42), not this test process.
    fs::resize_file(p, data_offset + 100);  // keeps the header, drops nearly all tensor data
    std::fflush(nullptr);
    const pid_t pid = fork();
    QVERIFY(pid >= 0);
    if (pid == 0) {
      struct sigaction sa {};
      sa.sa_handler = [](int) { _exit(42); };
      sigaction(SIGBUS, &sa, nullptr);
      volatile uint8_t sink = 0;
      for (const GgufTensorInfo& t : m->file->tensors()) {
        const TensorView v = m->file->view(t);
        for (uint64_t i = 0; i < t.nbytes; i += 64) sink = sink ^ v.data[i];
      }
      _exit(0);
    }
    int status = 0;
    QCOMPARE(waitpid(pid, &status, 0), pid);
    QVERIFY2(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             qPrintable(QString("reading the weights after truncating their file failed: child status %1 (42 = SIGBUS)")
                            .arg(status)));

    // The engine generates the same tokens from the truncated, the emptied and the regrown file.
    QCOMPARE(generate(m, 0.0f, 8).output, before.output);
    fs::resize_file(p, 0);
    QCOMPARE(generate(m, 0.0f, 8).output, before.output);
    fs::resize_file(p, 1 << 20);  // grows with zeros
    QCOMPARE(generate(m, 0.0f, 8).output, before.output);
  }

  // The file shrinks between reading its header and reading its tensor data: a clear error
  // naming what happened, from the GGUF reader and through the model loader, never a crash.
  void file_truncated_during_load_is_a_clear_error() {
    const fs::path p = tmp_path("truncated-during-load");
    write_synthetic_model(tiny(), p.string());
    const uint64_t full = fs::file_size(p);
    {
      auto f = GgufFile::open(p.string());  // header read, tensor data not yet
      QCOMPARE(f->resident_bytes(), uint64_t{0});
      fs::resize_file(p, f->data_offset() + 100);
      const ModelConfig cfg = ModelConfig::from_gguf(*f);  // metadata is already in memory
      try {
        (void)ModelWeights::from_gguf(*f, cfg);
        QFAIL("weights loaded from a truncated file");
      } catch (const ModelError& e) {
        const std::string msg = e.what();
        qInfo("%s", msg.c_str());
        QVERIFY2(msg.find("shrank while it was being read") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find(std::to_string(full)) != std::string::npos, msg.c_str());  // the size it had
      }
      // The GGUF level says the same, every time it is asked.
      QVERIFY_THROWS_EXCEPTION(GgufError, f->view(f->tensors().front()));
    }
    // Truncated before the load: the usual truncation error from the header checks.
    EXPECT_LOAD_ERROR(p, "GgufError", "extends past the end of the file");
  }

  // --- GGUF v1 --------------------------------------------------------------------------------

  void v1_file_refused() {
    const fs::path p = test::models_dir() / "tinyllamas-stories-260k-f32.gguf";
    KVSCOPE_REQUIRE_FILE(p);
    EXPECT_LOAD_ERROR(p, "GgufError", "GGUF v1 is not supported", "re-convert");
  }
};

QTEST_GUILESS_MAIN(TestModelErrors)
#include "test_model_errors.moc"
