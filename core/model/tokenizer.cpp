// Tokenizer::from_gguf and what SPM and BPE share: vocabulary arrays, special ids, attributes,
// end-of-generation ids and special-token partitioning (llama.cpp's llama-vocab behaviour).
#include "model/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "gguf/gguf_file.h"
#include "model/bpe_tokenizer.h"
#include "model/spm_tokenizer.h"
#include "model/test_vocab_tokenizer.h"

namespace kvscope {
namespace {

std::runtime_error key_error(std::string_view key, const std::string& what) {
  return std::runtime_error("tokenizer: " + std::string(key) + ": " + what);
}

// Texts llama.cpp recognises as end-of-turn / end-of-generation tokens (its auto-detection).
constexpr const char* kEotTexts[] = {
    "<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>",         "<|endoftext|>",
    "<|end_of_text|>", "<EOT>",      "_<EOT>",  "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
constexpr const char* kEomTexts[] = {"<|eom_id|>"};
constexpr const char* kEogTexts[] = {"<|eot_id|>",      "<|im_end|>",         "<|end|>",     "<end_of_turn>",
                                     "<|endoftext|>",   "<|eom_id|>",         "<EOT>",       "_<EOT>",
                                     "<|end_of_text|>", "<end_of_utterance>", "<|fim_pad|>", "<|repo_name|>",
                                     "<|file_sep|>"};

uint32_t attr_from_type(TokenType t) {
  switch (t) {
    case TokenType::Normal:
      return 1u << 2;
    case TokenType::Unknown:
      return 1u << 0;
    case TokenType::Control:
      return 1u << 3;
    case TokenType::UserDefined:
      return 1u << 4;
    case TokenType::Unused:
      return 1u << 1;
    case TokenType::Byte:
      return 1u << 5;
    default:
      return 0;
  }
}

}  // namespace

// ---- GGUF helpers ---------------------------------------------------------------------------

std::optional<std::vector<std::string>> Tokenizer::gguf_strings(const GgufFile& file, std::string_view key) {
  const GgufValue* v = file.find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING)
    throw key_error(key,
                    std::string("must be an array of strings, found ") +
                        (v->type == GgufValueType::ARRAY ? std::string("array of ") + gguf_value_type_name(v->elem_type)
                                                         : std::string(gguf_value_type_name(v->type))));
  try {
    return v->as_string_array();
  } catch (const std::exception& e) { throw key_error(key, e.what()); }
}

std::optional<int64_t> Tokenizer::gguf_int(const GgufFile& file, std::string_view key) {
  const GgufValue* v = file.find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer()) throw key_error(key, std::string("must be an integer, found ") + gguf_value_type_name(v->type));
  try {
    return v->as_int();
  } catch (const std::exception& e) { throw key_error(key, e.what()); }
}

std::optional<bool> Tokenizer::gguf_bool(const GgufFile& file, std::string_view key) {
  const GgufValue* v = file.find(key);
  if (!v) return std::nullopt;
  try {
    return v->as_bool();
  } catch (const std::exception& e) { throw key_error(key, e.what()); }
}

// ---- loading ---------------------------------------------------------------------------------

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  const GgufValue* mv = file.find("tokenizer.ggml.model");
  if (!mv) throw std::runtime_error("tokenizer: the file has no tokenizer (tokenizer.ggml.model is missing)");
  if (mv->type != GgufValueType::STRING) throw key_error("tokenizer.ggml.model", "must be a string");
  const std::string model = mv->as_string();

  std::unique_ptr<Tokenizer> tok;
  if (model == "llama") {
    tok = std::make_unique<SpmTokenizer>();
  } else if (model == "gpt2" || model == "gemma4") {
    tok = std::make_unique<BpeTokenizer>();
  } else if (model == "test") {
    tok = std::make_unique<TestVocabTokenizer>();
  } else {
    throw std::runtime_error("tokenizer: unsupported tokenizer model '" + model +
                             "' (tokenizer.ggml.model); kvscope supports 'llama' (SentencePiece), 'gpt2' "
                             "(byte-level BPE), 'gemma4' (BPE over UTF-8), and llama.cpp's test vocabulary 'test'");
  }
  tok->model_ = model;
  if (const GgufValue* pv = file.find("tokenizer.ggml.pre")) {
    if (pv->type != GgufValueType::STRING) throw key_error("tokenizer.ggml.pre", "must be a string");
    tok->pre_ = pv->as_string().empty() ? "default" : pv->as_string();
  }
  if (model == "gemma4") tok->pre_ = "gemma4";  // as llama.cpp: the model implies its pre-tokenizer
  tok->load_tokens(file);
  tok->configure(file);
  tok->load_special(file);
  return tok;
}

