#include "chat/reasoning_parser.h"

#include <algorithm>
#include <array>

namespace kvscope {
namespace {

using Part = ReasoningParser::Part;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
// What ends a harmony message: the end of a turn that goes on, of the reply, of a tool call.
constexpr std::array<std::string_view, 3> kHarmonyEnds = {"<|end|>", "<|return|>", "<|call|>"};
constexpr std::array<std::string_view, 7> kHarmonyMarkers = {"<|start|>",  "<|channel|>", "<|message|>",  "<|end|>",
                                                             "<|return|>", "<|call|>",    "<|constrain|>"};
constexpr std::array<std::string_view, 2> kThinkMarkers = {kThinkOpen, kThinkClose};
// A harmony header is a few words ("<|start|>assistant<|channel|>final"); text that runs this
// long without <|message|> is a reply that does not speak harmony, so it is content.
constexpr size_t kMaxHeader = 128;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The length of the longest tail of `text` that is the start of `marker` (and not all of it).
size_t partial_tail(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// The channel a harmony header names: the word after its last <|channel|> ("" when none).
std::string_view channel_of(std::string_view header) {
  const size_t at = header.rfind(kChannel);
  if (at == std::string_view::npos) return {};
  std::string_view rest = header.substr(at + kChannel.size());
  size_t n = 0;
  while (n < rest.size() && !is_space(rest[n]) && rest[n] != '<') ++n;
  return rest.substr(0, n);
}

}  // namespace

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::Think:
      return "think";
    case ReasoningFormat::Harmony:
      return "harmony";
    case ReasoningFormat::None:
      break;
  }
  return "none";
}

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "none") return ReasoningFormat::None;
  if (name == "think" || name == "qwen3" || name == "deepseek_r1") return ReasoningFormat::Think;
  if (name == "harmony" || name == "openai_gptoss" || name == "gpt-oss") return ReasoningFormat::Harmony;
  return std::nullopt;
}

ReasoningFormat detect_reasoning_format(const Tokenizer& tok) {
  if (tok.find_token(kChannel) >= 0 && tok.find_token(kMessage) >= 0) return ReasoningFormat::Harmony;
  if (tok.find_token(kThinkOpen) >= 0 && tok.find_token(kThinkClose) >= 0) return ReasoningFormat::Think;
  return ReasoningFormat::None;
}

ReplyStart reply_start(ReasoningFormat f, std::string_view prompt) {
  if (f == ReasoningFormat::Think) {
    const std::string_view tail = rstrip(prompt);
    if (tail.ends_with(kThinkOpen)) return ReplyStart::InReasoning;
    if (tail.ends_with(kThinkClose)) return ReplyStart::InContent;
  } else if (f == ReasoningFormat::Harmony && prompt.ends_with(kMessage)) {
    std::string_view header = prompt.substr(0, prompt.size() - kMessage.size());
    const size_t start = header.rfind(kStart);
    if (start != std::string_view::npos) header = header.substr(start);
    return channel_of(header) == "analysis" ? ReplyStart::InReasoning : ReplyStart::InContent;
  }
  return ReplyStart::Fresh;
}

ReasoningParser::ReasoningParser(ReasoningSetup setup) : format_(setup.format) {
  if (format_ == ReasoningFormat::None) return;  // all content
  switch (setup.start) {
    case ReplyStart::Fresh:
      part_ = Part::Undecided;
      break;
    case ReplyStart::InReasoning:
      part_ = Part::Reasoning;
      saw_reasoning_ = true;
      in_body_ = true;
      break;
    case ReplyStart::InContent:
      part_ = Part::Content;
      in_body_ = true;
      break;
  }
}

void ReasoningParser::give(ReasoningDelta& out, std::string_view text) {
  (part_ == Part::Reasoning ? out.reasoning : out.content) += text;
}

ReasoningDelta ReasoningParser::feed(std::string_view piece) {
  ReasoningDelta out;
  if (format_ == ReasoningFormat::None) {
    out.content = piece;
    return out;
  }
  held_ += piece;
  if (format_ == ReasoningFormat::Think)
    step_think(out);
  else
    step_harmony(out);
  return out;
}

void ReasoningParser::step_think(ReasoningDelta& out) {
  if (part_ == Part::Undecided) {  // the reply's start: does it open a <think> block?
    size_t ws = 0;
    while (ws < held_.size() && is_space(held_[ws])) ++ws;
    const std::string_view rest = std::string_view(held_).substr(ws);
    if (rest.starts_with(kThinkOpen)) {
      held_.erase(0, ws + kThinkOpen.size());
      part_ = Part::Reasoning;
      saw_reasoning_ = true;
    } else if (kThinkOpen.starts_with(rest)) {
      return;  // white space, or the start of "<think>": not known yet
    } else {
      part_ = Part::Content;
    }
  }
  if (part_ == Part::Reasoning) {
    const size_t at = held_.find(kThinkClose);
    if (at == std::string::npos) {
      const size_t give = held_.size() - partial_tail(held_, kThinkClose);
      out.reasoning += held_.substr(0, give);
      held_.erase(0, give);
      return;
    }
    out.reasoning += held_.substr(0, at);
    held_.erase(0, at + kThinkClose.size());
    part_ = Part::Content;
    closed_ = true;
  }
  out.content += held_;
  held_.clear();
}

