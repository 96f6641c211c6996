// Tokenizers against llama.cpp: its own test-tokenizer-0 vectors, the stories260K golden prompts,
// streaming UTF-8 decoding and the validation of tokenizer metadata.
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/bpe_tokenizer.h"
#include "model/pretokenizer.h"
#include "model/tokenizer.h"
#include "test_support.h"

using namespace kvscope;
namespace fs = std::filesystem;

namespace {

std::unique_ptr<Tokenizer> load(const fs::path& path) {
  auto file = GgufFile::open(path.string());
  return Tokenizer::from_gguf(*file);
}

std::unique_ptr<Tokenizer> load_bytes(const GgufWriter& w) {
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto file = GgufFile::from_bytes(bytes.data(), bytes.size(), "test-vocab");
  return Tokenizer::from_gguf(*file);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ids_str(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    if (!s.empty()) s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += static_cast<char>(c);
  }
  return out;
}

// llama.cpp's test-tokenizer-0 files: strings separated by "\n__ggml_vocab_test__\n", one line of ids each.
std::vector<std::pair<std::string, std::vector<TokenId>>> read_vectors(const fs::path& vocab) {
  const std::string inp = read_file(vocab.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::ifstream out(vocab.string() + ".out");
  std::vector<std::pair<std::string, std::vector<TokenId>>> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    std::vector<TokenId> ids;
    std::istringstream ls(line);
    for (long v; ls >> v;) ids.push_back(static_cast<TokenId>(v));
    cases.emplace_back(i < texts.size() ? texts[i] : std::string(), std::move(ids));
  }
  if (cases.size() != texts.size()) cases.clear();  // malformed test data
  return cases;
}

// GPT-2's byte-to-unicode image of an ASCII string (only ' ' needs mapping in these tests).
std::string g(const std::string& s) {
  std::string out;
  for (char c : s) out += c == ' ' ? std::string("\xC4\xA0") : std::string(1, c);
  return out;
}

// A minimal valid gpt2 vocabulary: the 256 byte images, "Ġa", "ab" and "<|endoftext|>".
GgufWriter tiny_bpe() {
  GgufWriter w;
  std::vector<std::string> tokens(256);
  std::vector<int32_t> types(256, 1);
  int n = 0;  // bytes without a printable image map to U+0100 onwards, in byte order
  for (int b = 0; b < 256; ++b) {
    const bool direct = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cpt = direct ? b : 256 + n++;
    if (cpt < 0x80) {
      tokens[b] += static_cast<char>(cpt);
    } else {
      tokens[b] += static_cast<char>(0xC0 | (cpt >> 6));
      tokens[b] += static_cast<char>(0x80 | (cpt & 0x3F));
    }
  }
  tokens.push_back(g(" a"));
  types.push_back(1);
  tokens.push_back("ab");
  types.push_back(1);
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt-2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {g(" ") + " a", "a b"});
  w.set_u32("tokenizer.ggml.bos_token_id", 258);
  w.set_u32("tokenizer.ggml.eos_token_id", 258);
  return w;
}

void expect_refused(const GgufWriter& w, const char* needle) {
  try {
    load_bytes(w);
    QFAIL(("accepted a vocabulary that should be refused for: " + std::string(needle)).c_str());
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    QVERIFY2(msg.find(needle) != std::string::npos, ("message '" + msg + "' lacks '" + needle + "'").c_str());
  }
}

}  // namespace

class TestTokenizer : public QObject {
  Q_OBJECT

