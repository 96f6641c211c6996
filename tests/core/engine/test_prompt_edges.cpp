// Prompts at the edges, from text through the tokenizer into the Engine on stories260K: empty
// text, invalid UTF-8, a prompt longer than the context, control tokens typed as text, and
// texts that could make a tokenizer slow (one very long word, NUL bytes).
#include <QElapsedTimer>

#include <filesystem>

#include "cpu/cpu_backend.h"
#include "engine/engine.h"
#include "test_support.h"

using namespace kvscope;

namespace {

std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load((test::models_dir() / "stories260K.gguf").string());
  return m;
}

std::unique_ptr<Engine> make_engine(int32_t max_model_len = 0) {
  auto m = stories();
  EngineConfig cfg;
  cfg.num_blocks = 256;
  cfg.sched.max_model_len = max_model_len;  // 0: the model's context length
  return std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m, 2), cfg);
}

Request request(std::vector<TokenId> prompt, int32_t n) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = n;
  r.ignore_eos = true;
  return r;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<uint8_t>(s[i]);
    const int n = c < 0x80                   ? 1
                  : (c >= 0xC2 && c <= 0xDF) ? 2
                  : (c >= 0xE0 && c <= 0xEF) ? 3
                  : (c >= 0xF0 && c <= 0xF4) ? 4
                                             : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

// What the app shows for a sequence of ids: pieces through the streaming UTF-8 decoder.
std::string detokenize(const Tokenizer& tok, const std::vector<TokenId>& ids, bool special = false) {
  Utf8StreamDecoder dec;
  std::string out;
  for (TokenId id : ids) out += dec.push(tok.token_to_piece(id, special));
  return out + dec.flush();
}

// Raw bytes of the pieces, no UTF-8 repair: what the tokenizer round-trips.
std::string raw_pieces(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += tok.token_to_piece(id, true);
  return out;
}

}  // namespace

