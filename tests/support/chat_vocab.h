#pragma once
// Vocabularies for the chat tests: a GGUF vocabulary file, or a byte-level BPE vocabulary
// (GPT-2 style) with ChatML's control tokens, as Qwen has, built in memory with any
// tokenizer.chat_template.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/synthetic_model.h"
#include "model/tokenizer.h"

namespace kvscope::test {

// A tiny random-weight model (512-token vocabulary, 64 wide) with ChatML's control tokens and
// `chat_template`, for chats end to end through the engine.
inline SyntheticSpec chatml_model_spec(const std::string& chat_template) {
  SyntheticSpec s;
  s.n_vocab = 512;
  s.n_embd = 64;
  s.n_head = 2;
  s.n_head_kv = 1;
  s.n_ff = 128;
  s.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  s.chat_template = chat_template;
  return s;
}

struct Vocab {
  std::shared_ptr<std::vector<uint8_t>> bytes;  // an in-memory GGUF's bytes, alive as long as its file
  std::shared_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

inline Vocab load_vocab(const std::filesystem::path& p) {
  Vocab v;
  v.file = GgufFile::open(p.string());
  v.tok = Tokenizer::from_gguf(*v.file);
  return v;
}

// A token beyond the bytes and ChatML's three: its text and type (3 control, 4 user-defined).
struct ExtraToken {
  std::string text;
  int32_t type = 3;
};

// Token ids: the 256 bytes, then <|endoftext|> (256, EOS), <|im_start|>, <|im_end|>, then `extra`.
inline Vocab chatml_vocab(const std::string& chat_template, const std::vector<ExtraToken>& extra = {}) {
  GgufWriter w;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cpt = direct ? b : 256 + n++;
    std::string t;
    if (cpt < 0x80) {
      t += static_cast<char>(cpt);
    } else {
      t += static_cast<char>(0xC0 | (cpt >> 6));
      t += static_cast<char>(0x80 | (cpt & 0x3F));
    }
    tokens.push_back(t);
    types.push_back(1);
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(s);
    types.push_back(3);
  }
  for (const ExtraToken& e : extra) {
    tokens.push_back(e.text);
    types.push_back(e.type);
  }
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {});
  w.set_u32("tokenizer.ggml.eos_token_id", 256);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  if (!chat_template.empty()) w.set_string("tokenizer.chat_template", chat_template);
  Vocab v;
  v.bytes = std::make_shared<std::vector<uint8_t>>(w.to_bytes());
  v.file = GgufFile::from_bytes(v.bytes->data(), v.bytes->size(), "chatml-vocab");
  v.tok = Tokenizer::from_gguf(*v.file);
  return v;
}

}  // namespace kvscope::test