void Tokenizer::load_tokens(const GgufFile& file) {
  auto tokens = gguf_strings(file, "tokenizer.ggml.tokens");
  if (!tokens) throw std::runtime_error("tokenizer: tokenizer.ggml.tokens is missing");
  if (tokens->empty()) throw key_error("tokenizer.ggml.tokens", "is empty");
  if (tokens->size() > static_cast<size_t>(INT32_MAX)) throw key_error("tokenizer.ggml.tokens", "too many tokens");
  tokens_ = std::move(*tokens);
  const size_t n = tokens_.size();

  scores_.assign(n, 0.0f);
  if (const GgufValue* sv = file.find("tokenizer.ggml.scores")) {
    std::vector<float> scores;
    try {
      scores = sv->as_float_array();
    } catch (const std::exception& e) { throw key_error("tokenizer.ggml.scores", e.what()); }
    if (scores.size() != n)
      throw key_error("tokenizer.ggml.scores", "has " + std::to_string(scores.size()) + " entries but there are " +
                                                   std::to_string(n) + " tokens");
    scores_ = std::move(scores);
  }

  types_.assign(n, TokenType::Normal);
  if (const GgufValue* tv = file.find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> types;
    try {
      types = tv->as_int_array();
    } catch (const std::exception& e) { throw key_error("tokenizer.ggml.token_type", e.what()); }
    if (types.size() != n)
      throw key_error("tokenizer.ggml.token_type", "has " + std::to_string(types.size()) + " entries but there are " +
                                                       std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > 6)
        throw key_error("tokenizer.ggml.token_type",
                        "entry " + std::to_string(i) + " is " + std::to_string(types[i]) + ", not a token type (0..6)");
      types_[i] = static_cast<TokenType>(types[i]);
    }
  }

  attrs_.resize(n);
  token_to_id_.clear();
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (tokens_[i].empty()) tokens_[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    auto [it, inserted] = token_to_id_.emplace(tokens_[i], static_cast<TokenId>(i));
    if (!inserted)
      throw key_error("tokenizer.ggml.tokens", "duplicate token '" + tokens_[i] + "' at ids " +
                                                   std::to_string(it->second) + " and " + std::to_string(i));
    attrs_[i] = attr_from_type(types_[i]);
  }
}