class TestPromptEdges : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() { KVSCOPE_REQUIRE_FILE(test::models_dir() / "stories260K.gguf"); }

  // Empty text tokenizes to nothing (or to BOS alone); an empty prompt is rejected at submit
  // with the reason, a BOS-only prompt is a valid start of text.
  void empty_prompt_rejected_with_reason() {
    const Tokenizer& tok = *stories()->tokenizer;
    QVERIFY(tok.encode("", false, false).empty());
    const auto bos_only = tok.encode("", true, true);
    QCOMPARE(bos_only, std::vector<TokenId>{tok.bos()});
    auto e = make_engine();
    const SeqId empty = e->submit(request({}, 8));
    const SeqId bos = e->submit(request(bos_only, 8));
    QCOMPARE(e->sequence(empty).state, SeqState::Rejected);
    QVERIFY2(e->sequence(empty).error.find("empty prompt") != std::string::npos, e->sequence(empty).error.c_str());
    e->run_until_idle();
    QCOMPARE(e->sequence(bos).state, SeqState::Finished);
    QCOMPARE(e->sequence(bos).output_tokens().size(), size_t(8));
    QCOMPARE(e->snapshot()->memory.blocks_used, 0);
    qInfo("empty prompt: %s", e->sequence(empty).error.c_str());
  }

  // Bytes that are not UTF-8 (stray continuation bytes, truncated sequences, overlongs, 0xFF,
  // surrogates) go through SentencePiece byte fallback: <0xXX> tokens, no crash, an exact
  // round trip of the bytes, and generation on top of them.
  void invalid_utf8_prompt_uses_byte_fallback() {
    const Tokenizer& tok = *stories()->tokenizer;
    const std::string text =
        "Once \xff\xfe upon \xc3( a \xe2\x82 time \xf0\x9f \x80\x80 \xc0\xaf \xed\xa0\x80 there was \xe2\x82\xac";
    QVERIFY(!valid_utf8(text));
    const auto ids = tok.encode(text, true, false);
    int byte_tokens = 0;
    for (TokenId id : ids) {
      QVERIFY(id >= 0 && id < tok.n_vocab());
      byte_tokens += tok.token_type(id) == TokenType::Byte;
    }
    QVERIFY2(byte_tokens >= 10, "invalid bytes should become <0xXX> byte tokens");
    // SentencePiece adds one leading space and writes spaces as U+2581 ("▁"). An invalid lead
    // byte claims the bytes after it as one "character" (llama.cpp's utf8_len), so an escaped
    // space right after one goes out as the three bytes of "▁" (as in llama.cpp): the round trip
    // is exact once those are read back as spaces.
    const std::string pieces = raw_pieces(tok, {ids.begin() + 1, ids.end()});
    std::string round;
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces.compare(i, 3, "\xE2\x96\x81") == 0) {
        round += ' ';
        i += 2;
      } else {
        round += pieces[i];
      }
    }
    QVERIFY(!round.empty() && round[0] == ' ');
    QCOMPARE(QByteArray::fromStdString(round.substr(1)).toHex(), QByteArray::fromStdString(text).toHex());
    // What the app displays is always valid UTF-8 (U+FFFD for the bad bytes).
    QVERIFY(valid_utf8(detokenize(tok, ids)));

    auto e = make_engine();
    const SeqId id = e->submit(request(ids, 16));
    e->run_until_idle();
    QCOMPARE(e->sequence(id).state, SeqState::Finished);
    QCOMPARE(e->sequence(id).output_tokens().size(), size_t(16));
    QVERIFY(valid_utf8(detokenize(tok, e->sequence(id).output_tokens())));
    qInfo("%zu bytes -> %zu tokens, %d of them byte fallback", text.size(), ids.size(), byte_tokens);
  }

  // A prompt that cannot fit the context is rejected with the numbers in the message; the
  // requests around it run to completion. Just below the limit is fine (one token generated).
  void prompt_longer_than_context_rejected_others_run() {
    const Tokenizer& tok = *stories()->tokenizer;
    std::string story;
    while (tok.encode(story, true, false).size() < 700)
      story += "Once upon a time, there was a little girl named Lily. ";
    auto long_prompt = tok.encode(story, true, false);
    const int32_t ctx = 512;  // what stories260K was trained with (its file says 2048)
    auto e = make_engine(ctx);
    const SeqId before = e->submit(request(tok.encode("The cat sat", true, false), 20));
    const SeqId too_long = e->submit(request(long_prompt, 10));
    const SeqId exactly = e->submit(request({long_prompt.begin(), long_prompt.begin() + ctx}, 10));
    const SeqId just_fits = e->submit(request({long_prompt.begin(), long_prompt.begin() + ctx - 1}, 10));
    const SeqId after = e->submit(request(tok.encode("One day", true, false), 20));
    int steps = 0;
    while (e->step()) {
      ++steps;
      e->paged_kv()->validate();
    }
    for (SeqId bad : {too_long, exactly}) {
      QCOMPARE(e->sequence(bad).state, SeqState::Rejected);
      const std::string& why = e->sequence(bad).error;
      QVERIFY2(why.find("exceed max_model_len 512") != std::string::npos, why.c_str());
      qInfo("rejected: %s", why.c_str());
    }
    QCOMPARE(e->sequence(just_fits).state, SeqState::Finished);
    QCOMPARE(e->sequence(just_fits).output_tokens().size(), size_t(1));  // capped by the context
    for (SeqId ok : {before, after}) {
      QCOMPARE(e->sequence(ok).state, SeqState::Finished);
      QCOMPARE(e->sequence(ok).output_tokens().size(), size_t(20));
    }
    QCOMPARE(e->snapshot()->memory.blocks_used, 0);
    qInfo("%zu-token prompt rejected at context %d; %d steps for the rest", long_prompt.size(), ctx, steps);
  }

  // "<s>" typed by a user is text unless the caller asks for special-token parsing: with
  // parse_special false it never becomes BOS/EOS, and decodes back to the characters typed.
  void control_tokens_typed_as_text() {
    const Tokenizer& tok = *stories()->tokenizer;
    const std::string text = "<s>Once upon a time</s> <unk>";
    const TokenId bos = tok.bos(), eos = tok.eos();
    QVERIFY(bos >= 0 && eos >= 0);
    const auto as_text = tok.encode(text, false, false);
    for (TokenId id : as_text) {
      QVERIFY2(id != bos && id != eos, "a typed '<s>' must not become a control token");
      QVERIFY(tok.token_type(id) != TokenType::Control);
    }
    QCOMPARE(detokenize(tok, as_text).substr(1), text);  // minus SentencePiece's leading space
    const auto parsed = tok.encode(text, false, true);
    QVERIFY(std::find(parsed.begin(), parsed.end(), bos) != parsed.end());
    QVERIFY(std::find(parsed.begin(), parsed.end(), eos) != parsed.end());
    QVERIFY(parsed.size() < as_text.size());
    // Control tokens do not print unless asked for.
    QVERIFY(tok.token_to_piece(bos, false).empty());
    QCOMPARE(tok.token_to_piece(bos, true), std::string("<s>"));

    // Through the engine: the typed text is an ordinary prompt (BOS only where add_special put it).
    auto prompt = tok.encode(text, true, false);
    QCOMPARE(std::count(prompt.begin(), prompt.end(), bos), 1);
    QCOMPARE(prompt.front(), bos);
    auto e = make_engine();
    const SeqId id = e->submit(request(prompt, 8));
    e->run_until_idle();
    QCOMPARE(e->sequence(id).state, SeqState::Finished);
    qInfo("'%s': %zu tokens as text, %zu with special parsing", text.c_str(), as_text.size(), parsed.size());
  }

  // Inputs that could make a tokenizer quadratic or trip on C-string assumptions.
  void pathological_texts_tokenize_quickly() {
    const Tokenizer& tok = *stories()->tokenizer;
    QElapsedTimer t;
    t.start();
    const std::string word(20000, 'a');
    const auto a = tok.encode(word, true, false);
    QVERIFY(a.size() > 1);
    QCOMPARE(raw_pieces(tok, {a.begin() + 1, a.end()}).substr(1), word);
    std::string nul("one\0two\0\0three", 15);
    const auto n = tok.encode(nul, false, false);
    QCOMPARE(raw_pieces(tok, n).substr(1), nul);
    std::string spaces(5000, ' ');
    (void)tok.encode(spaces, true, false);
    std::string mixed;
    for (int i = 0; i < 4000; ++i) mixed += static_cast<char>(i * 37 % 256);
    (void)tok.encode(mixed, true, true);
    const qint64 ms = t.elapsed();
    QVERIFY2(ms < 10000, qPrintable(QString("tokenizing ~50 KB of pathological text took %1 ms").arg(ms)));
    qInfo("20000 x 'a' -> %zu tokens; all pathological texts in %lld ms", a.size(), static_cast<long long>(ms));
  }
};

QTEST_GUILESS_MAIN(TestPromptEdges)
#include "test_prompt_edges.moc"
