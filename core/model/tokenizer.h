#pragma once
// Tokenizers built from GGUF metadata (tokenizer.ggml.*):
//  - "llama": SentencePiece-style BPE over scores, "▁" for spaces, <0xXX> byte fallback
//  - "gpt2":  byte-level BPE over merges, with a pre-tokenizer regex chosen by tokenizer.ggml.pre
// Behaviour follows llama.cpp's llama-vocab so that our ids match its test vectors.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvscope {

class GgufFile;
using TokenId = int32_t;

enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws std::runtime_error naming the problem (missing tokens, unknown model, bad merges, ...).
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);

  // add_special: prepend BOS (and append EOS) when the vocabulary's metadata says so.
  // parse_special: text that spells a control/user-defined token (e.g. "<s>") becomes that token.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // The bytes of one token; control tokens give "" unless `special` is true.
  virtual std::string token_to_piece(TokenId id, bool special = false) const = 0;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token_text(TokenId id) const { return tokens_.at(static_cast<size_t>(id)); }
  TokenType token_type(TokenId id) const;
  std::string model_name() const { return model_; }  // "llama" or "gpt2"
  std::string pre_name() const { return pre_; }      // tokenizer.ggml.pre ("default" when absent)

  TokenId bos() const { return bos_; }  // -1 when none
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }  // end-of-turn (chat models), -1 when none
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // SPM: encode() puts a space before the text (and after every special token), as SentencePiece.
  bool add_space_prefix() const { return add_space_prefix_; }
  bool is_eog(TokenId id) const;  // EOS, EOT or other end-of-generation ids

  // --- added by the tokenizer implementation ---
  TokenId unk() const { return unk_; }  // -1 when none
  TokenId pad() const { return pad_; }
  const std::vector<TokenId>& eog_ids() const { return eog_ids_; }
  TokenId find_token(std::string_view text) const;  // exact token text -> id, -1 when absent
  float token_score(TokenId id) const { return scores_.at(static_cast<size_t>(id)); }

 protected:
  // llama.cpp's per-token attributes (llama_token_attr), derived from token types and overrides.
  enum Attr : uint32_t {
    kAttrUnknown = 1u << 0,
    kAttrUnused = 1u << 1,
    kAttrNormal = 1u << 2,
    kAttrControl = 1u << 3,
    kAttrUserDefined = 1u << 4,
    kAttrByte = 1u << 5,
    kAttrLstrip = 1u << 7,
    kAttrRstrip = 1u << 8,
  };
  // A piece of the input after special-token partitioning: a special token, or raw text.
  struct Fragment {
    TokenId token = -1;             // >= 0: this special token
    size_t offset = 0, length = 0;  // raw text: bytes [offset, offset + length) of the input
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // Type-specific metadata (merges, pre-tokenizer, defaults), run after the token arrays are loaded
  // and before the special ids and add_bos/add_eos keys are read.
  virtual void configure(const GgufFile& /*file*/) {}
  // llama.cpp's tokenizer_st_partition: control/unknown tokens (only when parse_special) and
  // user-defined tokens (always) found in the text become their own fragments.
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  uint32_t attr(TokenId id) const { return attrs_[static_cast<size_t>(id)]; }
  // GGUF helpers that name the key in their errors.
  static std::optional<std::vector<std::string>> gguf_strings(const GgufFile& file, std::string_view key);
  static std::optional<int64_t> gguf_int(const GgufFile& file, std::string_view key);
  static std::optional<bool> gguf_bool(const GgufFile& file, std::string_view key);

  std::vector<uint32_t> attrs_;
  std::vector<TokenId> special_cache_;  // control/user-defined/unknown ids, longest text first
  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> token_to_id_;
  TokenId unk_ = -1, pad_ = -1;
  bool add_space_prefix_ = false;

 private:
  void load_tokens(const GgufFile& file);
  void load_special(const GgufFile& file);

 protected:
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<TokenId> eog_ids_;
  std::string model_ = "llama";
  std::string pre_ = "default";
  TokenId bos_ = -1, eos_ = -1, eot_ = -1;
  bool add_bos_ = false, add_eos_ = false;
};

// Turns a stream of token ids into valid UTF-8 text: bytes of a character split over several
// tokens are held back until the character is complete (invalid sequences become U+FFFD).
class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);  // returns the text that is complete so far
  std::string flush();                       // whatever is left, invalid bytes as U+FFFD
 private:
  std::string pending_;
};

}  // namespace kvscope
