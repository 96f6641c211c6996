#include "engine_bridge/engine_reports.h"

#include "engine/request_story_text.h"

namespace kvscope::ui {

VocabPtr build_vocab(const Model& m) {
  auto v = std::make_shared<Vocab>();
  if (!m.tokenizer) return v;
  const Tokenizer& tok = *m.tokenizer;
  v->pieces.resize(static_cast<size_t>(tok.n_vocab()));
  for (TokenId id = 0; id < tok.n_vocab(); ++id) {
    QString s;
    if (tok.token_type(id) == TokenType::Byte) {
      // "<0x0A>": ASCII bytes show as themselves (newline included); a lone byte of a multi-byte
      // UTF-8 character cannot be shown alone and keeps its hex spelling.
      const QString name = QString::fromStdString(tok.token_text(id));
      bool ok = false;
      const int byte = name.mid(3, 2).toInt(&ok, 16);
      s = (ok && byte < 0x80 && name.startsWith(QLatin1String("<0x"))) ? QString(QChar(byte)) : name;
    } else {
      s = QString::fromUtf8(tok.token_to_piece(id, true));
    }
    v->pieces[static_cast<size_t>(id)] = s;
  }
  return v;
}

namespace {

TurnStats seq_stats(const Engine& engine, SeqId id, const Snapshot* snap) {
  TurnStats t;
  t.id = id;
  if (snap) {
    for (const SeqSnap& q : snap->seqs) {
      if (q.id != id) continue;
      t.promptTokens = q.prompt_len;
      t.cachedTokens = q.cached_prompt_tokens;
      t.generated = q.generated;
      t.ttftMs = q.ttft_ms;
      t.tokensPerS = q.mean_itl_ms > 0 ? 1000.0 / q.mean_itl_ms : 0.0;
      t.preemptions = q.preemptions;
      t.state = QString::fromUtf8(seq_state_name(q.state));
      t.error = QString::fromStdString(q.error);
      return t;
    }
  }
  // Not in this snapshot (cancelled between steps): read what the engine itself knows.
  try {
    const Sequence& s = engine.sequence(id);
    t.promptTokens = static_cast<int>(s.prompt_tokens().size());
    t.cachedTokens = s.num_cached_prompt;
    t.generated = static_cast<int>(s.output_tokens().size());
    t.preemptions = s.preemptions;
    t.state = QString::fromUtf8(seq_state_name(s.state));
    t.error = QString::fromStdString(s.error);
  } catch (const std::exception&) { t.state = QStringLiteral("finished"); }
  return t;
}

}  // namespace

TurnStats turn_stats(const Engine& engine, SeqId id, const Snapshot* snap) {
  TurnStats t = seq_stats(engine, id, snap);
  // A reasoning reply: how many tokens and KV blocks its thinking took (the request's story).
  if (const RequestStory* s = engine.stories().find(id, engine.story_engine()); s && s->reasoning) {
    t.reasoningTokens = s->reasoning->span.tokens;
    t.reasoningBlocks = s->reasoning->blocks;
    t.reasoningClosed = s->reasoning->span.closed;
  }
  return t;
}

StoryText story_text(const Engine* engine, const VocabPtr& vocab_, qint64 id) {
  StoryText t;
  t.id = id;
  const RequestStory* s = engine ? engine->stories().find(id, engine->story_engine()) : nullptr;
  if (s) {
    const VocabPtr vocab = vocab_;
    const TokenText text = [vocab](TokenId tok) {
      const bool known = vocab && tok >= 0 && static_cast<size_t>(tok) < vocab->pieces.size();
      return known ? vocab->pieces[static_cast<size_t>(tok)].toStdString() : std::to_string(tok);
    };
    t.found = true;
    t.label = QString::fromStdString(s->label);
    if (!s->admissions.empty())
      t.missReason = QString::fromLatin1(miss_reason_name(s->admissions.front().lookup.miss.reason));
    for (const StoryLine& l : story_lines(*s, engine->config().block_size, text))
      t.lines.push_back({l.step, QString::fromStdString(l.kind), QString::fromStdString(l.text)});
  }
  return t;
}

}  // namespace kvscope::ui
