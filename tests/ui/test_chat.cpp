// The chat panel on a real engine (offscreen): it names the chat template in use, and its
// second turn continues the first turn's tokens exactly, so their full blocks are cache hits.
#include <QSettings>
#include <QtTest>

#include "panels/chat_panel.h"
#include "engine_bridge/engine_host.h"
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
};

QTEST_MAIN(TestChat)
#include "test_chat.moc"