  // Checks every llama.cpp test vector of one vocabulary; add_special=false, parse_special=false as
  // in llama.cpp's tests/test-tokenizer-0.cpp.
  void check_vocab(const char* name) {
    const fs::path vocab = test::models_dir() / "vocab" / (std::string("ggml-vocab-") + name + ".gguf");
    KVSCOPE_REQUIRE_FILE(vocab);
    KVSCOPE_REQUIRE_FILE(fs::path(vocab.string() + ".inp"));
    KVSCOPE_REQUIRE_FILE(fs::path(vocab.string() + ".out"));
    auto tok = load(vocab);
    const auto cases = read_vectors(vocab);
    QVERIFY2(!cases.empty(), "no test vectors (or .inp/.out disagree in count)");
    size_t passed = 0;
    std::string failures;
    for (const auto& [text, expected] : cases) {
      const std::vector<TokenId> got = tok->encode(text, false, false);
      if (got == expected) {
        ++passed;
      } else if (failures.size() < 4000) {
        failures += "\n  '" + escaped(text) + "'\n    expected " + ids_str(expected) + "\n    got      " + ids_str(got);
      }
    }
    qInfo("%s: %zu/%zu test-tokenizer-0 vectors match", name, passed, cases.size());
    QVERIFY2(passed == cases.size(), (std::string(name) + " mismatches:" + failures).c_str());
  }

 private slots:
  void vocab_llama_spm() { check_vocab("llama-spm"); }
  void vocab_phi3() { check_vocab("phi-3"); }
  void vocab_gpt2() { check_vocab("gpt-2"); }
  void vocab_deepseek_coder() { check_vocab("deepseek-coder"); }

