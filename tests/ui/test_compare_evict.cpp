// Token eviction in the window (offscreen, stories260K): B's eviction in the Compare panel reaches
// B's engine (its snapshots evict, A's do not, the table says so) and B's quality run (scored
// exactly as the core's eval with that eviction); a bad spec is refused with a visible message;
// the Settings panel's eviction field refuses a bad spec beside the field and, applied, reaches
// the engine (its snapshot names the policy and a chat turn leaves evicted tokens).
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QtTest>

#include "panels/chat_panel.h"
#include "controls/compare_panel.h"
#include "gui_test_support.h"
#include "shell/main_window.h"
#include "run/perplexity.h"
#include "controls/settings_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 60000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

int row_of(const QTableWidget* t, const QString& header) {
  for (int r = 0; r < t->rowCount(); ++r)
    if (t->verticalHeaderItem(r)->text() == header) return r;
  return -1;
}

}  // namespace

class TestCompareEvict : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::start_gui_suite("compare-evict"); }
  void init() { QSettings().clear(); }

  // B = A + h2o:32: a scenario and a quality run. A never evicts; B's snapshots and table show
  // the eviction, and its quality run equals eval_text with the same eviction (not A's numbers).
  void compareAppliesBsEviction() {
    MainWindow w;
    w.show();
    w.openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    // Longer than a prefill chunk (64): within one chunk every row is scored before the step's
    // eviction, so a shorter text would score exactly as without eviction.
    const QString textPath = QString::fromStdString((test::source_dir() / "resources/texts/long-story.txt").string());
    QString text;
    {
      QFile f(textPath);
      QVERIFY(f.open(QIODevice::ReadOnly));
      text = QString::fromUtf8(f.readAll()).trimmed();
    }
    constexpr int kQualityTokens = 200;
    ComparePanel* cmp = w.comparePanel();
    cmp->evictB()->setText(QStringLiteral("h2o:32"));
    cmp->qualityRun()->setChecked(true);
    cmp->qualityText()->setEditText(textPath);
    cmp->qualityTokens()->setValue(kQualityTokens);
    QString why;
    QVERIFY2(cmp->start(QStringLiteral("long-document-rag"), &why), qPrintable(why));
    QTRY_VERIFY_WITH_TIMEOUT(cmp->finished(), 3 * kTimeoutMs);

    const SnapshotPtr a = cmp->lastSnapshot(0), b = cmp->lastSnapshot(1);
    QVERIFY(a && b);
    QCOMPARE(QString::fromStdString(a->eviction.policy), QStringLiteral("off"));
    QCOMPARE(a->eviction.tokens_evicted, uint64_t{0});
    QCOMPARE(QString::fromStdString(b->eviction.policy), QStringLiteral("h2o:32"));
    QVERIFY2(b->eviction.tokens_evicted > 0, "B's engine evicted nothing");
    if (b->memory.blocks_used == 0)
      QCOMPARE(b->eviction.holes, int64_t{0});  // freed blocks' old holes are not holes now

    QTableWidget* t = cmp->table();
    const int evicted = row_of(t, QStringLiteral("tokens evicted (holes now)")),
              freed = row_of(t, QStringLiteral("blocks freed · compactions (MiB copied)"));
    QVERIFY(evicted >= 0 && freed >= 0);
    QCOMPARE(t->item(evicted, 0)->text(), QStringLiteral("off"));
    QCOMPARE(t->item(freed, 0)->text(), QStringLiteral("off"));
    QVERIFY2(t->item(evicted, 1)->text().startsWith(QString::number(b->eviction.tokens_evicted) + QStringLiteral(" (")),
             qPrintable(t->item(evicted, 1)->text()));
    QVERIFY2(t->item(freed, 1)->text().startsWith(QString::number(b->eviction.blocks_freed) + QStringLiteral(" · ")),
             qPrintable(t->item(freed, 1)->text()));
    QVERIFY(t->horizontalHeaderItem(1)->text().contains(QStringLiteral("evict h2o:32")));
    QVERIFY(!t->horizontalHeaderItem(0)->text().contains(QStringLiteral("evict")));

    // The quality run evicted too, and scored exactly as the core's eval with that eviction.
    const auto qa = cmp->quality(0), qb = cmp->quality(1);
    QVERIFY(qa && qb);
    QVERIFY2(qa->error.isEmpty(), qPrintable(qa->error));
    QVERIFY2(qb->error.isEmpty(), qPrintable(qb->error));
    auto model = Model::load(model_path().toStdString());
    std::vector<TokenId> tokens = model->tokenizer->encode(text.toStdString(), true, false);
    QVERIFY(tokens.size() > kQualityTokens);
    tokens.resize(kQualityTokens);  // as the worker cuts it
    EvalConfig cb;
    cb.evict = parse_evict("h2o:32");
    const EvalRun ra = eval_text(model, tokens, EvalConfig{}), rb = eval_text(model, tokens, cb);
    QCOMPARE(qa->tokensEvicted, quint64{0});
    QCOMPARE(qb->tokensEvicted, static_cast<quint64>(rb.tokens_evicted));
    QVERIFY(rb.tokens_evicted > 0);
    QVERIFY(std::abs(qa->perplexity - ra.perplexity) <= 1e-4 * ra.perplexity);
    QVERIFY(std::abs(qb->perplexity - rb.perplexity) <= 1e-4 * rb.perplexity);
    QVERIFY(std::abs(qb->perplexity - qa->perplexity) > 1e-6 * qa->perplexity);  // eviction changed the numbers
    QVERIFY(cmp->agreement().has_value());
    QVERIFY(cmp->agreement()->kl_mean > 0);
    const int ppl = row_of(t, QStringLiteral("perplexity (quality run)"));
    QVERIFY2(t->item(ppl, 1)->text().contains(QStringLiteral("%1 evicted").arg(rb.tokens_evicted)),
             qPrintable(t->item(ppl, 1)->text()));
  }

  // A bad spec for B starts nothing, and Run both shows why in the panel's status line.
  void compareRefusesABadEvictionSpec() {
    MainWindow w;
    w.show();
    w.openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    ComparePanel* cmp = w.comparePanel();
    for (const QString& bad : {QStringLiteral("lru:10"), QStringLiteral("h2o:"), QStringLiteral("h2o:150%")}) {
      cmp->evictB()->setText(bad);
      QString why;
      QVERIFY2(!cmp->start(QStringLiteral("tiny-completions"), &why), qPrintable(bad));
      QVERIFY2(why.startsWith(QStringLiteral("B's token eviction: '") + bad + QLatin1Char('\'')), qPrintable(why));
    }
    cmp->evictB()->setText(QStringLiteral("h2o:abc"));
    QPushButton* run = nullptr;
    for (QPushButton* p : cmp->findChildren<QPushButton*>())
      if (p->text() == QStringLiteral("Run both")) run = p;
    QVERIFY(run);
    run->click();
    QVERIFY2(cmp->statusLabel()->text().contains(QStringLiteral("is not a number")),
             qPrintable(cmp->statusLabel()->text()));
    QVERIFY(!cmp->lastSnapshot(0) && !cmp->lastSnapshot(1));  // nothing ran
    // A rule of the engine's validation (a budget beyond the 2048-token context) is refused the same way.
    cmp->evictB()->setText(QStringLiteral("h2o:5000"));
    QString why;
    QVERIFY(!cmp->start(QStringLiteral("tiny-completions"), &why));
    QVERIFY2(why.contains(QStringLiteral("larger than the context")), qPrintable(why));
  }

  // Settings > Token eviction: a bad spec keeps Apply disabled with a note beside the field;
  // a good one, applied, is the engine's (its snapshot names it) and a chat turn evicts.
  void settingsEvictionReachesTheEngine() {
    MainWindow w;
    w.show();
    w.openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    SettingsPanel* s = w.settingsPanel();
    QVERIFY(!s->evictEdit()->toolTip().isEmpty());
    QVERIFY(s->config() && !s->config()->evict.on());  // empty: off
    s->evictEdit()->setText(QStringLiteral("lru:3"));
    QVERIFY(!s->applyButton()->isEnabled());
    QVERIFY2(s->fieldNote(QStringLiteral("evict")).contains(QStringLiteral("unknown policy 'lru'")),
             qPrintable(s->fieldNote(QStringLiteral("evict"))));
    s->evictEdit()->setText(QStringLiteral("h2o:6:6"));  // the engine's rule: recent window < budget
    QVERIFY(!s->applyButton()->isEnabled());
    QVERIFY2(s->fieldNote(QStringLiteral("evict")).contains(QStringLiteral("smaller than the eviction budget")),
             qPrintable(s->fieldNote(QStringLiteral("evict"))));
    s->evictEdit()->setText(QStringLiteral("h2o:8"));
    QVERIFY2(s->applyButton()->isEnabled(), qPrintable(s->validationMessage()));
    QVERIFY(s->fieldNote(QStringLiteral("evict")).isEmpty());
    QCOMPARE(s->config()->evict.policy, EvictPolicy::H2O);
    QCOMPARE(s->config()->evict.budget, 8);
    s->applyButton()->click();
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest() && w.host()->latest()->eviction.policy == "h2o:8", kTimeoutMs);
    ConversationWidget* chat = w.chatPanel()->current();
    chat->send(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest()->eviction.tokens_evicted > 0, kTimeoutMs);
    // The spec round-trips through the saved settings.
    SettingsPanel again;
    again.load();
    QCOMPARE(again.evictEdit()->text(), QStringLiteral("h2o:8"));
    // The override a lesson's base applies ("evict" = "off") turns it off.
    QVERIFY(s->setOverride(QStringLiteral("evict"), QStringLiteral("off")));
    QVERIFY(s->evictEdit()->text().isEmpty());
    QVERIFY(s->config() && !s->config()->evict.on());
  }

  // Per-layer eviction from the same field: ":layer" applies, the engine's snapshot names it, a
  // chat turn hides tokens per layer, and a scope word the parser does not know is refused.
  void settingsPerLayerEviction() {
    MainWindow w;
    w.show();
    w.openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    SettingsPanel* s = w.settingsPanel();
    s->evictEdit()->setText(QStringLiteral("h2o:8:heads"));
    QVERIFY(!s->applyButton()->isEnabled());
    QVERIFY(!s->fieldNote(QStringLiteral("evict")).isEmpty());
    s->evictEdit()->setText(QStringLiteral("h2o:8:layer"));
    QVERIFY2(s->applyButton()->isEnabled(), qPrintable(s->validationMessage()));
    QVERIFY(s->config()->evict.per_layer());
    s->applyButton()->click();
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest() && w.host()->latest()->eviction.policy == "h2o:8:layer", kTimeoutMs);
    ConversationWidget* chat = w.chatPanel()->current();
    chat->send(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest()->eviction.tokens_hidden > 0, kTimeoutMs);
  }
};

QTEST_MAIN(TestCompareEvict)
#include "test_compare_evict.moc"
