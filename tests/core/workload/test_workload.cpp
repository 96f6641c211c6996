// Workloads: JSON round trip and error messages, seeded generators and their shapes, the shipped
// scenario files (they parse, match their generator definitions, and fit stories260K's context).
//
// Regenerate resources/scenarios/*.json after changing a generator:
//   KVSCOPE_WRITE_SCENARIOS=1 ./test_workload builtinFilesMatchGenerators
#include <QtTest>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "test_support.h"
#include "workload/builtin_scenarios.h"
#include "workload/generators.h"
#include "workload/story_text.h"
#include "workload/workload.h"
#include "workload/workload_tokens.h"

using namespace kvscope;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// KVSCOPE_SOURCE_DIR if set, else the first folder above the working directory (ctest runs in
// the build tree) that holds resources/scenarios.
fs::path scenarios_dir() {
  if (const char* env = std::getenv("KVSCOPE_SOURCE_DIR")) return fs::path(env) / "resources" / "scenarios";
  for (fs::path p = fs::current_path(); !p.empty(); p = p.parent_path()) {
    if (fs::is_directory(p / "resources" / "scenarios")) return p / "resources" / "scenarios";
    if (p == p.parent_path()) break;
  }
  return {};
}

std::vector<fs::path> scenario_files() {
  std::vector<fs::path> out;
  const fs::path dir = scenarios_dir();
  if (dir.empty()) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The message parse_workload throws for `text`, or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    parse_workload(json::parse(text));
  } catch (const std::runtime_error& e) { return e.what(); }
  return "";
}

std::string common_prefix(const std::vector<std::string>& v) {
  std::string p = v.empty() ? "" : v.front();
  for (const std::string& s : v) p.resize(std::mismatch(p.begin(), p.end(), s.begin(), s.end()).first - p.begin());
  return p;
}

size_t common_token_prefix(const std::vector<std::vector<TokenId>>& v) {
  size_t n = v.empty() ? 0 : v.front().size();
  for (const auto& ids : v)
    n = std::min<size_t>(
        n, std::mismatch(v.front().begin(), v.front().begin() + n, ids.begin(), ids.end()).first - v.front().begin());
  return n;
}

std::vector<std::string> prompts(const Workload& w) {
  std::vector<std::string> out;
  for (const WorkloadRequest& r : w.requests) out.push_back(r.prompt);
  return out;
}

}  // namespace

class TestWorkload : public QObject {
  Q_OBJECT

  std::shared_ptr<Model> model_;

  static fs::path model_path() { return test::models_dir() / "stories260K.gguf"; }
  // Call after KVSCOPE_REQUIRE_FILE(model_path()).
  const Tokenizer& tok() {
    if (!model_) model_ = Model::load(model_path().string());
    return *model_->tokenizer;
  }

 private slots:
  void roundTripJson() {
    Workload w;
    w.name = "all-fields";
    w.description = "every field set at least once";
    w.max_model_len = 256;
    WorkloadRequest a;
    a.id = "text";
    a.prompt = "Once upon a time, Lily had a red ball.";
    a.max_new_tokens = 8;
    w.requests.push_back(a);
    WorkloadRequest b;
    b.id = "ids";
    b.prompt_ids = {1, 2, 3, 4};
    b.arrival_step = 5;
    b.arrival_s = 1.5;
    b.ignore_eos = true;
    b.n = 3;
    SamplingParams s;
    s.temperature = 0.7f;
    s.top_k = 40;
    s.top_p = 0.9f;
    s.min_p = 0.05f;
    s.repetition_penalty = 1.1f;
    s.repetition_last_n = 32;
    s.seed = 18446744073709551615ull;  // the full uint64 range survives JSON
    b.sampling = s;
    w.requests.push_back(b);
    for (int t = 0; t < 2; ++t) {
      WorkloadRequest c;
      c.id = "c-" + std::to_string(t);
      c.prompt = t == 0 ? "Tom saw a dog." : "What did Tom do next?";
      c.conversation = "c";
      c.turn = t;
      c.arrival_step = 2;
      w.requests.push_back(c);
    }

    const json j = to_json(w);
    const Workload back = parse_workload(json::parse(j.dump()));
    QCOMPARE(to_json(back), j);
    QCOMPARE(back.max_model_len.value_or(0), 256);
    QCOMPARE(back.requests.size(), size_t(4));
    QCOMPARE(back.requests[1].prompt_ids, (std::vector<int32_t>{1, 2, 3, 4}));
    QVERIFY(back.requests[1].sampling.has_value());
    QCOMPARE(back.requests[1].sampling->temperature, 0.7f);
    QCOMPARE(back.requests[1].sampling->min_p, 0.05f);
    QCOMPARE(back.requests[1].sampling->seed, s.seed);
    QCOMPARE(back.requests[1].n, 3);
    QCOMPARE(back.requests[1].arrival_s, 1.5);
    QCOMPARE(back.requests[0].arrival_s, 0.0);
    QVERIFY(!j["requests"][0].contains("arrival_s"));  // the default is not written
    QVERIFY(!back.requests[0].sampling.has_value());
    QCOMPARE(back.requests[3].conversation, std::string("c"));
    QCOMPARE(back.requests[3].turn, 1);
    // Floats are written in their shortest form, not as 0.699999988.
    QVERIFY(j.dump().find("0.7") != std::string::npos);
    QVERIFY(j.dump().find("0.699") == std::string::npos);

    const fs::path file = test::tmp_dir() / "workload-roundtrip.json";
    save_workload(file, w);
    QCOMPARE(to_json(load_workload(file)), j);
  }

