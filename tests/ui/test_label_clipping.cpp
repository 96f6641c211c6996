// No label of the window cuts its text at 1280x800 (the size of the screenshots in docs/): with a model
// loaded, a chat turn done and a scenario stepped, every dock is raised in turn and every
// visible one-line label (QLabel, LiveLabel) must fit its text in its width, or elide it with
// the full text in its tooltip. Word-wrapped labels wrap, so only their longest word must fit.
// A label must also not run past the right edge of a scroll area that cannot scroll sideways.
#include <QAbstractItemView>
#include <QDockWidget>
#include <QScrollBar>
#include <QLabel>
#include <QStatusBar>
#include <QRegularExpression>
#include <QTextDocument>
#include <QtTest>

#include "panels/chat_panel.h"
#include "gui_test_support.h"
#include "widgets/live_label.h"
#include "shell/main_window.h"
#include "panels/workload_panel.h"

using namespace kvscope;
using namespace kvscope::ui;

namespace {
constexpr int kTimeoutMs = 60000;

QString model_path() { return QString::fromStdString((test::models_dir() / "stories260K.gguf").string()); }

bool is_rich(const QLabel* l) {
  return l->textFormat() == Qt::RichText || (l->textFormat() == Qt::AutoText && Qt::mightBeRichText(l->text()));
}

QString plain_text(const QString& text, bool rich, const QFont& font) {
  if (!rich) return text;
  QTextDocument doc;
  doc.setDefaultFont(font);
  doc.setHtml(text);
  return doc.toPlainText();
}

// Width the label's text needs on one line (the widest line of a multi-line one).
int text_width(const QString& text, bool rich, const QFont& font) {
  if (rich) {
    QTextDocument doc;
    doc.setDefaultFont(font);
    doc.setDocumentMargin(0);
    doc.setHtml(text);
    return static_cast<int>(std::ceil(doc.idealWidth()));
  }
  int w = 0;
  for (const QString& line : text.split(QLatin1Char('\n'))) w = std::max(w, QFontMetrics(font).horizontalAdvance(line));
  return w;
}

int longest_word_width(const QString& plain, const QFont& font) {
  int w = 0;
  for (const QString& word : plain.split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts))
    w = std::max(w, QFontMetrics(font).horizontalAdvance(word));
  return w;
}

QString who(const QWidget* w) {
  QStringList path;
  for (const QWidget* p = w; p; p = p->parentWidget()) {
    if (auto* d = qobject_cast<const QDockWidget*>(p)) {
      path.prepend(d->objectName());
      break;
    }
    path.prepend(p->objectName().isEmpty() ? QString::fromLatin1(p->metaObject()->className()) : p->objectName());
  }
  return path.join(QLatin1Char('/'));
}

// How far `w` reaches past the right edge of the scroll area it sits in (0 if it does not), when
// that area cannot scroll sideways: content wider than a panel's dock is cut off there.
int cut_by_scroll_area(const QWidget* w) {
  for (const QWidget* p = w->parentWidget(); p; p = p->parentWidget()) {
    const auto* area = qobject_cast<const QAbstractScrollArea*>(p);
    if (!area) continue;
    if (area->horizontalScrollBar()->isVisible() || qobject_cast<const QAbstractItemView*>(area)) return 0;
    const int right = w->mapTo(area->viewport(), QPoint(w->width(), 0)).x();
    return std::max(0, right - area->viewport()->width());
  }
  return 0;
}