  void vocab_metadata() {
    auto spm = load(test::models_dir() / "vocab" / "ggml-vocab-llama-spm.gguf");
    QCOMPARE(spm->model_name(), std::string("llama"));
    QCOMPARE(spm->n_vocab(), 32000);
    QCOMPARE(spm->bos(), 1);
    QCOMPARE(spm->eos(), 2);
    QCOMPARE(spm->unk(), 0);
    QVERIFY(spm->add_bos());
    QVERIFY(!spm->add_eos());
    QVERIFY(spm->is_eog(2));
    QVERIFY(!spm->is_eog(1));
    QCOMPARE(spm->token_type(1), TokenType::Control);
    QCOMPARE(spm->token_type(3), TokenType::Byte);

    auto phi3 = load(test::models_dir() / "vocab" / "ggml-vocab-phi-3.gguf");
    QCOMPARE(phi3->eos(), 32000);
    QVERIFY(phi3->eot() >= 0);
    QCOMPARE(phi3->token_text(phi3->eot()), std::string("<|end|>"));
    QVERIFY(phi3->is_eog(32000));
    QVERIFY(phi3->is_eog(phi3->find_token("<|end|>")));

    auto gpt2 = load(test::models_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
    QCOMPARE(gpt2->model_name(), std::string("gpt2"));
    QCOMPARE(gpt2->pre_name(), std::string("gpt-2"));
    QCOMPARE(gpt2->n_vocab(), 50257);
    QVERIFY(!gpt2->add_bos());
    QCOMPARE(gpt2->eos(), 50256);
    QVERIFY(gpt2->is_eog(50256));
    QCOMPARE(dynamic_cast<const BpeTokenizer&>(*gpt2).n_merges(), size_t(50000));

    auto dsc = load(test::models_dir() / "vocab" / "ggml-vocab-deepseek-coder.gguf");
    QCOMPARE(dsc->pre_name(), std::string("deepseek-coder"));
    QVERIFY(dsc->add_bos());  // tokenizer.ggml.add_bos_token = true in this file
    QCOMPARE(dsc->bos(), 32013);
  }

  void bert_is_refused() {
    const fs::path vocab = test::models_dir() / "vocab" / "ggml-vocab-bert-bge.gguf";
    KVSCOPE_REQUIRE_FILE(vocab);
    try {
      load(vocab);
      QFAIL("the WordPiece (bert) vocabulary was accepted");
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      QVERIFY2(msg.find("unsupported tokenizer model 'bert'") != std::string::npos, msg.c_str());
    }
  }

  // llama.cpp tokenized these prompts with add_special=true, parse_special=true, and its generated
  // text is the concatenation of token_to_piece(special=false).
  void stories260k_golden() {
    const fs::path model = test::models_dir() / "stories260K.gguf";
    KVSCOPE_REQUIRE_FILE(model);
    const fs::path dir = test::golden_dir() / "stories260K";
    KVSCOPE_REQUIRE_FILE(dir);
    auto tok = load(model);
    QCOMPARE(tok->n_vocab(), 512);
    int n_cases = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() != ".json") continue;
      const auto j = nlohmann::json::parse(read_file(entry.path()));
      const std::string name = entry.path().filename().string();
      const std::vector<TokenId> expected = j.at("prompt_tokens").get<std::vector<TokenId>>();
      const std::vector<TokenId> got = tok->encode(j.at("prompt_text").get<std::string>(), true, true);
      QVERIFY2(got == expected, (name + ": prompt expected " + ids_str(expected) + " got " + ids_str(got)).c_str());

      std::string text;
      for (TokenId id : j.at("tokens").get<std::vector<TokenId>>()) text += tok->token_to_piece(id, false);
      QVERIFY2(text == j.at("text").get<std::string>(), (name + ": decoded '" + escaped(text) + "'").c_str());
      ++n_cases;
    }
    qInfo("stories260K: %d golden records match (prompt tokens and decoded text)", n_cases);
    QVERIFY(n_cases >= 6);
  }

  void stream_decode_split_character() {
    auto tok = load(test::models_dir() / "stories260K.gguf");
    // "日" is not in the 512-token vocabulary: it falls back to the byte tokens <0xE6> <0x97> <0xA5>.
    const std::vector<TokenId> ids = tok->encode("日", false, false);
    QCOMPARE(ids.size(), size_t(4));  // "▁" then three bytes
    QCOMPARE(tok->token_text(ids[1]), std::string("<0xE6>"));
    QCOMPARE(tok->token_text(ids[2]), std::string("<0x97>"));
    QCOMPARE(tok->token_text(ids[3]), std::string("<0xA5>"));
    Utf8StreamDecoder dec;
    QCOMPARE(dec.push(tok->token_to_piece(ids[0])), std::string(" "));
    QCOMPARE(dec.push(tok->token_to_piece(ids[1])), std::string());  // held back
    QCOMPARE(dec.push(tok->token_to_piece(ids[2])), std::string());  // still incomplete
    QCOMPARE(dec.push(tok->token_to_piece(ids[3])), std::string("日"));
    QCOMPARE(dec.flush(), std::string());

    // a 4-byte emoji through GPT-2's byte-level tokens, one token at a time
    auto gpt2 = load(test::models_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
    const std::string text = " this is 🦙.cpp";
    const std::vector<TokenId> g_ids = gpt2->encode(text, false, false);
    std::string streamed;
    Utf8StreamDecoder gdec;
    for (TokenId id : g_ids) {
      const std::string part = gdec.push(gpt2->token_to_piece(id));
      QVERIFY(part.find("\xEF\xBF\xBD") == std::string::npos);
      streamed += part;
    }
    streamed += gdec.flush();
    QCOMPARE(streamed, text);
  }

  void stream_decode_invalid() {
    const std::string fffd = "\xEF\xBF\xBD";
    Utf8StreamDecoder d;
    QCOMPARE(d.push("a\xFF"
                    "b"),
             "a" + fffd + "b");
    QCOMPARE(d.push("\xC0\xAF"), fffd + fffd);  // overlong: two invalid bytes
    QCOMPARE(d.push("x\xE2\x82"), std::string("x"));
    QCOMPARE(d.push("y"), fffd + "y");                     // the unfinished sequence was cut off
    QCOMPARE(d.push("\xED\xA0\x80"), fffd + fffd + fffd);  // surrogate
    QCOMPARE(d.push("\xF0\x9F"), std::string());
    QCOMPARE(d.flush(), fffd);  // still unfinished at the end
    QCOMPARE(d.push("\xE2\x82\xAC"), std::string("€"));
    QCOMPARE(d.flush(), std::string());
  }

  void encode_empty() {
    auto tok = load(test::models_dir() / "stories260K.gguf");
    QCOMPARE(tok->encode("", true, true), std::vector<TokenId>{1});
    QCOMPARE(tok->encode("", true, false), std::vector<TokenId>{1});
    QVERIFY(tok->encode("", false, false).empty());
    auto gpt2 = load(test::models_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
    QVERIFY(gpt2->encode("", true, true).empty());  // gpt-2 adds no BOS
  }

  void control_tokens_typed_as_text() {
    auto tok = load(test::models_dir() / "stories260K.gguf");
    const std::vector<TokenId> as_text = tok->encode("<s>", false, false);
    QVERIFY(!as_text.empty());
    QVERIFY(std::find(as_text.begin(), as_text.end(), tok->bos()) == as_text.end());
    std::string spelled;
    for (TokenId id : as_text) spelled += tok->token_to_piece(id);
    QCOMPARE(spelled, std::string(" <s>"));
    QCOMPARE(tok->encode("<s>", false, true), std::vector<TokenId>{tok->bos()});

    // text after a special token gets its own space prefix, as in llama.cpp
    const std::vector<TokenId> mixed = tok->encode("Once</s>Once", true, true);
    const std::vector<TokenId> once = tok->encode("Once", false, false);
    std::vector<TokenId> expected{tok->bos()};
    expected.insert(expected.end(), once.begin(), once.end());
    expected.push_back(tok->eos());
    expected.insert(expected.end(), once.begin(), once.end());
    QCOMPARE(mixed, expected);

    QCOMPARE(tok->token_to_piece(tok->bos()), std::string());
    QCOMPARE(tok->token_to_piece(tok->bos(), true), std::string("<s>"));
    QCOMPARE(tok->token_to_piece(tok->find_token("<0x0A>")), std::string("\n"));

    auto gpt2 = load(test::models_dir() / "vocab" / "ggml-vocab-gpt-2.gguf");
    QCOMPARE(gpt2->encode("a<|endoftext|>", false, true), (std::vector<TokenId>{64, 50256}));
    QVERIFY(gpt2->encode("a<|endoftext|>", false, false).size() > 2);
    QCOMPARE(gpt2->token_to_piece(50256), std::string());
    QCOMPARE(gpt2->token_to_piece(50256, true), std::string("<|endoftext|>"));
  }

  // Every GGUF model in the shared folder carries an SPM vocabulary that must load; the Llama-2 one
  // tokenizes like llama.cpp's llama-spm vocabulary (the same 32000 tokens).
  void shared_models_load() {
    std::vector<fs::path> models{test::models_dir() / "stories260K.gguf",
                                 test::models_dir() / "llama-2-tiny-random.gguf"};
    for (const auto& e : fs::directory_iterator(test::models_dir() / "synthetic"))
      if (e.path().extension() == ".gguf") models.push_back(e.path());
    QVERIFY(models.size() >= 12);
    for (const fs::path& m : models) {
      KVSCOPE_REQUIRE_FILE(m);
      auto tok = load(m);
      QVERIFY2(tok->model_name() == "llama" && tok->n_vocab() >= 512, m.string().c_str());
      QVERIFY2(tok->encode("Hello world", true, true).front() == tok->bos(), m.string().c_str());
    }
    auto tiny = load(test::models_dir() / "llama-2-tiny-random.gguf");
    auto spm = load(test::models_dir() / "vocab" / "ggml-vocab-llama-spm.gguf");
    for (const char* text : {"Hello world", " Hello, y'all! 我想在apple工作", "\n\n  x\t"})
      QCOMPARE(tiny->encode(text, true, true), spm->encode(text, true, true));
  }

  void pretokenizer_splits() {
    using W = std::vector<std::string>;
    QCOMPARE(PreTokenizer("gpt-2").split("Hello world!!  x  "), (W{"Hello", " world", "!!", " ", " x", "  "}));
    QCOMPARE(PreTokenizer("gpt-2").split("I've 12345"), (W{"I", "'ve", " 12345"}));
    QCOMPARE(PreTokenizer("llama3").split("I'VE 12345\n\n x"), (W{"I", "'VE", " ", "123", "45", "\n\n", " x"}));
    QCOMPARE(PreTokenizer("qwen2").split("ab 123"), (W{"ab", " ", "1", "2", "3"}));
    QCOMPARE(PreTokenizer("default").split("a 12345 $$"), (W{"a", " ", "123", "45", " ", "$$"}));
    QCOMPARE(PreTokenizer("deepseek-coder").split("x\n 我们 12"), (W{"x", "\n", " ", "我们", " ", "1", "2"}));
    QVERIFY(PreTokenizer("llama-bpe").ignore_merges());
    QVERIFY(PreTokenizer("llama-bpe").default_add_bos());
    try {
      PreTokenizer p("no-such-pre");
      QFAIL("unknown pre-tokenizer accepted");
    } catch (const std::runtime_error& e) { QVERIFY(std::string(e.what()).find("no-such-pre") != std::string::npos); }
  }

  void tiny_bpe_vocab() {
    auto tok = load_bytes(tiny_bpe());
    // " ab" -> "Ġab": merge "Ġ a" (rank 0) wins over "a b" (rank 1), leaving "Ġa" + "b"
    QCOMPARE(tok->encode(" ab", false, false), (std::vector<TokenId>{256, 'b'}));
    QCOMPARE(tok->encode("ab", false, false), (std::vector<TokenId>{257}));
    QCOMPARE(tok->encode("ab<|endoftext|>", true, true), (std::vector<TokenId>{257, 258}));
    QCOMPARE(tok->token_to_piece(256), std::string(" a"));
    QCOMPARE(tok->token_to_piece(0x0A), std::string("\n"));  // byte 0x0A's image is U+010A "Ċ"
    QCOMPARE(tok->token_text(0x0A), std::string("\xC4\x8A"));
  }

  void validation_errors() {
    {
      GgufWriter w = tiny_bpe();
      w.set_string("tokenizer.ggml.model", "bert");
      expect_refused(w, "unsupported tokenizer model 'bert'");
    }
    {
      GgufWriter w = tiny_bpe();
      w.set_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f});
      expect_refused(w, "tokenizer.ggml.scores");
    }
    {
      GgufWriter w = tiny_bpe();
      w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1});
      expect_refused(w, "tokenizer.ggml.token_type");
    }
    {
      GgufWriter w = tiny_bpe();
      w.set_string_array("tokenizer.ggml.merges", {"a b", "nospace"});
      expect_refused(w, "tokenizer.ggml.merges entry 1");
    }
    {
      GgufWriter w = tiny_bpe();
      w.set_string("tokenizer.ggml.pre", "unheard-of");
      expect_refused(w, "unheard-of");
    }
    {
      GgufWriter w = tiny_bpe();
      w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "a"});
      w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1});
      expect_refused(w, "duplicate token");
    }
    {
      GgufWriter w = tiny_bpe();
      w.set_u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
      w.set_bool("tokenizer.ggml.add_bos_token", true);
      expect_refused(w, "add_bos_token");
    }
    {
      GgufWriter w;
      w.set_string("tokenizer.ggml.model", "llama");
      expect_refused(w, "tokenizer.ggml.tokens");
    }
    {  // 0xFFFFFFFF and out-of-range ids mean "none"
      GgufWriter w = tiny_bpe();
      w.set_u32("tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
      w.set_u32("tokenizer.ggml.padding_token_id", 100000);
      auto tok = load_bytes(w);
      QCOMPARE(tok->eos(), -1);
      QCOMPARE(tok->pad(), -1);
      QCOMPARE(tok->bos(), 258);
    }
  }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
