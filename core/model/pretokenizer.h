#pragma once
// Pre-tokenizers of byte-level BPE vocabularies: split text into words before BPE merges run.
// llama.cpp describes each tokenizer.ggml.pre type as a list of regexes applied one after another, each
// refining the pieces of the previous one (matches and the text between matches both become pieces).
// Here every regex is a hand-written scanner over code points that reproduces llama.cpp's splits,
// including its custom GPT-2 / Llama-3 scanners and the std::regex semantics of the others.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

class PreTokenizer {
 public:
  enum class Step {
    Gpt2,          // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    Llama3,        // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    Qwen2,         // as Llama3 but \p{N} (single digits)
    Qwen35,        // as Qwen2, letter runs [\p{L}\p{M}]+ (combining marks join the letters)
    PunctRun,      // [\p{P}\$\+<=>\^~\|]+
    PunctRunTick,  // [\p{P}\$\+<=>\^~\|`]+ (falcon)
    NumberRun,     // \p{N}+
    Number,        // \p{N}
    AsciiDigits3,  // [0-9][0-9][0-9]
    Newline,       // [\r\n]
    SpaceLetters,  // \s?\p{L}+
    SpacePunct,    // \s?\p{P}+
    CjkRun,        // [一-龥ࠀ-一가-퟿]+
    // deepseek-llm's std::wregex steps (non-ASCII white space reads as '\v' there):
    SpaceCasedLetters,  // \s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+ (cased letters of Latin, Greek, Cyrillic, ...)
    SpaceAsciiPunct,    // \s?[!-/:-~！-／：-～‘-‟　-。]+
    TrailingSpace,      // \s+$
    NewlineRuns,        // [^\n]+|[\n]+ (gemma4)
    // With Unicode letter case (model/pretokenizer_fragment.h has the regexes):
    Tekken,          // Mistral's tekken
    Gpt4o,           // o200k: gpt-4o, Llama 4, MiniMax-M2
    Number3,         // \p{N}{1,3} (deepseek-v3)
    CjkKanaRun,      // [一-龥぀-ゟ゠-ヿ]+ (deepseek-v3)
    Deepseek3Words,  // deepseek-v3's third regex
  };

  // Throws std::runtime_error naming `pre` when that pre-tokenizer type is not implemented.
  explicit PreTokenizer(const std::string& pre);

  // Words in order; invalid UTF-8 bytes become U+FFFD. Concatenated, they give the decoded text.
  std::vector<std::string> split(std::string_view text) const;

  const std::vector<Step>& steps() const { return steps_; }
  // llama.cpp options tied to the pre type (the GGUF keys, when present, still win for add_bos).
  bool ignore_merges() const { return ignore_merges_; }  // a word that is a whole token skips BPE
  bool default_add_bos() const { return default_add_bos_; }

  // Names accepted by the constructor (for messages and tests).
  static std::vector<std::string> supported_names();

 private:
  std::vector<Step> steps_;
  bool ignore_merges_ = false;
  bool default_add_bos_ = false;
};

}  // namespace kvscope
