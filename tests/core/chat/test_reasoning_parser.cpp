// The reasoning parser (core/chat/reasoning_parser.h): think blocks and harmony channels split
// into reasoning and content the same however the reply is cut into pieces (every marker split
// at every byte, and one byte at a time), no part ever showing half a marker; replies without
// an end marker, without reasoning, and prompts that open or close the block themselves; the
// marker text of control tokens; and how many tokens and KV blocks the reasoning took.
#include <QtTest>

#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat_vocab.h"

using namespace kvscope;

namespace {

struct Split {
  std::string reasoning, content;
  bool closed = false;
};

Split run(const ReasoningSetup& setup, const std::vector<std::string>& pieces) {
  ReasoningParser p(setup);
  Split s;
  for (const std::string& piece : pieces) {
    const ReasoningDelta d = p.feed(piece);
    s.reasoning += d.reasoning;
    s.content += d.content;
  }
  const ReasoningDelta d = p.finish();
  s.reasoning += d.reasoning;
  s.content += d.content;
  s.closed = p.reasoning_closed();
  return s;
}

// `text` cut at `cuts` (increasing byte offsets).
std::vector<std::string> cut(const std::string& text, const std::vector<size_t>& cuts) {
  std::vector<std::string> out;
  size_t from = 0;
  for (size_t c : cuts) {
    out.push_back(text.substr(from, c - from));
    from = c;
  }
  out.push_back(text.substr(from));
  return out;
}

// Every cut into two and three pieces, and one byte at a time, gives the split of the whole.
void check_every_cut(const ReasoningSetup& setup, const std::string& text, const Split& want) {
  auto same = [&](const std::vector<std::string>& pieces, const char* how) {
    const Split got = run(setup, pieces);
    QVERIFY2(got.reasoning == want.reasoning && got.content == want.content && got.closed == want.closed,
             qPrintable(QStringLiteral("%1 of %2: reasoning '%3' content '%4'")
                            .arg(how, QString::fromStdString(text), QString::fromStdString(got.reasoning),
                                 QString::fromStdString(got.content))));
  };
  for (size_t i = 0; i <= text.size(); ++i) {
    same(cut(text, {i}), "two pieces");
    for (size_t j = i; j <= text.size(); ++j) same(cut(text, {i, j}), "three pieces");
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  same(cut(text, bytes), "bytes");
}

// Fed one byte at a time, no delta ever carries a piece of a marker.
void check_no_partial_marker(const ReasoningSetup& setup, const std::string& text,
                             const std::vector<std::string>& markers) {
  ReasoningParser p(setup);
  for (char c : text) {
    const ReasoningDelta d = p.feed(std::string(1, c));
    for (const std::string& m : markers)
      for (size_t n = 1; n <= m.size(); ++n)
        QVERIFY2(d.reasoning.find(m.substr(0, n)) == std::string::npos &&
                     d.content.find(m.substr(0, n)) == std::string::npos,
                 qPrintable(QString::fromStdString("a piece of " + m + " leaked from " + text)));
  }
}

const ReasoningSetup kThink{ReasoningFormat::Think, ReplyStart::Fresh};
const ReasoningSetup kHarmony{ReasoningFormat::Harmony, ReplyStart::Fresh};

const char* kHarmonyReply =
    "<|channel|>analysis<|message|>User asks capital. Paris.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The capital is Paris.<|return|>";

std::vector<test::ExtraToken> harmony_tokens() {
  std::vector<test::ExtraToken> t;
  for (const char* m : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"})
    t.push_back({m, 3});
  return t;
}

}  // namespace

class TestReasoningParser : public QObject {
  Q_OBJECT
 private slots:
  void thinkBlockAtEveryCut() {
    const std::string text = "<think>\nThe user greets. Greet back.\n</think>\n\nHello!";
    check_every_cut(kThink, text, {"\nThe user greets. Greet back.\n", "\n\nHello!", true});
    check_no_partial_marker(kThink, text, {"<think>", "</think>"});
    // White space before the block is not content.
    check_every_cut(kThink, "\n <think>a</think>b", {"a", "b", true});
  }

  void thinkWithoutEndMarker() {
    // The reply ran out (max_tokens) while thinking: all of it is reasoning, none is content,
    // and a held-back "</thi" is given out at the end.
    check_every_cut(kThink, "<think>still weighing it", {"still weighing it", "", false});
    check_every_cut(kThink, "<think>cut at </thi", {"cut at </thi", "", false});
  }

  void contentWithoutReasoning() {
    check_every_cut(kThink, "Just an answer.", {"", "Just an answer.", false});
    // <think> opens a block only at the start: later it is text.
    check_every_cut(kThink, "Say <think>x</think> literally", {"", "Say <think>x</think> literally", false});
    check_every_cut(kThink, "  <thin", {"", "  <thin", false});  // the reply ended on a half marker
    check_every_cut(kThink, "", {"", "", false});
    // No parser: everything is content, markers too.
    check_every_cut(ReasoningSetup{}, "<think>a</think>b", {"", "<think>a</think>b", false});
  }

  void promptOpensOrClosesTheBlock() {
    // Qwen3.5 and DeepSeek-R1 open <think> in the generation prompt.
    QCOMPARE(reply_start(ReasoningFormat::Think, "<|im_start|>assistant\n<think>\n"), ReplyStart::InReasoning);
    // Qwen3 with enable_thinking false writes an empty block there.
    QCOMPARE(reply_start(ReasoningFormat::Think, "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
             ReplyStart::InContent);
    QCOMPARE(reply_start(ReasoningFormat::Think, "<|im_start|>assistant\n"), ReplyStart::Fresh);
    QCOMPARE(reply_start(ReasoningFormat::None, "<think>\n"), ReplyStart::Fresh);
    check_every_cut({ReasoningFormat::Think, ReplyStart::InReasoning}, "plan it\n</think>\n\nDone.",
                    {"plan it\n", "\n\nDone.", true});
    check_every_cut({ReasoningFormat::Think, ReplyStart::InReasoning}, "never closed", {"never closed", "", false});
    check_every_cut({ReasoningFormat::Think, ReplyStart::InContent}, "<think>x</think>y",
                    {"", "<think>x</think>y", false});
  }

  void harmonyChannels() {
    check_every_cut(kHarmony, kHarmonyReply, {"User asks capital. Paris.", "The capital is Paris.", true});
    check_no_partial_marker(kHarmony, kHarmonyReply,
                            {"<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|return|>"});
    // A tool call on the commentary channel is content; the header's recipient is not text.
    check_every_cut(kHarmony, "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": 1}<|call|>",
                    {"", "{\"a\": 1}", false});
    // Cut off in the analysis message, and in the next header.
    check_every_cut(kHarmony, "<|channel|>analysis<|message|>hmm", {"hmm", "", false});
    check_every_cut(kHarmony, "<|channel|>analysis<|message|>hmm<|end|><|start|>assist", {"hmm", "", true});
    // A reply that never speaks harmony stays content, short or long.
    check_every_cut(kHarmony, "plain words", {"", "plain words", false});
    const std::string long_text(300, 'x');
    QCOMPARE(run(kHarmony, {long_text}).content, long_text);
  }

  void harmonyPromptTail() {
    QCOMPARE(reply_start(ReasoningFormat::Harmony, "<|start|>user<|message|>Hi<|end|><|start|>assistant"),
             ReplyStart::Fresh);
    QCOMPARE(reply_start(ReasoningFormat::Harmony, "<|start|>assistant<|channel|>analysis<|message|>"),
             ReplyStart::InReasoning);
    QCOMPARE(reply_start(ReasoningFormat::Harmony,
                         "<|start|>assistant<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>"
                         "final<|message|>"),
             ReplyStart::InContent);
    check_every_cut({ReasoningFormat::Harmony, ReplyStart::InReasoning},
                    "think<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>", {"think", "ok", true});
  }

  void formatsByName() {
    for (ReasoningFormat f : {ReasoningFormat::None, ReasoningFormat::Think, ReasoningFormat::Harmony})
      QCOMPARE(reasoning_format_from_name(reasoning_format_name(f)), std::optional<ReasoningFormat>(f));
    QCOMPARE(reasoning_format_from_name("qwen3"), std::optional<ReasoningFormat>(ReasoningFormat::Think));
    QCOMPARE(reasoning_format_from_name("deepseek_r1"), std::optional<ReasoningFormat>(ReasoningFormat::Think));
    QCOMPARE(reasoning_format_from_name("openai_gptoss"), std::optional<ReasoningFormat>(ReasoningFormat::Harmony));
    QVERIFY(!reasoning_format_from_name("auto").has_value());
    QVERIFY(!reasoning_format_from_name("thinking").has_value());
  }

  void formatFromVocabulary() {
    QCOMPARE(detect_reasoning_format(*test::chatml_vocab("").tok), ReasoningFormat::None);
    QCOMPARE(detect_reasoning_format(*test::chatml_vocab("", {{"<think>", 4}, {"</think>", 4}}).tok),
             ReasoningFormat::Think);
    QCOMPARE(detect_reasoning_format(*test::chatml_vocab("", {{"<think>", 4}}).tok), ReasoningFormat::None);
    QCOMPARE(detect_reasoning_format(*test::chatml_vocab("", harmony_tokens()).tok), ReasoningFormat::Harmony);
  }

  // gpt-oss's markers are control tokens, which token_to_piece drops: the parser gets their text.
  void markerPiecesOfControlTokens() {
    const test::Vocab v = test::chatml_vocab("", harmony_tokens());
    const TokenId channel = v.tok->find_token("<|channel|>");
    QCOMPARE(v.tok->token_to_piece(channel), std::string());
    QCOMPARE(reasoning_piece(*v.tok, channel, ReasoningFormat::Harmony), std::string("<|channel|>"));
    QCOMPARE(reasoning_piece(*v.tok, channel, ReasoningFormat::None), std::string());
    // Other control tokens stay hidden.
    const TokenId im_end = v.tok->find_token("<|im_end|>");
    QCOMPARE(reasoning_piece(*v.tok, im_end, ReasoningFormat::Harmony), std::string());
    const TokenId a = v.tok->find_token("a");
    QCOMPARE(reasoning_piece(*v.tok, a, ReasoningFormat::Harmony), std::string("a"));
  }

  // The tokens the reasoning took, markers included, and the KV blocks that hold them.
  void spanOfThinkReply() {
    const test::Vocab v = test::chatml_vocab("", {{"<think>", 4}, {"</think>", 4}});
    const Tokenizer& tok = *v.tok;
    const std::vector<TokenId> thought = tok.encode("<think>abc</think>", false, true);
    const std::vector<TokenId> answer = tok.encode("xyz", false, true);
    std::vector<TokenId> out = thought;
    out.insert(out.end(), answer.begin(), answer.end());
    out.push_back(tok.find_token("<|im_end|>"));
    QCOMPARE(thought.size(), size_t{5});  // <think> a b c </think>: the markers are one token each
    const ReasoningSpan s = reasoning_span(tok, kThink, out);
    QCOMPARE(s.tokens, static_cast<int32_t>(thought.size()));
    QCOMPARE(s.ranges.size(), size_t{1});
    QCOMPARE(s.ranges[0], std::make_pair(0, static_cast<int32_t>(thought.size())));
    QVERIFY(s.closed);
    // Prompt of 14 tokens, blocks of 4: the reasoning sits at positions 14..18, blocks 3 and 4.
    QCOMPARE(s.blocks(14, 4), 2);
    QCOMPARE(s.blocks(16, 4), 2);   // 16..20: blocks 4 and 5
    QCOMPARE(s.blocks(16, 16), 1);  // all in block 1
    // Without the parser, or with a reply that does not think, nothing.
    QCOMPARE(reasoning_span(tok, ReasoningSetup{}, out).tokens, 0);
    QCOMPARE(reasoning_span(tok, kThink, answer).tokens, 0);
    // Cut off while thinking: every token is reasoning, and it never closed.
    const ReasoningSpan open = reasoning_span(tok, kThink, tok.encode("<think>abcd", false, true));
    QCOMPARE(open.tokens, 5);
    QVERIFY(!open.closed);
    // Started inside by the prompt: the reasoning is what comes before </think>, marker included.
    const ReasoningSpan inside =
        reasoning_span(tok, {ReasoningFormat::Think, ReplyStart::InReasoning}, tok.encode("ab</think>c", false, true));
    QCOMPARE(inside.tokens, 3);
  }

  void spanOfHarmonyReply() {
    const test::Vocab v = test::chatml_vocab("", harmony_tokens());
    const Tokenizer& tok = *v.tok;
    const std::vector<TokenId> analysis =
        tok.encode("<|channel|>analysis<|message|>User asks capital. Paris.<|end|>", false, true);
    const std::vector<TokenId> final_msg =
        tok.encode("<|start|>assistant<|channel|>final<|message|>The capital is Paris.<|return|>", false, true);
    std::vector<TokenId> out = analysis;
    out.insert(out.end(), final_msg.begin(), final_msg.end());
    const ReasoningSpan s = reasoning_span(tok, kHarmony, out);
    // The analysis message with its header and end marker; not the final message.
    QCOMPARE(s.tokens, static_cast<int32_t>(analysis.size()));
    QCOMPARE(s.ranges.size(), size_t{1});
    QCOMPARE(s.ranges[0].first, 0);
    QVERIFY(s.closed);
  }
};

QTEST_MAIN(TestReasoningParser)
#include "test_reasoning_parser.moc"
