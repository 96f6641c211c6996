#pragma once
// One fuzz input through everything that reads an untrusted model file, in the order the app
// does it (Model::load), plus the inspect summaries and, for tiny models, one engine step:
//
//   GgufFile::from_bytes -> gguf_summary_json/text -> ModelConfig::from_gguf
//     -> ModelWeights::from_gguf (first and last row of every matrix dequantized)
//     -> Tokenizer::from_gguf (encode fixed and input-derived text, decode every id)
//     -> Model::load's vocabulary cross-check -> a 2-token generation on the CPU backend
//
// The documented failures (GgufError, ModelError, the tokenizer's std::runtime_error) end a
// stage and are expected. Anything else is a finding: an exception of another type escapes
// (libFuzzer reports the std::terminate), ASan/UBSan report, or an invariant checked here fails
// (fuzz_check aborts). Shared by the libFuzzer target (tests/fuzz/fuzz_gguf_model.cpp) and the
// regression replay (tests/fuzz/test_fuzz_regressions.cpp).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_inspect.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/tokenizer.h"

namespace kvscope::fuzz {

// How far one input got; the replay test prints it.
struct Outcome {
  bool parsed = false, config = false, weights = false, tokenizer = false, model = false, generated = false;
  std::string error;  // the documented error that ended the chain, if any
};

[[noreturn]] inline void fuzz_fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "fuzz invariant violated at %s:%d: %s\n", file, line, what);
  std::abort();
}
#define KVSCOPE_FUZZ_CHECK(cond)                                        \
  do {                                                                  \
    if (!(cond)) ::kvscope::fuzz::fuzz_fail(#cond, __FILE__, __LINE__); \
  } while (0)

namespace detail {

inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    int n = c < 0x80                   ? 1
            : (c >= 0xC2 && c <= 0xDF) ? 2
            : (c >= 0xE0 && c <= 0xEF) ? 3
            : (c >= 0xF0 && c <= 0xF4) ? 4
                                       : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

// Reads the first and last row of a weight matrix: proves the view lies inside the file bytes
// (ASan guards the copy from_bytes made) and that its size agrees with the validated nbytes.
inline void touch_matrix(const TensorView& v, int64_t in, int64_t out) {
  KVSCOPE_FUZZ_CHECK(v.info != nullptr && v.data != nullptr);
  KVSCOPE_FUZZ_CHECK(v.ne(0) == in && v.rows() == out);
  KVSCOPE_FUZZ_CHECK(static_cast<uint64_t>(v.rows()) * v.row_bytes() == v.info->nbytes);
  std::vector<float> row(static_cast<size_t>(in));
  dequantize_row(v.type(), v.row(0), row.data(), in);
  dequantize_row(v.type(), v.row(out - 1), row.data(), in);
}

// Latent attention's matrices (deepseek2), and each head's k_b / v_b view into the 3-D tensors.
inline void touch_latent(const LayerWeights& L, const ModelConfig& c) {
  const MlaConfig& m = c.mla;
  const int64_t qk = m.qk_nope + c.rope_dim;
  if (L.mla.wq_a.data) {
    touch_matrix(L.mla.wq_a, c.n_embd, m.q_lora_rank);
    touch_matrix(L.mla.wq_b, m.q_lora_rank, c.n_head * qk);
  } else {
    touch_matrix(L.wq, c.n_embd, c.n_head * qk);
  }
  touch_matrix(L.mla.wkv_a, c.n_embd, m.kv_lora_rank + c.rope_dim);
  KVSCOPE_FUZZ_CHECK(L.mla.k_b.size() == static_cast<size_t>(c.n_head) && L.mla.v_b.size() == L.mla.k_b.size());
  for (size_t h = 0; h < L.mla.k_b.size(); ++h) {
    touch_matrix(L.mla.k_b[h], m.qk_nope, m.kv_lora_rank);
    touch_matrix(L.mla.v_b[h], m.kv_lora_rank, m.v_dim);
  }
  touch_matrix(L.wo, static_cast<int64_t>(c.n_head) * m.v_dim, c.n_embd);
}

inline void touch_weights(const ModelWeights& w, const ModelConfig& c) {
  touch_matrix(w.token_embd, c.n_embd, c.n_vocab);
  touch_matrix(w.output, c.n_embd, c.n_vocab);
  KVSCOPE_FUZZ_CHECK(w.output_norm.size() == static_cast<size_t>(c.n_embd));
  KVSCOPE_FUZZ_CHECK(w.layers.size() == static_cast<size_t>(c.n_layer));
  for (int32_t il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = w.layers[static_cast<size_t>(il)];
    if (c.latent_kv()) {
      touch_latent(L, c);
    } else if (c.layer_is_recurrent(il) && c.traits.gated_delta_net) {
      const GdnConfig& g = c.gdn;
      touch_matrix(L.gdn.in_proj, c.n_embd, g.conv_channels());
      touch_matrix(L.gdn.z_proj, c.n_embd, g.value_dim());
      touch_matrix(L.gdn.alpha_proj, c.n_embd, g.n_v_heads);
      touch_matrix(L.gdn.beta_proj, c.n_embd, g.n_v_heads);
      touch_matrix(L.gdn.out_proj, g.value_dim(), c.n_embd);
      KVSCOPE_FUZZ_CHECK(L.gdn.conv_kernel.size() == static_cast<size_t>(g.conv_channels() * g.conv_kernel));
      KVSCOPE_FUZZ_CHECK(L.gdn.norm.size() == static_cast<size_t>(g.d_state));
    } else if (c.layer_is_recurrent(il) && c.traits.mamba2) {
      const Mamba2Config& m = c.mamba2;
      touch_matrix(L.mamba2.in_proj, c.n_embd, m.in_proj_rows());
      touch_matrix(L.mamba2.out_proj, m.d_inner, c.n_embd);
      KVSCOPE_FUZZ_CHECK(L.mamba2.conv_kernel.size() == static_cast<size_t>(m.conv_channels() * m.conv_kernel));
      KVSCOPE_FUZZ_CHECK(L.mamba2.norm.size() == static_cast<size_t>(m.d_inner));
    } else if (c.layer_is_recurrent(il)) {  // lfm2's short convolution
      touch_matrix(L.conv_in, c.n_embd, 3 * c.n_embd);
      touch_matrix(L.conv_out, c.n_embd, c.n_embd);
      KVSCOPE_FUZZ_CHECK(L.conv_kernel.size() == static_cast<size_t>(c.n_embd) * c.conv_l_cache);
    } else {
      touch_matrix(L.wq, c.n_embd, c.layer_q_rows(il));
      if (c.layer_owns_kv(il)) {  // gemma4's last layers read an earlier layer's K/V
        touch_matrix(L.wk, c.n_embd, c.layer_kv_dim(il));
        touch_matrix(L.wv, c.n_embd, c.layer_kv_dim(il));
      }
      touch_matrix(L.wo, c.layer_q_dim(il), c.n_embd);
    }
    if (L.ple_gate.data) {  // gemma4's per-layer embedding
      touch_matrix(L.ple_gate, c.n_embd, c.n_embd_per_layer);
      touch_matrix(L.ple_proj, c.n_embd_per_layer, c.n_embd);
    }
    if (L.moe) {  // the router and every expert's row views into the 3-D expert tensors
      const int32_t n_exp = c.moe.n_expert;
      touch_matrix(L.experts.router, c.n_embd, n_exp);
      KVSCOPE_FUZZ_CHECK(L.experts.gate.size() == static_cast<size_t>(n_exp) &&
                         L.experts.up.size() == L.experts.gate.size() &&
                         L.experts.down.size() == L.experts.gate.size());
      for (int32_t e = 0; e < n_exp; ++e) {
        touch_matrix(L.experts.gate[static_cast<size_t>(e)], c.n_embd, c.moe.n_ff_exp);
        touch_matrix(L.experts.up[static_cast<size_t>(e)], c.n_embd, c.moe.n_ff_exp);
        touch_matrix(L.experts.down[static_cast<size_t>(e)], c.moe.n_ff_exp, c.n_embd);
      }
    } else {
      touch_matrix(L.w_gate, c.n_embd, c.layer_n_ff(il));
      touch_matrix(L.w_up, c.n_embd, c.layer_n_ff(il));
      touch_matrix(L.w_down, c.layer_n_ff(il), c.n_embd);
    }
    KVSCOPE_FUZZ_CHECK(L.attn_norm.size() == static_cast<size_t>(c.n_embd));
    KVSCOPE_FUZZ_CHECK(L.ffn_norm.size() == static_cast<size_t>(c.n_embd));
  }
}

inline void exercise_tokenizer(const Tokenizer& tok, const uint8_t* data, size_t size) {
  const int32_t n = tok.n_vocab();
  KVSCOPE_FUZZ_CHECK(n > 0);
  // Fixed text with every kind of trouble, and the input's own last bytes (arbitrary bytes,
  // usually invalid UTF-8), through all four flag combinations.
  const size_t tail = size < 48 ? size : 48;
  const std::string texts[] = {
      std::string("Hello world! <s> </s> <|endoftext|>  \t\n caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80 \xFF\xC3"),
      std::string(reinterpret_cast<const char*>(data + size - tail), tail),
  };
  for (const std::string& text : texts) {
    for (int flags = 0; flags < 4; ++flags) {
      std::vector<TokenId> ids;
      try {
        ids = tok.encode(text, flags & 1, flags & 2);
      } catch (const std::runtime_error&) {
        // Documented: an SPM vocabulary with no token for some byte and no <unk> cannot encode
        // it (as in llama.cpp). Model::load refuses such a model up front.
        return;
      }
      Utf8StreamDecoder dec;
      std::string out;
      for (TokenId id : ids) {
        KVSCOPE_FUZZ_CHECK(id >= 0 && id < n);
        out += dec.push(tok.token_to_piece(id, flags & 2));
      }
      out += dec.flush();
      KVSCOPE_FUZZ_CHECK(valid_utf8(out));
    }
  }
  // Every id must decode (control tokens with and without `special`), and the special ids the
  // tokenizer reports must be inside the vocabulary.
  for (TokenId id = 0; id < n; ++id) {
    (void)tok.token_to_piece(id, false);
    (void)tok.token_to_piece(id, true);
    (void)tok.token_type(id);
    (void)tok.is_eog(id);
  }
  for (TokenId id : {tok.bos(), tok.eos(), tok.eot(), tok.unk(), tok.pad()}) KVSCOPE_FUZZ_CHECK(id >= -1 && id < n);
  for (TokenId id : tok.eog_ids()) KVSCOPE_FUZZ_CHECK(id >= 0 && id < n);
}

// Parameters (not bytes) of the model: tiny ones get a real forward pass.
inline bool tiny_enough_to_run(const ModelConfig& c) {
  const int64_t per_layer = 2LL * c.n_embd * c.q_dim() + 2LL * c.n_embd * c.kv_dim() + 3LL * c.n_embd * c.n_ff;
  const int64_t params = per_layer * c.n_layer + 2LL * c.n_embd * c.n_vocab;
  return c.n_layer <= 8 && params <= (int64_t(4) << 20);
}

// Two tokens of greedy generation with a 16-token context: the backend walks every weight and
// the KV cache with the shapes the loader accepted. Logits may be anything (random or NaN
// weights); reading outside a buffer may not.
inline void generate_two_tokens(const std::shared_ptr<Model>& m) {
  EngineConfig cfg;
  cfg.block_size = 8;
  cfg.num_blocks = 4;
  cfg.sched.max_model_len = 16;
  Engine e(m, std::make_unique<CpuBackend>(m, 1), cfg);
  Request r;
  r.prompt = {0, m->config.n_vocab - 1, m->config.n_vocab / 2};
  r.max_new_tokens = 2;
  r.ignore_eos = true;
  const SeqId id = e.submit(r);
  for (int i = 0; i < 8 && e.step(); ++i) e.paged_kv()->validate();
  const Sequence& s = e.sequence(id);
  // Either it generated its two tokens, or the engine stopped it because the (fuzzed) weights
  // produced NaN/Inf logits, with that reason.
  if (s.state == SeqState::Rejected) {
    KVSCOPE_FUZZ_CHECK(s.error.find("non-finite logits") != std::string::npos);
    KVSCOPE_FUZZ_CHECK(s.output_tokens().size() < 2);
  } else {
    KVSCOPE_FUZZ_CHECK(s.state == SeqState::Finished);
    KVSCOPE_FUZZ_CHECK(s.output_tokens().size() == 2);
  }
  for (TokenId t : s.output()) KVSCOPE_FUZZ_CHECK(t >= 0 && t < m->config.n_vocab);
}

}  // namespace detail

// Runs one input; returns how far it got. Never throws the documented errors.
inline Outcome run_one(const uint8_t* data, size_t size) {
  Outcome o;
  std::shared_ptr<GgufFile> file;
  try {
    file = GgufFile::from_bytes(data, size, "fuzz");
  } catch (const GgufError& e) {
    o.error = e.what();
    return o;
  }
  o.parsed = true;
  // `kvscope-cli inspect` and the model panel show any file that parses.
  (void)gguf_summary_json(*file).dump();
  (void)gguf_summary_text(*file);

  auto m = std::make_shared<Model>();
  m->file = file;
  try {
    m->config = ModelConfig::from_gguf(*file);
    o.config = true;
    m->weights = ModelWeights::from_gguf(*file, m->config);
    o.weights = true;
    detail::touch_weights(m->weights, m->config);
  } catch (const std::runtime_error& e) {  // ModelError, GgufError (both runtime_errors)
    o.error = e.what();
  }
  // The tokenizer is loaded whether or not the weights are: vocab-only files have none.
  try {
    m->tokenizer = Tokenizer::from_gguf(*file);
    o.tokenizer = true;
  } catch (const std::runtime_error& e) {
    if (o.error.empty()) o.error = e.what();
  }
  if (o.tokenizer) detail::exercise_tokenizer(*m->tokenizer, data, size);
  if (!o.weights || !o.tokenizer) return o;
  if (m->tokenizer->n_vocab() != m->config.n_vocab) {  // Model::load refuses this too
    o.error = "vocabulary size mismatch";
    return o;
  }
  try {  // Model::load's check that every byte can be encoded (see model.cpp)
    std::string all_bytes(256, '\0');
    for (int b = 0; b < 256; ++b) all_bytes[static_cast<size_t>(b)] = static_cast<char>(b);
    (void)m->tokenizer->encode(all_bytes, false, false);
  } catch (const std::runtime_error& e) {
    o.error = e.what();
    return o;
  }
  o.model = true;
  if (detail::tiny_enough_to_run(m->config)) {
    detail::generate_two_tokens(m);
    o.generated = true;
  }
  return o;
}

}  // namespace kvscope::fuzz