// The visible labels under `root` whose text is cut; each as "where: text (needs N px, has M)".
// *checked counts the labels looked at.
QStringList clipped_labels(QWidget* root, int* checked) {
  QStringList bad;
  for (QLabel* l : root->findChildren<QLabel*>()) {
    if (!l->isVisible() || l->text().isEmpty() || l->width() <= 0) continue;
    ++*checked;
    if (qEnvironmentVariableIsSet("KVSCOPE_TEST_VERBOSE")) qInfo() << who(l) << l->text().left(80) << l->width();
    const bool rich = is_rich(l);
    const int has = l->contentsRect().width() - 2 * l->margin();
    const QString plain = plain_text(l->text(), rich, l->font());
    const int needs = l->wordWrap() ? longest_word_width(plain, l->font()) : text_width(l->text(), rich, l->font());
    const bool elided = plain.contains(QChar(0x2026));
    if (elided) {
      // An elided label must carry the whole text in its tooltip.
      const QString shown = plain.section(QChar(0x2026), 0, 0).trimmed();
      if (l->toolTip().isEmpty() ||
          !plain_text(l->toolTip(), Qt::mightBeRichText(l->toolTip()), l->font()).contains(shown))
        bad << QStringLiteral("%1: \"%2\" is elided without the full text in its tooltip").arg(who(l), plain);
      continue;
    }
    if (needs > has + 1)
      bad << QStringLiteral("%1: \"%2\" (needs %3 px, has %4)").arg(who(l), plain).arg(needs).arg(has);
    if (const int over = cut_by_scroll_area(l); over > 1)
      bad << QStringLiteral("%1: \"%2\" runs %3 px past its scroll area's right edge")
                 .arg(who(l), plain.left(60))
                 .arg(over);
  }
  for (LiveLabel* l : root->findChildren<LiveLabel*>()) {
    if (!l->isVisible() || l->text().isEmpty()) continue;
    ++*checked;
    if (qEnvironmentVariableIsSet("KVSCOPE_TEST_VERBOSE"))
      qInfo() << who(l) << l->plainText() << l->width() << l->isElided();
    if (l->isElided()) {
      if (!l->toolTip().contains(l->plainText()))
        bad << QStringLiteral("%1: elided without its text in the tooltip").arg(who(l));
      continue;
    }
    const int needs = text_width(l->text(), true, l->font());
    if (needs > l->width() + 1)
      bad << QStringLiteral("%1: \"%2\" (needs %3 px, has %4)").arg(who(l), l->plainText()).arg(needs).arg(l->width());
  }
  return bad;
}
}  // namespace

class TestLabelClipping : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { test::start_gui_suite("label_clipping"); }

  void noVisibleLabelIsCutAt1280x800() {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.openModel(model_path());
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->hasEngine(), kTimeoutMs);
    // A chat turn (its stats line) and a scenario a few steps in (block map summary, requests).
    ConversationWidget* chat = w.chatPanel()->current();
    chat->send(QStringLiteral("Once upon a time"));
    QTRY_VERIFY_WITH_TIMEOUT(!chat->isBusy(), kTimeoutMs);
    w.host()->setPaused(true);
    QVERIFY(w.workloadPanel()->run(QStringLiteral("shared-system-prompt")));
    for (int i = 0; i < 12; ++i) w.host()->singleStep();
    QTRY_VERIFY_WITH_TIMEOUT(w.host()->latest() && w.host()->latest()->step >= 12, kTimeoutMs);
    QTest::qWait(400);  // the requests table and the plots refresh on timers
    QCOMPARE(w.size(), QSize(1280, 800));

    int checked = 0;
    QStringList bad = clipped_labels(&w, &checked);
    for (QDockWidget* d : w.panelDocks()) {
      d->raise();
      QTest::qWait(50);
      bad << clipped_labels(d, &checked);
    }
    QVERIFY2(checked > 40, qPrintable(QString::number(checked)));  // the walk really saw the panels' labels
    // The status bar's own message (the model's description after a load) is painted by
    // QStatusBar left of the permanent labels: it must fit there or be elided with a tooltip.
    w.showStatus(w.host()->modelInfo().description + QStringLiteral(" — loaded from ") + w.host()->modelInfo().path, 0);
    const QString msg = w.statusBar()->currentMessage();
    if (msg.endsWith(QChar(0x2026))) {
      if (!w.statusBar()->toolTip().contains(w.host()->modelInfo().path))
        bad << QStringLiteral("status bar: elided without a tooltip");
    } else if (w.statusBar()->fontMetrics().horizontalAdvance(msg) > w.statusMessageWidth()) {
      bad << QStringLiteral("status bar: \"%1\" is cut").arg(msg);
    }
    QVERIFY(msg.endsWith(QChar(0x2026)));  // that message is longer than the room at 1280 px
    bad.removeDuplicates();
    QVERIFY2(bad.isEmpty(), qPrintable(QStringLiteral("cut labels:\n") + bad.join(QLatin1Char('\n'))));
  }
};

QTEST_MAIN(TestLabelClipping)
#include "test_label_clipping.moc"
