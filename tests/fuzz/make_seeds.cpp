// Writes the small seed files of the fuzz corpus (scripts/fuzz.sh runs it at fuzz time into a
// temporary folder; nothing here is committed):
//  - tiny random-weight models of every architecture (write_synthetic_model) and dtype,
//    including a mixed one with k-quant matrices, all a few tens of KiB so mutations stay fast;
//  - shrunk copies of the real vocab-only files in <shared>/models/vocab (first tokens and the
//    merges among them, every other tokenizer key as is): the tokenizer path with real
//    pre-tokenizers and token types, in a few KiB instead of a MiB;
//  - a few models broken on purpose (the error matrix of tests/core/model/test_model_errors.cpp).
// Usage: make_seeds OUT_DIR [SHARED_DIR]
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <set>
#include <string>

#include "fuzz/gguf_rewrite.h"
#include "model/model_config.h"
#include "model/synthetic_model.h"

using namespace kvscope;
using namespace kvscope::test;
namespace fs = std::filesystem;

namespace {

fs::path g_out;
int g_written = 0;

void save(const GgufWriter& w, const std::string& name) {
  w.write((g_out / name).string());
  ++g_written;
}

// f32/f16/bf16 models are ~50 KiB (n_embd 16, 2 heads of 8, 1 KV head, n_ff 32); block-quantized
// ones need rows that are multiples of 32 (n_embd 32, n_ff 64).
SyntheticSpec tiny(const std::string& arch, GgmlType dtype = GgmlType::F32) {
  const bool blocks = ggml_type_info(dtype).block_elems > 1;
  SyntheticSpec s;
  s.arch = arch;
  s.n_vocab = 259;  // the minimum: unk, bos, eos and the 256 byte tokens
  s.n_embd = blocks ? 32 : 16;
  s.n_layer = 2;
  s.n_head = blocks ? 4 : 2;
  s.n_head_kv = blocks ? 2 : 1;
  s.n_ff = blocks ? 64 : 32;
  s.n_ctx = 64;
  s.dtype = dtype;
  s.sliding_window = 4;
  s.swa_pattern = 2;
  if (arch == "granitehybrid") s.ssm_state = 8;   // layer 0 Mamba-2 (4 heads in 2 groups), layer 1 attention
  if (arch == "qwen35" || arch == "qwen35moe") {  // layer 0 Gated DeltaNet (4 value heads of 8), 1 attention
    s.full_attention_interval = 2;
    s.ssm_state = 8;
  }
  if (arch == "qwen3moe" || arch == "glm4moe" || arch == "gpt-oss" || arch == "deepseek2" ||
      arch == "qwen35moe") {  // 4 experts, 2 routed
    s.n_expert = 4;
    s.n_expert_used = 2;
  }
  if (arch == "gemma4") {  // layer 0 slides (head 4), layer 1 is full (head 8); per-layer inputs of 4
    s.head_dim_swa = 4;
    s.n_head_kv_swa = 1;
    s.n_embd_per_layer = 4;
  }
  if (arch == "deepseek2") {  // a latent row of 16 + 8 RoPE dims
    s.kv_lora_rank = 16;
    s.q_lora_rank = 16;
    s.mla_rope = 8;
  }
  return s;
}

std::shared_ptr<GgufFile> tiny_file(const SyntheticSpec& s, const std::string& name) {
  const fs::path p = g_out / ("tmp-" + name + ".gguf");
  write_synthetic_model(s, p.string());
  auto f = GgufFile::open(p.string());
  fs::remove(p);  // unlinking keeps the mapping valid (only truncation would not)
  return f;
}

void models() {
  for (const std::string& arch : supported_architectures()) {
    SyntheticSpec s = tiny(arch);
    write_synthetic_model(s, (g_out / ("tiny-" + arch + "-f32.gguf")).string());
    ++g_written;
  }
  const std::pair<GgmlType, const char*> dtypes[] = {
      {GgmlType::F16, "f16"}, {GgmlType::BF16, "bf16"}, {GgmlType::Q8_0, "q8_0"}, {GgmlType::Q4_0, "q4_0"}};
  for (auto [t, n] : dtypes) {
    write_synthetic_model(tiny("llama", t), (g_out / ("tiny-llama-" + std::string(n) + ".gguf")).string());
    ++g_written;
  }
  {
    SyntheticSpec s = tiny("llama");
    s.tied_output = true;
    s.n_layer = 1;
    write_synthetic_model(s, (g_out / "tiny-llama-tied-1layer.gguf").string());
    ++g_written;
  }
  // k-quants need rows of 256: n_ff = 256 so that ffn_down [256 x 32] can be q4_K / q6_K while
  // the rest stays small (f16 / q8_0).
  {
    SyntheticSpec s = tiny("llama");
    s.n_embd = 32;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    auto f = tiny_file(s, "mixed");
    RewriteEdits e;
    e.tensor = [](TensorCopy& c) {
      if (c.name == "blk.0.ffn_down.weight")
        c.type = GgmlType::Q4_K;
      else if (c.name == "blk.1.ffn_down.weight")
        c.type = GgmlType::Q6_K;
      else if (c.name.find("ffn_") != std::string::npos && c.ne.size() == 2)
        c.type = GgmlType::Q8_0;
      else if (c.ne.size() == 2)
        c.type = GgmlType::F16;
    };
    save(rewrite_gguf(*f, e), "tiny-llama-mixed-kquants.gguf");
  }
  // Broken on purpose: each is one step from valid, so mutations explore the checks.
  auto base = tiny_file(tiny("llama"), "base");
  auto with_key = [&](const std::string& key, uint32_t v, const std::string& name) {
    GgufWriter w = rewrite_gguf(*base);
    w.set_u32(key, v);
    save(w, name);
  };
  with_key("llama.block_count", 0, "bad-0-layers.gguf");
  with_key("llama.attention.head_count_kv", 3, "bad-heads-do-not-divide.gguf");
  with_key("llama.block_count", 3, "bad-missing-layer.gguf");
  {
    GgufWriter w = rewrite_gguf(*base);
    w.set_string("general.architecture", "mamba");
    save(w, "bad-arch-mamba.gguf");
  }
  {
    RewriteEdits e;
    e.tensor = [](TensorCopy& c) {
      if (c.name == "blk.0.attn_norm.weight") c.data[3] = std::nanf("");
      if (c.name == "blk.1.attn_q.weight") c.data[7] = INFINITY;
    };
    save(rewrite_gguf(*base, e), "bad-nan-weights.gguf");
  }
  {
    RewriteEdits e;
    e.tensor = [](TensorCopy& c) {
      if (c.name == "blk.0.attn_k.weight") c.ne = {16, 4};  // kv_dim is 8
      if (c.name == "blk.0.attn_k.weight") c.data.resize(16 * 4);
    };
    save(rewrite_gguf(*base, e), "bad-shape.gguf");
  }
}

// A vocabulary-only file cut down to its first `keep` tokens (and the merges among them).
void shrink_vocab(const fs::path& src, size_t keep) {
  auto f = GgufFile::open(src.string());
  const GgufValue* toks = f->find("tokenizer.ggml.tokens");
  if (!toks || toks->type != GgufValueType::ARRAY) return;
  keep = std::min(keep, toks->arr.size());
  std::set<std::string> kept;
  for (size_t i = 0; i < keep; ++i) kept.insert(toks->arr[i].s);
  GgufWriter w = rewrite_gguf(*f);
  for (const GgufKV& kv : f->metadata()) {
    const GgufValue& v = kv.value;
    if (v.type != GgufValueType::ARRAY || !kv.key.starts_with("tokenizer.ggml.")) continue;
    GgufValue cut = v;
    if (kv.key == "tokenizer.ggml.merges") {
      cut.arr.clear();
      for (const GgufValue& m : v.arr) {
        const size_t sp = m.s.find(' ', 1);
        if (sp == std::string::npos) continue;
        const std::string a = m.s.substr(0, sp), b = m.s.substr(sp + 1);
        if (kept.count(a) && kept.count(b) && kept.count(a + b)) cut.arr.push_back(m);
      }
    } else if (v.arr.size() == toks->arr.size()) {
      cut.arr.resize(keep);
    }
    w.set(kv.key, cut);
  }
  save(w, "vocab-" + src.stem().string() + "-" + std::to_string(keep) + ".gguf");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR [SHARED_DIR]\n");
    return 2;
  }
  g_out = argv[1];
  fs::create_directories(g_out);
  try {
    models();
    if (argc > 2) {
      const fs::path vocab = fs::path(argv[2]) / "models" / "vocab";
      if (fs::is_directory(vocab))
        for (const auto& e : fs::directory_iterator(vocab))
          if (e.path().extension() == ".gguf") {
            shrink_vocab(e.path(), 400);
            shrink_vocab(e.path(), 1500);
          }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  std::printf("make_seeds: %d seed files in %s\n", g_written, g_out.string().c_str());
  return 0;
}
