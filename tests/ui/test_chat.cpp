// The chat panel on a real engine (offscreen): it names the chat template in use, and its
// second turn continues the first turn's tokens exactly, so their full blocks are cache hits;
// the same through a model's own Jinja template (a synthetic model carrying Qwen 2.5's); and a
// reasoning model's reply (Qwen3.5's real template, <think> tokens) whose thinking shows as a
// collapsible part of the reply, collapsed by default, with its token and KV-block count.
#include <QPushButton>
#include <QSettings>
#include <QtTest>

#include <fstream>
#include <sstream>

#include "chat_templates.h"
#include "engine_bridge/engine_host.h"
#include "gguf/gguf_file.h"
#include "chat_vocab.h"
#include "model/synthetic_model.h"
#include "model/tokenizer.h"
#include "panels/chat_panel.h"
#include "test_support.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {
constexpr int kTimeoutMs = 30000;
}

class TestChat : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf"); }

  void namesTemplateAndReusesTurns() {
    EngineHost host(nullptr, 2);
    ChatPanel panel(&host);
    EngineConfig cfg;
    cfg.num_blocks = 128;
    host.loadModel(QString::fromStdString((test::models_dir() / "stories260K.gguf").string()), cfg);
    QTRY_VERIFY_WITH_TIMEOUT(host.hasEngine(), kTimeoutMs);
    // stories260K is a base model without tokenizer.chat_template: plain continuation, said so.
    QVERIFY2(panel.templateText().contains(QStringLiteral("completion")), qPrintable(panel.templateText()));
    QVERIFY(panel.templateText().contains(QStringLiteral("no tokenizer.chat_template")));

    ConversationWidget* chat = panel.current();
    chat->send(QStringLiteral("Once upon a time there was a little girl named Lily."));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    QVERIFY(chat->lastStats().has_value());
    const TurnStats first = *chat->lastStats();
    const std::vector<TokenId> turn1 = chat->history();
    QCOMPARE(first.cachedTokens, 0);
    QCOMPARE(turn1.size(), static_cast<size_t>(first.promptTokens + first.generated));

    chat->send(QStringLiteral("She liked to play"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    const TurnStats second = *chat->lastStats();
    const std::vector<TokenId>& turn2 = chat->history();
    QVERIFY(turn2.size() > turn1.size());
    QVERIFY(std::equal(turn1.begin(), turn1.end(), turn2.begin()));
    // Every full block of turn 1 but the one holding its last token (never computed) is a hit.
    const int expect = (static_cast<int>(turn1.size()) - 1) / cfg.block_size * cfg.block_size;
    QVERIFY2(second.cachedTokens >= expect && expect > 0,
             qPrintable(QStringLiteral("cached %1, expected >= %2").arg(second.cachedTokens).arg(expect)));
  }

  // The model's template through the Jinja engine: named as such, and turn 2's prompt is
  // turn 1's tokens and the template's next turn, the conversation's messages kept.
  void jinjaTemplateTurns() {
    SyntheticSpec s = test::chatml_model_spec(test::kQwen25);
    const std::string path = (test::tmp_dir() / "ui-chat-qwen.gguf").string();
    write_synthetic_model(s, path);
    EngineHost host(nullptr, 1);
    ChatPanel panel(&host);
    EngineConfig cfg;
    cfg.num_blocks = 128;
    host.loadModel(QString::fromStdString(path), cfg);
    QTRY_VERIFY_WITH_TIMEOUT(host.hasEngine(), kTimeoutMs);
    QVERIFY2(panel.templateText().contains(QStringLiteral("jinja (the model's tokenizer.chat_template")),
             qPrintable(panel.templateText()));
    ConversationWidget* chat = panel.current();
    chat->send(QStringLiteral("Hello there, who are you?"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    const std::vector<TokenId> turn1 = chat->history();
    QVERIFY(chat->lastStats()->chatTurn && chat->lastStats()->chatTurn->note.empty());
    chat->send(QStringLiteral("Tell me more"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    const TurnStats second = *chat->lastStats();
    QVERIFY(second.chatTurn && !second.chatTurn->rerendered && !second.chatTurn->fell_back);
    const std::vector<TokenId>& turn2 = chat->history();
    QVERIFY(turn2.size() > turn1.size() && std::equal(turn1.begin(), turn1.end(), turn2.begin()));
    QVERIFY(second.cachedTokens >= (static_cast<int>(turn1.size()) - 1) / cfg.block_size * cfg.block_size);
    const ChatHistory& h = chat->chatHistory();
    QCOMPARE(static_cast<int>(h.messages.size()), 4);
    QCOMPARE(h.messages[2].content, std::string("Tell me more"));
    QVERIFY(h.rendered.text.find("<|im_start|>user\nTell me more<|im_end|>\n<|im_start|>assistant\n") !=
            std::string::npos);
  }

  // Qwen3.5's template opens <think> in the generation prompt, so the reply starts thinking; a
  // random-weight model does not end that by itself, so the conversation adds OpenAI's logit
  // bias (its setLogitBias, for tests and demos): +4 on </think>, and the byte tokens banned so
  // the text is plain. Greedy decoding then writes some thinking, </think>, and an answer. The
  // expected split is computed here from the generated tokens, not assumed.
  void reasoningIsCollapsibleWithItsCount() {
    SyntheticSpec s = test::chatml_model_spec("");
    s.user_tokens = {"<think>", "</think>"};
    std::ifstream in(test::source_dir() / "tests/support/templates/Qwen3.5-4B.jinja");
    QVERIFY(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    s.chat_template = ss.str();
    const std::string path = (test::tmp_dir() / "ui-chat-qwen35.gguf").string();
    write_synthetic_model(s, path);
    const auto file = GgufFile::open(path);
    const auto tok = Tokenizer::from_gguf(*file);
    const TokenId end = tok->find_token("</think>");

    EngineHost host(nullptr, 1);
    ChatPanel panel(&host);
    EngineConfig cfg;
    cfg.num_blocks = 128;
    host.loadModel(QString::fromStdString(path), cfg);
    QTRY_VERIFY_WITH_TIMEOUT(host.hasEngine(), kTimeoutMs);
    ConversationWidget* chat = panel.current();
    chat->greedyButton()->setChecked(true);
    std::vector<std::pair<int32_t, float>> bias = {{end, 4.0f}};
    for (int32_t b = 3; b < 259; ++b) bias.emplace_back(b, -100.0f);  // <0x00>..<0xFF>
    chat->setLogitBias(bias);
    chat->send(QStringLiteral("How many blocks does a long answer take?"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    const TurnStats st = *chat->lastStats();

    // The reply as generated, split where it wrote </think>.
    const std::vector<TokenId> out(st.tokens.begin() + st.promptTokens, st.tokens.end());
    std::string raw;
    for (TokenId t : out) raw += tok->token_to_piece(t);
    const size_t cut = raw.find("</think>");
    QVERIFY2(cut != std::string::npos && cut > 0 && cut + 8 < raw.size(), raw.c_str());
    const auto at_end = std::find(out.begin(), out.end(), end);
    const int thought_tokens = static_cast<int>(at_end - out.begin()) + 1;  // </think> included

    QCOMPARE(chat->turnViews().size(), size_t{1});
    const ConversationWidget::TurnView& v = chat->turnViews()[0];
    QVERIFY(v.thought && v.done && !v.expanded);
    QCOMPARE(v.reasoning.toStdString(), raw.substr(0, cut));
    QCOMPARE(v.content.toStdString(), raw.substr(cut + 8));
    QCOMPARE(st.reasoningTokens, thought_tokens);
    QCOMPARE(v.reasoningTokens, thought_tokens);
    const int bs = cfg.block_size;
    QCOMPARE(v.reasoningBlocks, (st.promptTokens + thought_tokens - 1) / bs - st.promptTokens / bs + 1);

    // Collapsed: the line with its count shows, the thinking does not; a click opens it.
    const QString header =
        QStringLiteral("Reasoning · %1 tokens in %2 KV block").arg(thought_tokens).arg(v.reasoningBlocks);
    QVERIFY2(chat->transcript().contains(header), qPrintable(chat->transcript()));
    QVERIFY(!chat->transcript().contains(v.reasoning.trimmed()));
    QVERIFY(chat->transcript().contains(v.content.trimmed()));
    chat->setReasoningExpanded(0, true);
    QVERIFY(chat->transcript().contains(v.reasoning.trimmed()));
    chat->setReasoningExpanded(0, false);
    QVERIFY(!chat->transcript().contains(v.reasoning.trimmed()));
    if (qEnvironmentVariableIsSet("KVSCOPE_CHAT_SCREENSHOT")) {  // docs/screenshots/chat-reasoning.png
      chat->setReasoningExpanded(0, true);
      panel.resize(560, 520);
      panel.show();
      QTest::qWait(200);
      panel.grab().save(qEnvironmentVariable("KVSCOPE_CHAT_SCREENSHOT"));
    }

    // The conversation keeps content and reasoning apart, as a client sends them back.
    const ChatMessage& m = chat->chatHistory().messages.back();
    QCOMPARE(m.content, raw.substr(cut + 8));
    QCOMPARE(m.reasoning, std::optional<std::string>(raw.substr(0, cut)));
  }
};

QTEST_MAIN(TestChat)
#include "test_chat.moc"
