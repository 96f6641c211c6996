#include "model/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "gguf/gguf_writer.h"
#include "model/model_config.h"

namespace kvscope {

namespace {

// A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte-fallback tokens, then
// letter pieces so that plain text tokenizes into something other than bytes.
void add_tokenizer(GgufWriter& w, int32_t n_vocab) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.emplace_back(buf);
    types.push_back(6);
  }
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  for (size_t i = 0; static_cast<int32_t>(tokens.size()) < n_vocab; ++i) {
    std::string piece;
    const size_t k = i % (2 * letters.size());
    if (k < letters.size())
      piece = "\xE2\x96\x81" + std::string(1, letters[k]);  // "▁x"
    else
      piece = std::string(1, letters[k - letters.size()]);
    if (i >= 2 * letters.size()) piece += std::to_string(i / (2 * letters.size()));
    tokens.push_back(piece);
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_f32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
}

}  // namespace

void write_synthetic_model(const SyntheticSpec& s, const std::string& path) {
  const auto& archs = supported_architectures();
  if (std::find(archs.begin(), archs.end(), s.arch) == archs.end())
    throw std::runtime_error("make-model: unknown architecture '" + s.arch + "'");
  if (s.n_vocab < 259) throw std::runtime_error("make-model: vocabulary must have at least 259 tokens");
  if (s.n_layer < 1 || s.n_embd < 1 || s.n_head < 1 || s.n_head_kv < 1 || s.n_ff < 1 || s.n_head % s.n_head_kv)
    throw std::runtime_error("make-model: inconsistent shape (heads must divide, sizes positive)");
  const int32_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int64_t blk = ggml_type_info(s.dtype).block_elems;
  if (!ggml_type_supported(s.dtype) || blk <= 0) throw std::runtime_error("make-model: unsupported dtype");
  if (s.n_embd % blk || s.n_ff % blk || (hd * s.n_head) % blk)
    throw std::runtime_error("make-model: n_embd, n_ff and n_head*head_dim must be multiples of the dtype block (" +
                             std::to_string(blk) + ")");

  GgufWriter w;
  const std::string a = s.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "kvscope synthetic " + a + " (RANDOM WEIGHTS)");
  w.set_bool("kvscope.synthetic", true);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(hd));
  w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(hd));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_f32(a + ".rope.freq_base", s.rope_base);
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(hd));
  if (a == "gemma3") {
    w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
    w.set_u32(a + ".attention.sliding_window_pattern", static_cast<uint32_t>(s.swa_pattern));
  }
  add_tokenizer(w, s.n_vocab);

  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto matrix = [&](const std::string& name, int64_t in, int64_t out, float scale) {
    std::vector<float> d(static_cast<size_t>(in * out));
    for (auto& x : d) x = normal(rng) * scale;
    w.add_tensor(name, {in, out}, s.dtype, d);
  };
  auto vec = [&](const std::string& name, int64_t n, float center, float spread) {
    std::vector<float> d(static_cast<size_t>(n));
    for (auto& x : d) x = center + spread * normal(rng);
    w.add_tensor(name, {n}, GgmlType::F32, d);
  };
  const int64_t E = s.n_embd, Q = static_cast<int64_t>(s.n_head) * hd, KV = static_cast<int64_t>(s.n_head_kv) * hd;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(E));
  matrix("token_embd.weight", E, s.n_vocab, a == "gemma3" ? 0.05f : 1.0f);
  vec("output_norm.weight", E, 1.0f, 0.05f);
  if (!s.tied_output && a != "gemma3" && a != "qwen2") matrix("output.weight", E, s.n_vocab, 4.0f * in_scale);
  for (int32_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    vec(p + "attn_norm.weight", E, 1.0f, 0.05f);
    matrix(p + "attn_q.weight", E, Q, in_scale);
    matrix(p + "attn_k.weight", E, KV, in_scale);
    matrix(p + "attn_v.weight", E, KV, in_scale);
    matrix(p + "attn_output.weight", Q, E, 1.0f / std::sqrt(static_cast<float>(Q)));
    if (a == "qwen2") {
      vec(p + "attn_q.bias", Q, 0.0f, 0.1f);
      vec(p + "attn_k.bias", KV, 0.0f, 0.1f);
      vec(p + "attn_v.bias", KV, 0.0f, 0.1f);
    }
    if (a == "qwen3" || a == "gemma3") {
      vec(p + "attn_q_norm.weight", hd, 1.0f, 0.05f);
      vec(p + "attn_k_norm.weight", hd, 1.0f, 0.05f);
    }
    if (a == "gemma3") {
      vec(p + "post_attention_norm.weight", E, 1.0f, 0.05f);
      vec(p + "post_ffw_norm.weight", E, 1.0f, 0.05f);
    }
    vec(p + "ffn_norm.weight", E, 1.0f, 0.05f);
    matrix(p + "ffn_gate.weight", E, s.n_ff, in_scale);
    matrix(p + "ffn_up.weight", E, s.n_ff, in_scale);
    matrix(p + "ffn_down.weight", s.n_ff, E, 1.0f / std::sqrt(static_cast<float>(s.n_ff)));
  }
  w.write(path);
}

}  // namespace kvscope