  void defaultsAndComments() {
    const Workload w = parse_workload(json::parse(R"({"_comment": "hand-written", "name": "x",
        "requests": [{"prompt": "Hi", "_note": "ids may be left out"}, {"prompt": "Yo"}]})"));
    QCOMPARE(w.requests[0].id, std::string("request-0"));
    QCOMPARE(w.requests[1].id, std::string("request-1"));
    QCOMPARE(w.requests[0].max_new_tokens, 16);
    QCOMPARE(w.requests[0].arrival_step, int64_t(0));
    QVERIFY(!w.requests[0].ignore_eos);
    QVERIFY(!w.max_model_len);
  }

  void badInput_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    const auto row = [](const char* name, const char* text, const char* msg) { QTest::newRow(name) << text << msg; };
    row("not an object", R"([1])", "top level: expected an object");
    row("missing name", R"({"requests": [{"prompt": "a"}]})", "missing \"name\"");
    row("missing requests", R"({"name": "x"})", "missing \"requests\"");
    row("empty requests", R"({"name": "x", "requests": []})", "requests: expected a non-empty array");
    row("unknown top field", R"({"name": "x", "request": [], "requests": [{"prompt": "a"}]})",
        "top level: request: unknown field");
    row("missing prompt", R"({"name": "x", "requests": [{"prompt": "a"}, {"id": "b", "max_tokens": 4}]})",
        "requests[1] (id \"b\"): needs exactly one of \"prompt\"");
    row("both prompts", R"({"name": "x", "requests": [{"prompt": "a", "prompt_ids": [1]}]})",
        "requests[0]: needs exactly one of");
    row("empty prompt", R"({"name": "x", "requests": [{"prompt": ""}]})", "requests[0]: prompt: must not be empty");
    row("prompt wrong type", R"({"name": "x", "requests": [{"prompt": 42}]})",
        "requests[0]: prompt: expected a string, got number 42");
    row("negative max_tokens", R"({"name": "x", "requests": [{"prompt": "a"}, {"prompt": "b", "max_tokens": -5}]})",
        "requests[1]: max_tokens: expected an integer in [1, 2147483647], got -5");
    row("fractional max_tokens", R"({"name": "x", "requests": [{"prompt": "a", "max_tokens": 3.5}]})",
        "requests[0]: max_tokens: expected an integer, got number 3.5");
    row("string max_tokens", R"({"name": "x", "requests": [{"prompt": "a", "max_tokens": "32"}]})",
        "requests[0]: max_tokens: expected an integer, got string");
    row("negative arrival", R"({"name": "x", "requests": [{"prompt": "a", "arrival_step": -1}]})",
        "requests[0]: arrival_step: expected an integer in [0,");
    row("negative arrival time", R"({"name": "x", "requests": [{"prompt": "a", "arrival_s": -0.5}]})",
        "requests[0]: arrival_s: expected a number in [0.0,");
    row("arrival time not a number", R"({"name": "x", "requests": [{"prompt": "a", "arrival_s": "soon"}]})",
        "requests[0]: arrival_s: expected a number, got string \"soon\"");
    row("ignore_eos not bool", R"({"name": "x", "requests": [{"prompt": "a", "ignore_eos": 1}]})",
        "requests[0]: ignore_eos: expected true or false");
    row("bad token id", R"({"name": "x", "requests": [{"prompt_ids": [1, -2]}]})",
        "requests[0]: prompt_ids[1]: expected a token id >= 0");
    row("ids not array", R"({"name": "x", "requests": [{"prompt_ids": "1 2"}]})",
        "requests[0]: prompt_ids: expected a non-empty array");
    row("typo field", R"({"name": "x", "requests": [{"id": "q", "prompt": "a", "max_token": 4}]})",
        "requests[0] (id \"q\"): max_token: unknown field");
    row("sampling typo", R"({"name": "x", "requests": [{"prompt": "a", "sampling": {"temp": 1}}]})",
        "requests[0]: sampling: temp: unknown field");
    row("top_p range", R"({"name": "x", "requests": [{"prompt": "a", "sampling": {"top_p": 1.5}}]})",
        "requests[0]: sampling: top_p: expected a number in [0.0, 1.0], got 1.5");
    row("negative seed", R"({"name": "x", "requests": [{"prompt": "a", "sampling": {"seed": -1}}]})",
        "sampling: seed: expected an integer >= 0");
    row("n zero", R"({"name": "x", "requests": [{"prompt": "a", "n": 0}]})",
        "requests[0]: n: expected an integer in [1,");
    row("duplicate id", R"({"name": "x", "requests": [{"id": "a", "prompt": "a"}, {"id": "a", "prompt": "b"}]})",
        "requests[1] (id \"a\"): id: duplicate");
    row("turn alone", R"({"name": "x", "requests": [{"prompt": "a", "turn": 0}]})",
        "\"conversation\" and \"turn\" go together");
    row("turn skipped",
        R"({"name": "x", "requests": [{"prompt": "a", "conversation": "c", "turn": 0},
                                      {"prompt": "b", "conversation": "c", "turn": 2}]})",
        "requests[1] (id \"request-1\"): turn: conversation \"c\" expects turn 1 next");
    row("turn arrives early",
        R"({"name": "x", "requests": [{"prompt": "a", "conversation": "c", "turn": 0, "arrival_step": 9},
                                      {"prompt": "b", "conversation": "c", "turn": 1, "arrival_step": 3}]})",
        "arrival_step: turn 1 of conversation \"c\" arrives before turn 0");
    row("parallel turn", R"({"name": "x", "requests": [{"prompt": "a", "conversation": "c", "turn": 0, "n": 2}]})",
        "n: a conversation turn cannot have parallel samples");
    row("max_model_len zero", R"({"name": "x", "max_model_len": 0, "requests": [{"prompt": "a"}]})",
        "top level: max_model_len: expected an integer in [1,");
  }
  void badInput() {
    QFETCH(QString, text);
    QFETCH(QString, message);
    const std::string err = parse_error(text.toStdString());
    QVERIFY2(!err.empty(), "parsed although it should not");
    QVERIFY2(err.find(message.toStdString()) != std::string::npos, ("got: " + err).c_str());
  }

  void loadErrorsNameTheFile() {
    const fs::path missing = test::tmp_dir() / "no-such-workload.json";
    const fs::path broken = test::tmp_dir() / "broken-workload.json";
    std::ofstream(broken) << R"({"name": "x", "requests": [)";
    for (const fs::path& p : {missing, broken}) {
      try {
        load_workload(p);
        QFAIL("loaded a bad file");
      } catch (const std::runtime_error& e) {
        QVERIFY2(std::string(e.what()).starts_with(p.string() + ": "), e.what());
      }
    }
  }

  void generatorsAreDeterministic() {
    QCOMPARE(to_json(many_short_chats()), to_json(many_short_chats()));
    QCOMPARE(to_json(multi_turn()), to_json(multi_turn()));
    ManyShortChatsParams other;
    other.seed = 99;
    QVERIFY(to_json(many_short_chats(other)) != to_json(many_short_chats()));
    LongDocumentRagParams rag;
    rag.seed = 77;
    QVERIFY(to_json(long_document_rag(rag)) != to_json(long_document_rag()));
    // The RNG itself is pinned: a seed names the same workload on every platform.
    WorkloadRng rng(0);
    QCOMPARE(rng.next(), 0xE220A8397B1DCDAFull);
  }

  void manyShortChatsShape() {
    ManyShortChatsParams p;
    p.n_requests = 20;
    p.min_new_tokens = 5;
    p.max_new_tokens = 9;
    const Workload w = many_short_chats(p);
    QCOMPARE(w.requests.size(), size_t(20));
    int64_t last = 0;
    for (const WorkloadRequest& r : w.requests) {
      QVERIFY(r.max_new_tokens >= 5 && r.max_new_tokens <= 9);
      QVERIFY(r.arrival_step >= last);
      QVERIFY(r.ignore_eos);
      QVERIFY(r.sampling && r.sampling->temperature > 0);
      last = r.arrival_step;
    }
    QVERIFY(last > 0);                               // staggered, not all at step 0
    QVERIFY(common_prefix(prompts(w)).size() < 20);  // independent prompts
    validate_workload(w);
  }

  void sharedPrefixShapes() {
    SharedSystemPromptParams sp;
    sp.n_questions = 10;
    const Workload sys = shared_system_prompt(sp);
    FewShotParams fp;
    fp.n_examples = 3;
    fp.n_queries = 7;
    const Workload fs_w = few_shot(fp);
    const Workload rag = long_document_rag();
    QCOMPARE(sys.requests.size(), size_t(10));
    QCOMPARE(fs_w.requests.size(), size_t(7));
    QCOMPARE(rag.requests.size(), size_t(8));
    for (const Workload* w : {&sys, &fs_w, &rag}) {
      const std::vector<std::string> ps = prompts(*w);
      const std::string shared = common_prefix(ps);
      // The shared part is the whole prefix up to the question: every prompt adds only a short tail.
      for (const std::string& p : ps) QVERIFY2(p.size() - shared.size() < 120, p.c_str());
      QVERIFY(shared.size() > 400);
      std::vector<std::string> sorted = ps;
      std::sort(sorted.begin(), sorted.end());
      QVERIFY2(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "repeated prompt");
    }
    QVERIFY(fs_w.requests[0].prompt.find("Story:") != std::string::npos);
    QCOMPARE(
        std::count_if(fs_w.requests[0].prompt.begin(), fs_w.requests[0].prompt.end(), [](char c) { return c == ':'; }),
        long(2 * 3 + 2));  // 3 examples x (Words:, Story:) + the query's two
    QVERIFY(sys.requests[1].arrival_step > sys.requests[0].arrival_step);
  }

  void multiTurnShape() {
    MultiTurnParams p;
    p.n_conversations = 3;
    p.n_turns = 5;
    const Workload w = multi_turn(p);
    QCOMPARE(w.requests.size(), size_t(15));
    for (size_t i = 0; i < w.requests.size(); ++i) {
      QCOMPARE(w.requests[i].turn, int32_t(i % 5));
      QCOMPARE(w.requests[i].conversation, w.requests[i - i % 5].conversation);
    }
    QVERIFY(w.requests[0].conversation != w.requests[5].conversation);
    // Turn 0 opens a story; later turns carry only the short new user line.
    QVERIFY(w.requests[0].prompt.size() > w.requests[1].prompt.size());
    validate_workload(w);
  }

  void buildTurnPrompt() {
    KVSCOPE_REQUIRE_FILE(model_path());
    const Tokenizer& t = tok();
    const Workload w = multi_turn();
    std::vector<TokenId> prev = workload_prompt_ids(w.requests[0], t);
    QCOMPARE(prev.front(), t.bos());
    const TokenId lily = t.find_token("▁Lily");  // a "generated" token; any valid id does
    QVERIFY(lily >= 0);
    prev.push_back(lily);
    prev.push_back(t.eos());
    const std::vector<TokenId> next = build_turn_prompt(prev, w.requests[1], t);
    // Starts with every token of the previous turn except the closing EOS; no second BOS.
    QCOMPARE(std::vector<TokenId>(next.begin(), next.begin() + prev.size() - 1),
             std::vector<TokenId>(prev.begin(), prev.end() - 1));
    const std::vector<TokenId> added(next.begin() + prev.size() - 1, next.end());
    QVERIFY(std::find(added.begin(), added.end(), t.bos()) == added.end());
    std::string text;
    for (TokenId id : added) text += t.token_to_piece(id);
    QCOMPARE(text, " " + w.requests[1].prompt);  // one space between the turns, then the text verbatim

    WorkloadRequest bad;
    bad.id = "bad";
    bad.prompt_ids = {1, t.n_vocab()};
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, workload_prompt_ids(bad, t));
  }

  void builtinFilesMatchGenerators() {
    const fs::path dir = scenarios_dir();
    QVERIFY2(!dir.empty(), "resources/scenarios not found above the working directory; set KVSCOPE_SOURCE_DIR");
    if (std::getenv("KVSCOPE_WRITE_SCENARIOS")) write_builtin_scenarios(dir);
    for (const Workload& w : builtin_scenarios()) {
      const fs::path file = dir / (w.name + ".json");
      QVERIFY2(fs::exists(file), ("missing " + file.string() + " (regenerate: see the top of this test)").c_str());
      QVERIFY2(to_json(load_workload(file)) == to_json(w),
               (file.string() + " differs from its generator definition; regenerate it").c_str());
    }
  }

  void everyScenarioParses() {
    const std::vector<fs::path> files = scenario_files();
    QVERIFY(files.size() >= builtin_scenarios().size());
    for (const fs::path& f : files) {
      try {
        const Workload w = load_workload(f);
        QVERIFY(!w.description.empty());
        QCOMPARE(w.name + ".json", f.filename().string());
      } catch (const std::exception& e) { QFAIL(e.what()); }
    }
  }

  // Token lengths with the model the scenarios are written for; also prints the table the
  // scenarios README quotes.
  void scenariosFitStories260K() {
    KVSCOPE_REQUIRE_FILE(model_path());
    const Tokenizer& t = tok();
    for (const fs::path& f : scenario_files()) {
      const Workload w = load_workload(f);
      const std::string name = f.filename().string();
      const int32_t ctx = w.max_model_len.value_or(model_->config.n_ctx_train);
      const std::vector<RequestTokens> counts = workload_token_counts(w, t);
      int32_t pmin = INT32_MAX, pmax = 0, tmax = 0, gen = 0;
      size_t longest = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        pmin = std::min(pmin, counts[i].prompt);
        pmax = std::max(pmax, counts[i].prompt);
        if (counts[i].max_total > tmax) longest = i;
        tmax = std::max(tmax, counts[i].max_total);
        gen += w.requests[i].max_new_tokens * w.requests[i].n;
      }
      // Text that shares a prefix must share it as tokens too, or prefix caching has nothing to reuse.
      std::vector<std::vector<TokenId>> ids;
      for (const WorkloadRequest& r : w.requests)
        if (!r.is_follow_up_turn()) ids.push_back(workload_prompt_ids(r, t));
      const std::string shared_text = common_prefix(prompts(w));
      const size_t shared_tokens = ids.size() > 1 ? common_token_prefix(ids) : 0;
      qInfo(
          "%-26s requests %3zu  prompt tokens %4d-%-4d  max context %4d / %4d  shared prefix %3zu tokens  "
          "generated tokens %d",
          name.c_str(), w.requests.size(), pmin, pmax, tmax, ctx, shared_tokens, gen);
      QVERIFY2(tmax <= ctx, (name + ": " + w.requests[longest].id + " may reach " + std::to_string(tmax) +
                             " tokens > max_model_len " + std::to_string(ctx))
                                .c_str());
      if (shared_text.size() > 20)  // a tokenizer may merge across the boundary: allow one token
        QVERIFY2(shared_tokens + 1 >= t.encode(shared_text, true, false).size(), name.c_str());
    }
  }
};

QTEST_APPLESS_MAIN(TestWorkload)
#include "test_workload.moc"
