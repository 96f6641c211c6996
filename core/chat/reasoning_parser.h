#pragma once
// Splits a reasoning model's reply into its reasoning and its content, as it streams: fed the
// reply's text piece by piece (one token's text at a time, or any other cut), it says which part
// of each piece is reasoning and which is content. A marker split across pieces ("</th" + "ink>")
// is held back until it is whole, so no part ever shows half a marker.
//
// Two formats:
//  - think: Qwen3, Qwen3.5, DeepSeek-R1 and their kin write "<think>...</think>" and then the
//    answer. A template may open the block in the generation prompt itself (Qwen3.5, R1:
//    "<|im_start|>assistant\n<think>\n"), so the reply starts inside it; or close it there
//    (Qwen3 with enable_thinking false: "<think>\n\n</think>\n\n"), so the reply is all answer.
//    That is read from the rendered prompt's tail (reply_start). Otherwise "<think>" opens the
//    block only at the very start of the reply (after white space); later it is plain text.
//  - harmony: gpt-oss writes messages on channels:
//    "<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>".
//    The analysis channel is reasoning; final and commentary (tool-call preambles) are content.
//    The headers and the end markers belong to neither.
//
// Which format a model speaks is read from its vocabulary (detect_reasoning_format); the chat and
// the server can force one or turn parsing off (--reasoning-parser).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/tokenizer.h"

namespace kvscope {

enum class ReasoningFormat : uint8_t { None, Think, Harmony };
const char* reasoning_format_name(ReasoningFormat f);  // "none", "think", "harmony"
// "none", "think", "harmony", and vLLM's parser names for them (qwen3, deepseek_r1,
// openai_gptoss); nullopt for anything else ("auto" is the caller's to handle).
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);
// harmony when the vocabulary has <|channel|> and <|message|>, think when it has <think> and
// </think>, else none.
ReasoningFormat detect_reasoning_format(const Tokenizer& tok);

// Where the reply begins, as the prompt left it.
enum class ReplyStart : uint8_t {
  Fresh,        // nothing opened yet: the reply may open a reasoning block itself
  InReasoning,  // the prompt opened the reasoning (ends with "<think>" or an analysis header)
  InContent,    // the prompt already closed it, or opened the final channel
};
ReplyStart reply_start(ReasoningFormat f, std::string_view rendered_prompt);

// What a request's reply is parsed with (None: all content).
struct ReasoningSetup {
  ReasoningFormat format = ReasoningFormat::None;
  ReplyStart start = ReplyStart::Fresh;
  bool on() const { return format != ReasoningFormat::None; }
};

struct ReasoningDelta {
  std::string reasoning, content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ReasoningParser {
 public:
  // The part the parser is in: not yet known (the start of a think reply, a harmony header),
  // reasoning, or content.
  enum class Part : uint8_t { Undecided, Reasoning, Content };

  ReasoningParser() = default;
  explicit ReasoningParser(ReasoningSetup setup);
  // The next piece of the reply. Text that may be the start of a marker is held back.
  ReasoningDelta feed(std::string_view piece);
  // The reply ended: what was held back goes to the part it was in (a Fresh think reply's held
  // white space to content; an unfinished harmony header is dropped, as it is no text).
  ReasoningDelta finish();
  Part part() const { return part_; }
  bool saw_reasoning() const { return saw_reasoning_; }
  bool reasoning_closed() const { return closed_; }  // think: </think> seen; harmony: an analysis message ended

 private:
  void step_think(ReasoningDelta& out);
  void step_harmony(ReasoningDelta& out);
  void give(ReasoningDelta& out, std::string_view text);

  ReasoningFormat format_ = ReasoningFormat::None;
  Part part_ = Part::Content;
  std::string held_;  // text not yet given out (a possible marker, a harmony header)
  bool saw_reasoning_ = false;
  bool closed_ = false;
  bool in_body_ = false;  // harmony: inside a message (after <|message|>)
};

// A token's text as the parser needs it: the format's markers keep their text even where the
// vocabulary makes them control tokens (gpt-oss's <|channel|>, which token_to_piece drops);
// every other token as token_to_piece(id) gives it.
std::string reasoning_piece(const Tokenizer& tok, TokenId id, ReasoningFormat f);

// How much of a reply was reasoning, counted in tokens: the tokens of the reasoning blocks with
// their markers (a harmony analysis message with its header), as ranges of output indices.
struct ReasoningSpan {
  int32_t tokens = 0;
  std::vector<std::pair<int32_t, int32_t>> ranges;  // [first, end) output indices, in order
  bool closed = false;                              // the reasoning ended before the reply did
  // KV blocks of `block_size` tokens holding at least one reasoning token, the reply starting
  // at position `prompt_len`.
  int32_t blocks(int32_t prompt_len, int32_t block_size) const;
};
ReasoningSpan reasoning_span(const Tokenizer& tok, const ReasoningSetup& setup, std::span<const TokenId> output);

}  // namespace kvscope