void ReasoningParser::step_harmony(ReasoningDelta& out) {
  for (;;) {
    if (!in_body_) {  // a header: "<|start|>assistant<|channel|>analysis" up to <|message|>
      const size_t at = held_.find(kMessage);
      if (at == std::string::npos && held_.size() <= kMaxHeader) return;
      if (at == std::string::npos) {
        part_ = Part::Content;  // no header after all: the text is the reply
      } else {
        part_ = channel_of(std::string_view(held_).substr(0, at)) == "analysis" ? Part::Reasoning : Part::Content;
        saw_reasoning_ = saw_reasoning_ || part_ == Part::Reasoning;
        held_.erase(0, at + kMessage.size());
      }
      in_body_ = true;
    }
    size_t end = std::string::npos, len = 0;
    for (std::string_view m : kHarmonyEnds)
      if (const size_t p = held_.find(m); p < end) end = p, len = m.size();
    if (end == std::string::npos) {
      size_t keep = 0;
      for (std::string_view m : kHarmonyEnds) keep = std::max(keep, partial_tail(held_, m));
      give(out, std::string_view(held_).substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
    give(out, std::string_view(held_).substr(0, end));
    closed_ = closed_ || part_ == Part::Reasoning;
    held_.erase(0, end + len);
    in_body_ = false;
    part_ = Part::Undecided;
  }
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  if (part_ == Part::Undecided) {
    // A think reply that was only white space is content; a harmony header is no text, unless
    // it holds no marker at all (a short reply that never spoke harmony).
    if (format_ == ReasoningFormat::Think || held_.find("<|") == std::string::npos) out.content = held_;
  } else {
    give(out, held_);
  }
  held_.clear();
  return out;
}

std::string reasoning_piece(const Tokenizer& tok, TokenId id, ReasoningFormat f) {
  if (f != ReasoningFormat::None && id >= 0 && id < tok.n_vocab()) {
    const std::string& text = tok.token_text(id);
    auto is_marker = [&](std::string_view m) { return text == m; };
    if (f == ReasoningFormat::Harmony ? std::any_of(kHarmonyMarkers.begin(), kHarmonyMarkers.end(), is_marker)
                                      : std::any_of(kThinkMarkers.begin(), kThinkMarkers.end(), is_marker))
      return text;
  }
  return tok.token_to_piece(id);
}

int32_t ReasoningSpan::blocks(int32_t prompt_len, int32_t block_size) const {
  if (block_size <= 0) return 0;
  int32_t n = 0, last = -1;
  for (const auto& [a, b] : ranges) {
    const int32_t first_block = std::max((prompt_len + a) / block_size, last + 1);
    const int32_t last_block = (prompt_len + b - 1) / block_size;
    if (last_block >= first_block) n += last_block - first_block + 1;
    last = std::max(last, last_block);
  }
  return n;
}

ReasoningSpan reasoning_span(const Tokenizer& tok, const ReasoningSetup& setup, std::span<const TokenId> output) {
  ReasoningSpan s;
  if (!setup.on()) return s;
  ReasoningParser p(setup);
  auto mark = [&s](int32_t a, int32_t b) {  // output indices [a, b) are reasoning
    if (!s.ranges.empty() && s.ranges.back().second >= a)
      s.ranges.back().second = std::max(s.ranges.back().second, b);
    else
      s.ranges.emplace_back(a, b);
  };
  // A token fed while the part is undecided (a harmony header, white space before <think>)
  // belongs to the part it turns out to open.
  int32_t undecided_from = -1;
  for (size_t i = 0; i < output.size(); ++i) {
    const int32_t at = static_cast<int32_t>(i);
    const Part before = p.part();
    if (before == Part::Undecided && undecided_from < 0) undecided_from = at;
    p.feed(reasoning_piece(tok, output[i], setup.format));
    const Part after = p.part();
    if (after == Part::Reasoning && undecided_from >= 0)
      mark(undecided_from, at + 1);
    else if (before == Part::Reasoning || after == Part::Reasoning)
      mark(at, at + 1);
    if (after != Part::Undecided) undecided_from = -1;
  }
  for (const auto& [a, b] : s.ranges) s.tokens += b - a;
  s.closed = p.reasoning_closed();
  return s;
}

}  // namespace kvscope
