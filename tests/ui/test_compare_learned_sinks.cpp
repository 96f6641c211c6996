// gpt-oss's learned sinks beside StreamingLLM's sink tokens, in the window (offscreen, a
// synthetic gpt-oss): B = A without its trained sink logits holds exactly A's KV bytes (the
// sinks are weights, unlike StreamingLLM's sink tokens: tests/run/test_learned_sinks.cpp);
// B's quality run scores as the core's eval without the learned sinks, and the table's column
// names B's setting.
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLineEdit>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QtTest>

#include "controls/compare_panel.h"
#include "gui_test_support.h"
#include "model/synthetic_model.h"
#include "run/perplexity.h"
#include "shell/main_window.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {

constexpr int kTimeoutMs = 60000;

QString gpt_oss_path() {
  SyntheticSpec s;
  s.arch = "gpt-oss";
  s.n_vocab = 600;
  s.n_embd = 64;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 128;
  s.n_ctx = 2048;
  s.sliding_window = 32;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.seed = 7;
  const auto p = test::tmp_dir() / "compare-learned-sinks-gpt-oss.gguf";
  write_synthetic_model(s, p.string());
  return QString::fromStdString(p.string());
}

}  // namespace

class TestCompareLearnedSinks : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::start_gui_suite("compare-learned-sinks"); }
  void init() { QSettings().clear(); }

  void droppingLearnedSinksKeepsTheMemory() {
    MainWindow w;
    w.show();
    const QString model = gpt_oss_path();
    w.openModel(model);
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    const QString textPath = QString::fromStdString((test::source_dir() / "resources/texts/long-story.txt").string());
    constexpr int kQualityTokens = 160;
    ComparePanel* cmp = w.comparePanel();
    cmp->learnedSinksB()->setChecked(true);
    cmp->qualityRun()->setChecked(true);
    cmp->qualityText()->setEditText(textPath);
    cmp->qualityTokens()->setValue(kQualityTokens);
    QString why;
    QVERIFY2(cmp->start(QStringLiteral("tiny-completions"), &why), qPrintable(why));
    QTRY_VERIFY_WITH_TIMEOUT(cmp->finished(), 3 * kTimeoutMs);
    const SnapshotPtr a = cmp->lastSnapshot(0), b = cmp->lastSnapshot(1);
    QVERIFY(a && b);
    QCOMPARE(b->memory.kv_bytes_per_token, a->memory.kv_bytes_per_token);
    QVERIFY(cmp->table()->horizontalHeaderItem(1)->text().contains(QStringLiteral("no learned sinks")));
    QVERIFY(!cmp->table()->horizontalHeaderItem(0)->text().contains(QStringLiteral("learned")));

    const auto qa = cmp->quality(0), qb = cmp->quality(1);
    QVERIFY(qa && qb);
    QVERIFY2(qb->error.isEmpty(), qPrintable(qb->error));
    QFile f(textPath);
    QVERIFY(f.open(QIODevice::ReadOnly));
    auto m = Model::load(model.toStdString());
    std::vector<TokenId> tokens =
        m->tokenizer->encode(QString::fromUtf8(f.readAll()).trimmed().toStdString(), true, false);
    QVERIFY(tokens.size() > kQualityTokens);
    tokens.resize(kQualityTokens);
    EvalConfig off;
    off.learned_sinks = false;
    const EvalRun rb = eval_text(m, tokens, off), ra = eval_text(m, tokens, EvalConfig{});
    QVERIFY(std::abs(qb->perplexity - rb.perplexity) <= 1e-4 * rb.perplexity);
    QVERIFY(std::abs(qa->perplexity - ra.perplexity) <= 1e-4 * ra.perplexity);
    QCOMPARE(rb.peak_kv_bytes, ra.peak_kv_bytes);  // the same memory, other outputs
    QVERIFY(cmp->agreement().has_value());
    QVERIFY(cmp->agreement()->kl_mean > 0);
  }
};

QTEST_MAIN(TestCompareLearnedSinks)
#include "test_compare_learned_sinks.moc"
