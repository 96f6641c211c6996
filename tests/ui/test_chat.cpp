// The chat panel on a real engine (offscreen): it names the chat template in use, and its
// second turn continues the first turn's tokens exactly, so their full blocks are cache hits;
// the same through a model's own Jinja template (a synthetic model carrying Qwen 2.5's).
#include <QSettings>
#include <QtTest>

#include "chat_templates.h"
#include "engine_bridge/engine_host.h"
#include "model/synthetic_model.h"
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
    SyntheticSpec s;
    s.n_vocab = 512;
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.n_ff = 128;
    s.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    s.chat_template = test::kQwen25;
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
};

QTEST_MAIN(TestChat)
#include "test_chat.moc"