// The special-token ids, the add-BOS/EOS flags, the detected control tokens and the
// end-of-generation set, in llama.cpp's order (each step reads what the previous set).
// long-function: kept whole, in llama.cpp's order, so the two can be read side by side.
void Tokenizer::load_special(const GgufFile& file) {
  const auto n = static_cast<int64_t>(tokens_.size());
  // A key overrides the default set by configure(); 0xFFFFFFFF, negative or out-of-range ids mean none.
  auto read_id = [&](const char* key, TokenId& id) {
    if (id >= n) id = -1;
    if (auto v = gguf_int(file, key)) id = (*v >= 0 && *v < n) ? static_cast<TokenId>(*v) : -1;
  };
  TokenId eom = -1;
  read_id("tokenizer.ggml.bos_token_id", bos_);
  read_id("tokenizer.ggml.eos_token_id", eos_);
  read_id("tokenizer.ggml.eot_token_id", eot_);
  read_id("tokenizer.ggml.eom_token_id", eom);
  read_id("tokenizer.ggml.unknown_token_id", unk_);
  read_id("tokenizer.ggml.padding_token_id", pad_);

  const auto add_bos_key = gguf_bool(file, "tokenizer.ggml.add_bos_token");
  const auto add_eos_key = gguf_bool(file, "tokenizer.ggml.add_eos_token");
  if (add_bos_key) add_bos_ = *add_bos_key;
  if (add_eos_key) add_eos_ = *add_eos_key;
  if (add_bos_ && bos_ < 0) {
    if (add_bos_key)
      throw std::runtime_error("tokenizer: tokenizer.ggml.add_bos_token is true, but there is no BOS token");
    add_bos_ = false;
  }
  if (add_eos_ && eos_ < 0) {
    if (add_eos_key)
      throw std::runtime_error("tokenizer: tokenizer.ggml.add_eos_token is true, but there is no EOS token");
    add_eos_ = false;
  }

  // Tokens that look like control tokens are made control tokens (llama.cpp does the same).
  auto make_control = [&](TokenId id) {
    attrs_[id] |= kAttrControl;
    if (types_[id] != TokenType::Control && !(attrs_[id] & kAttrUserDefined)) types_[id] = TokenType::Control;
  };
  auto detect = [&](TokenId& id, const auto& texts) {
    if (id >= 0) return;
    for (const char* t : texts) {
      if (TokenId found = find_token(t); found >= 0) {
        id = found;
        make_control(found);
        return;
      }
    }
  };
  detect(eot_, kEotTexts);
  detect(eom, kEomTexts);

  eog_ids_.clear();
  auto add_eog = [&](TokenId id) {
    if (id >= 0 && std::find(eog_ids_.begin(), eog_ids_.end(), id) == eog_ids_.end()) eog_ids_.push_back(id);
  };
  for (const char* t : kEogTexts) {
    if (TokenId id = find_token(t); id >= 0) {
      add_eog(id);
      make_control(id);
    }
  }
  add_eog(eos_);
  add_eog(eot_);
  add_eog(eom);
  std::sort(eog_ids_.begin(), eog_ids_.end());

  special_cache_.clear();
  for (TokenId id = 0; id < n; ++id) {
    if (attrs_[id] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_cache_.push_back(id);
  }
  std::stable_sort(special_cache_.begin(), special_cache_.end(),
                   [&](TokenId a, TokenId b) { return tokens_[a].size() > tokens_[b].size(); });

  // Per-model attributes llama.cpp sets by name: Phi-3 strips white space after special tokens.
  std::string name;
  if (const GgufValue* nv = file.find("general.name"); nv && nv->type == GgufValueType::STRING) name = nv->as_string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (TokenId id : special_cache_) attrs_[id] |= kAttrRstrip;
    auto set_rstrip = [&](const char* text, bool on) {
      if (TokenId id = find_token(text); id >= 0)
        attrs_[id] = on ? (attrs_[id] | kAttrRstrip) : (attrs_[id] & ~kAttrRstrip);
    };
    set_rstrip("</s>", true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_rstrip(t, false);
  }
}

// ---- shared queries --------------------------------------------------------------------------

TokenType Tokenizer::token_type(TokenId id) const { return types_.at(static_cast<size_t>(id)); }

bool Tokenizer::is_eog(TokenId id) const { return id >= 0 && std::binary_search(eog_ids_.begin(), eog_ids_.end(), id); }

TokenId Tokenizer::find_token(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

std::vector<Tokenizer::Fragment> Tokenizer::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };

  for (TokenId id : special_cache_) {
    const uint32_t a = attrs_[id];
    if (!parse_special && (a & (kAttrControl | kAttrUnknown))) continue;
    const std::string& special = tokens_[id];
    if (text.find(special) == std::string_view::npos) continue;  // nowhere in the input

    std::vector<Fragment> next;
    next.reserve(frags.size() + 2);
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.offset, len = f.length;
      while (len > 0) {
        const size_t match = text.substr(0, off + len).find(special, off);
        if (match == std::string_view::npos) {
          next.push_back({-1, off, len});
          break;
        }
        size_t left_len = match - off;
        if (a & kAttrLstrip) {
          while (left_len > 0 && is_space(text[off + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({-1, off, left_len});
        next.push_back({id, 0, 0});
        size_t right_off = match + special.size();
        size_t right_len = off + len - right_off;
        if (a & kAttrRstrip) {
          while (right_len > 0 && is_space(text[right_off])) {
            ++right_off;
            --right_len;
          }
        }
        off = right_off;
        len = right_len;
      }
    }
    frags = std::move(next);
  }
  return frags;
}

}  // namespace kvscope
