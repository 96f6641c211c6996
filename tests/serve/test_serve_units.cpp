// The server's parts without HTTP or Python: the KV-event codec (round trip, vLLM's older
// array-shaped events, bytes hashes, garbage), the tracker on a hybrid (two KV group) engine
// against the pools themselves, the engine worker (concurrent submitters, cancel frees blocks,
// stop strings), request parsing and the Prometheus text.
#include <QtTest>

#define MSGPACK_NO_BOOST 1
#include <msgpack.hpp>

#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "chat/chat_conversation.h"
#include "chat/chat_template_choice.h"
#include "chat_templates.h"
#include "cpu/cpu_backend.h"
#include "hybrid_models.h"
#include "model/synthetic_model.h"
#include "serve/engine_worker.h"
#include "serve/kv_event_tracker.h"
#include "serve/kv_events_codec.h"
#include "serve/openai_request.h"
#include "serve/prometheus_text.h"
#include "serve/serving_queue.h"
#include "serve/traffic_recorder.h"
#include "run/trace_reader.h"
#include "test_support.h"

using namespace kvscope;
using namespace kvscope::serve;

namespace {

std::shared_ptr<Model> stories() {
  static std::shared_ptr<Model> m = Model::load((test::models_dir() / "stories260K.gguf").string());
  return m;
}

std::shared_ptr<Model> gemma3_synthetic() {
  static std::shared_ptr<Model> m = [] {
    SyntheticSpec s;
    s.arch = "gemma3";
    s.n_vocab = 300;
    s.n_embd = 64;
    s.n_layer = 3;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.n_ff = 128;
    s.n_ctx = 512;
    s.sliding_window = 32;
    s.swa_pattern = 3;
    const auto path = (test::tmp_dir() / "serve-units-gemma3.gguf").string();
    write_synthetic_model(s, path);
    return Model::load(path);
  }();
  return m;
}

// A synthetic llama whose vocabulary has ChatML's control tokens and whose file carries a
// Jinja chat template that drops earlier reasoning and reads enable_thinking.
std::shared_ptr<Model> chatml_synthetic() {
  static std::shared_ptr<Model> m = [] {
    SyntheticSpec s;
    s.n_vocab = 300;
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.n_ff = 128;
    s.n_ctx = 512;
    s.special_tokens = {"<|im_start|>", "<|im_end|>"};
    s.chat_template = test::kDropsReasoning;
    const auto path = (test::tmp_dir() / "serve-units-chatml.gguf").string();
    write_synthetic_model(s, path);
    return Model::load(path);
  }();
  return m;
}

// Drains a channel until `n` choices finished; returns the finish items by index.
std::map<int, ChannelItem> finishes(RequestChannel& ch, int n, std::string* text = nullptr) {
  std::map<int, ChannelItem> out;
  while (static_cast<int>(out.size()) < n)
    for (ChannelItem& it : ch.take(std::chrono::milliseconds(200))) {
      if (text) *text += it.text;
      if (it.kind == ChannelItem::Kind::Finish) out[it.index] = it;
    }
  return out;
}

}  // namespace

class TestServeUnits : public QObject {
  Q_OBJECT
 private slots:
  void codec_round_trip() {
    KvBlockStored s;
    s.block_hashes = {0xffffffffffffffffull, 42};
    s.parent_block_hash = 7;
    for (int i = 0; i < 32; ++i) s.token_ids.push_back(i * 3);
    s.block_size = 16;
    s.group_idx = 1;
    s.kv_cache_spec_kind = "sliding_window";
    s.kv_cache_spec_sliding_window = 512;
    KvBlockStored bare;
    bare.block_hashes = {1};
    bare.token_ids = std::vector<int64_t>(16, 5);
    KvBlockRemoved r;
    r.block_hashes = {42, 9};
    r.group_idx = 0;
    const KvEventBatch b{1700000000.25, {s, bare, r, KvAllBlocksCleared{}}, 0};
    QVERIFY(decode_kv_event_batch(encode_kv_event_batch(b)) == b);
    const KvEventBatch no_rank{3.5, {}, std::nullopt};
    QVERIFY(decode_kv_event_batch(encode_kv_event_batch(no_rank)) == no_rank);
  }

  void codec_reads_vllm_array_events_and_bytes_hashes() {
    // vLLM before 0.11: events array_like, [tag, fields...]; hashes may be bytes (the low 8
    // bytes, big-endian, are vLLM's own int form).
    msgpack::sbuffer buf;
    msgpack::packer<msgpack::sbuffer> p(buf);
    p.pack_array(3);
    p.pack_double(12.5);
    p.pack_array(2);
    p.pack_array(8);
    p.pack(std::string("BlockStored"));
    std::string h32(32, '\0');
    h32[31] = 0x2a;
    h32[24] = 0x01;
    p.pack_array(1);
    p.pack_bin(32);
    p.pack_bin_body(h32.data(), 32);
    p.pack_nil();
    p.pack(std::vector<int>(16, 3));
    p.pack(16);
    p.pack_nil();
    p.pack(std::string("GPU"));
    p.pack_nil();
    p.pack_array(3);
    p.pack(std::string("BlockRemoved"));
    p.pack(std::vector<uint64_t>{5});
    p.pack_nil();
    p.pack(2);
    const KvEventBatch b = decode_kv_event_batch(std::string_view(buf.data(), buf.size()));
    QCOMPARE(b.ts, 12.5);
    QCOMPARE(*b.data_parallel_rank, 2);
    QCOMPARE(b.events.size(), size_t(2));
    const auto& s = std::get<KvBlockStored>(b.events[0]);
    QVERIFY(s.block_hashes.at(0).is_bytes());  // kept whole; bits() are its last 8 bytes
    QCOMPARE(s.block_hashes.at(0).bytes(), h32);
    QCOMPARE(s.block_hashes.at(0).bits(), (uint64_t(1) << 56) | 0x2a);
    QVERIFY(!s.parent_block_hash);
    QCOMPARE(s.token_ids.size(), size_t(16));
    QCOMPARE(*s.medium, std::string("GPU"));
    QVERIFY(!std::get<KvBlockRemoved>(b.events[1]).medium);
  }

  void codec_rejects_garbage_without_crashing() {
    KvBlockStored s;
    s.block_hashes = {1, 2};
    s.token_ids = std::vector<int64_t>(32, 9);
    const std::string good = encode_kv_event_batch({1.0, {s, KvBlockRemoved{{1}, "GPU", 0}}, 0});
    int rejected = 0;
    for (size_t n = 0; n < good.size(); ++n) {  // every truncation: decoded or a clear error
      try {
        decode_kv_event_batch(std::string_view(good.data(), n));
      } catch (const KvEventDecodeError&) { ++rejected; }
    }
    QCOMPARE(rejected, static_cast<int>(good.size()));
    std::mt19937 rng(3);
    for (int i = 0; i < 2000; ++i) {  // and flipped bytes
      std::string bad = good;
      bad[rng() % bad.size()] = static_cast<char>(rng());
      try {
        decode_kv_event_batch(bad);
      } catch (const KvEventDecodeError&) {}
    }
    QVERIFY_THROWS_EXCEPTION(KvEventDecodeError, decode_kv_event_batch("\x93\x01\x02\x03"));
    QCOMPARE(encode_sequence_number(-1), std::string(8, '\xff'));
    QCOMPARE(decode_sequence_number(encode_sequence_number(123456789012345)), int64_t(123456789012345));
    QVERIFY_THROWS_EXCEPTION(KvEventDecodeError, decode_sequence_number("abc"));
  }

  // The events, replayed onto a multiset of hashes per group, are the pools' hashed blocks
  // after every step; the sliding group's events say so.
  void tracker_follows_both_groups_of_a_hybrid_engine() {
    auto m = gemma3_synthetic();
    EngineConfig cfg;
    cfg.num_blocks = 40;
    cfg.hybrid_kv = HybridKvMode::On;
    Engine e(m, std::make_unique<CpuBackend>(m, 1), cfg);
    QVERIFY(e.hybrid_kv());
    KvEventTracker tracker(e);
    std::map<int, std::map<uint64_t, int>> seen;  // group -> hash -> blocks
    int stores[2] = {0, 0}, removes[2] = {0, 0};
    std::mt19937 rng(5);
    std::vector<TokenId> shared = {2};
    for (int i = 0; i < 70; ++i) shared.push_back(static_cast<TokenId>(3 + rng() % 290));
    for (int r = 0; r < 12; ++r) {
      Request q;
      q.prompt = r % 3 == 0 ? shared : std::vector<TokenId>{2};
      while (q.prompt.size() < 80) q.prompt.push_back(static_cast<TokenId>(3 + rng() % 290));
      q.max_new_tokens = 20;
      q.ignore_eos = true;
      e.submit(q);
    }
    while (e.step()) {
      for (const KvEvent& ev : tracker.update(e)) {
        if (const auto* s = std::get_if<KvBlockStored>(&ev)) {
          QVERIFY(s->group_idx);
          const int g = *s->group_idx;
          QCOMPARE(*s->kv_cache_spec_kind, std::string(g == 1 ? "sliding_window" : "full_attention"));
          QCOMPARE(s->kv_cache_spec_sliding_window.has_value(), g == 1);
          QCOMPARE(s->token_ids.size(), size_t(16));
          if (s->parent_block_hash) QVERIFY(seen[g][s->parent_block_hash->bits()] > 0);  // parents first
          ++seen[g][s->block_hashes.at(0).bits()];
          ++stores[g];
        } else if (const auto* rm = std::get_if<KvBlockRemoved>(&ev)) {
          const int g = *rm->group_idx;
          for (const kv_events::BlockHash& h : rm->block_hashes) QVERIFY(--seen[g][h.bits()] >= 0);
          ++removes[g];
        }
      }
      for (int g = 0; g < 2; ++g) {
        std::map<uint64_t, int> pool;
        const BlockPool& bp = e.hybrid_kv()->group(g).pool();
        for (BlockId b = 0; b < bp.num_blocks(); ++b)
          if (bp.state(b).hashed) ++pool[bp.state(b).hash];
        std::erase_if(seen[g], [](const auto& kv) { return kv.second == 0; });
        QCOMPARE(seen[g], pool);
      }
    }
    QVERIFY(stores[0] > 0 && stores[1] > 0);
    QVERIFY2(removes[0] + removes[1] > 0, "the small pools should have evicted");
  }

  // qwen35: the attention layers' blocks are KV group 0 of a hybrid model ("full_attention"),
  // beside the recurrent state, which publishes none.
  void tracker_marks_a_recurrent_models_attention_group() {
    const auto m = test::hybrid("qwen35");
    EngineConfig cfg;
    cfg.block_size = 8;
    cfg.num_blocks = 64;
    Engine e(m, std::make_unique<CpuBackend>(m, 1), cfg);
    KvEventTracker tracker(e);
    e.submit(test::logged_request(test::tokens(40, 1), 4));
    int stores = 0;
    while (e.step())
      for (const KvEvent& ev : tracker.update(e))
        if (const auto* s = std::get_if<KvBlockStored>(&ev)) {
          QCOMPARE(s->group_idx.value_or(-1), 0);
          QCOMPARE(s->kv_cache_spec_kind.value_or(""), std::string("full_attention"));
          ++stores;
        }
    QCOMPARE(stores, 5);  // 43 tokens computed: 5 full blocks of 8
  }

  void worker_serves_concurrent_submitters_and_cancels() {
    if (!std::filesystem::exists(test::models_dir() / "stories260K.gguf")) QSKIP("stories260K.gguf not found");
    auto m = stories();
    EngineConfig cfg;
    cfg.num_blocks = 256;
    EngineWorker w(std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m, 1), cfg), WorkerLimits{64});
    std::vector<std::thread> threads;
    std::atomic<int> ok{0};
    for (int t = 0; t < 6; ++t)
      threads.emplace_back([&, t] {
        for (int k = 0; k < 4; ++k) {
          GenerationJob j;
          j.prompt = m->tokenizer->encode("Once upon a time " + std::to_string(t * 10 + k), true, true);
          j.max_tokens = 12;
          j.ignore_eos = true;
          j.n = 1 + k % 2;
          auto ch = w.submit(j);
          const auto f = finishes(*ch, j.n);
          bool good = true;
          for (const auto& [i, it] : f) good = good && it.finish_reason == "length" && it.completion_tokens == 12;
          if (good) ++ok;
        }
      });
    for (auto& th : threads) th.join();
    QCOMPARE(ok.load(), 24);

    GenerationJob longjob;
    longjob.prompt = m->tokenizer->encode("Once upon a time", true, true);
    longjob.max_tokens = 1500;
    longjob.ignore_eos = true;
    auto ch = w.submit(longjob);
    std::vector<ChannelItem> first;
    while (first.empty()) first = ch->take(std::chrono::milliseconds(200));
    w.cancel(ch);
    const auto f = finishes(*ch, 1);
    QCOMPARE(f.at(0).finish_reason, std::string("cancelled"));
    QVERIFY(f.at(0).completion_tokens < 1500);
    for (int i = 0; i < 100 && (w.latest_snapshot()->memory.blocks_used != 0 || w.metrics().active_requests != 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    QCOMPARE(w.latest_snapshot()->memory.blocks_used, 0);
    QCOMPARE(w.metrics().active_requests, 0);
    QCOMPARE(w.metrics().requests_cancelled, uint64_t(1));
  }

  void worker_stop_strings_end_the_text_and_free_the_sequence() {
    if (!std::filesystem::exists(test::models_dir() / "stories260K.gguf")) QSKIP("stories260K.gguf not found");
    auto m = stories();
    EngineWorker w(std::make_unique<Engine>(m, std::make_unique<CpuBackend>(m, 1), EngineConfig{}), WorkerLimits{});
    GenerationJob j;
    j.prompt = m->tokenizer->encode("Once upon a time", true, true);
    j.max_tokens = 40;
    std::string full;
    finishes(*w.submit(j), 1, &full);
    const std::string word = " little";
    QVERIFY2(full.find(word) != std::string::npos, full.c_str());
    j.stop = {word, "zzzz"};
    std::string cut;
    const auto f = finishes(*w.submit(j), 1, &cut);
    QCOMPARE(f.at(0).finish_reason, std::string("stop"));
    QCOMPARE(cut, full.substr(0, full.find(word)));
  }

  // The queue as the window drives it: stepped by the caller's own thread, detached when the
  // engine is rebuilt, closed when serving stops. Every waiting request hears back with 503
  // (the server's doing, so a client retries), and no block stays in use.
  void queue_answers_every_request_on_detach_and_close() {
    if (!std::filesystem::exists(test::models_dir() / "stories260K.gguf")) QSKIP("stories260K.gguf not found");
    auto m = stories();
    Engine e(m, std::make_unique<CpuBackend>(m, 1), EngineConfig{});
    ServingQueue q(WorkerLimits{8});
    GenerationJob j;
    j.prompt = m->tokenizer->encode("Once upon a time", true, true);
    j.max_tokens = 1000;
    j.ignore_eos = true;
    // Submitted while no engine is attached (the window is building one): it waits, and the
    // engine attached next runs it.
    auto running = q.submit(j);
    QVERIFY(!q.intake());
    e.set_callbacks({[&](SeqId id, TokenId t) { q.on_token(id, t); }, [&](SeqId id) { q.on_finished(id); }});
    q.attach(e);
    QVERIFY(q.intake());
    for (int i = 0; i < 3; ++i) {
      e.step();
      q.after_step();
    }
    QVERIFY(e.snapshot()->memory.blocks_used > 0);
    q.detach("the engine was rebuilt");
    const auto f = finishes(*running, 1);
    QCOMPARE(f.at(0).finish_reason, std::string("error"));
    QCOMPARE(f.at(0).error, std::string("the engine was rebuilt"));
    QCOMPARE(f.at(0).error_status, 503);
    QCOMPARE(e.snapshot()->memory.blocks_used, 0);
    QCOMPARE(q.metrics().active_requests, 0);

    q.attach(e);
    auto queued = q.submit(j);  // never taken in: close() must answer it itself
    q.close();
    QCOMPARE(finishes(*queued, 1).at(0).error, std::string("the server is shutting down"));
    QCOMPARE(q.metrics().active_requests, 0);
    try {
      q.submit(j);
      QFAIL("a closed queue took a request");
    } catch (const ApiError& err) { QCOMPARE(err.status, 503); }
    q.detach("gone");
  }

  void requests_are_checked() {
    if (!std::filesystem::exists(test::models_dir() / "stories260K.gguf")) QSKIP("stories260K.gguf not found");
    auto m = stories();
    ServedModel sm;
    sm.name = "stories260K";
    sm.tokenizer = m->tokenizer.get();
    sm.max_model_len = 64;
    sm.n_vocab = m->config.n_vocab;
    const ParsedRequest ok =
        parse_completion_request(R"({"prompt": "Once upon", "max_tokens": 5, "seed": 3, "top_k": -1})", sm);
    QCOMPARE(ok.job.max_tokens, 5);
    QCOMPARE(ok.job.sampling.top_k, 0);
    QCOMPARE(ok.job.sampling.temperature, 1.0f);  // OpenAI's default
    try {
      parse_completion_request(R"({"prompt": "Once upon", "max_tokens": 100})", sm);
      QFAIL("accepted a completion past the context");
    } catch (const ApiError& e) {
      QCOMPARE(e.status, 400);
      QVERIFY2(std::string(e.what()).find("64") != std::string::npos &&
                   std::string(e.what()).find("100 in the completion") != std::string::npos,
               e.what());
    }
    try {
      parse_chat_request(R"({"model": "other", "messages": [{"role": "user", "content": "hi"}]})", sm);
      QFAIL("accepted another model");
    } catch (const ApiError& e) { QCOMPARE(e.status, 404); }
    // The chat prompt is the chat panel's first turn, token for token.
    const ParsedRequest chat = parse_chat_request(
        R"({"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Tell a story."}], "max_tokens": 4})",
        sm);
    QCOMPARE(chat.job.prompt,
             chat_turn_prompt(*m->tokenizer, ChatTemplateKind::Completion, "Be kind.", {}, "Tell a story."));
  }

  // The model's Jinja template writes the chat prompt; chat_template_kwargs are its extra
  // variables; a template that raises, or kwargs that are not an object, are the client's 400.
  void chat_requests_use_the_jinja_template() {
    auto m = chatml_synthetic();
    ServedModel sm;
    sm.name = "chatml";
    sm.tokenizer = m->tokenizer.get();
    sm.chat_template = choose_chat_template(*m->file, *m->tokenizer, "");
    QVERIFY(sm.chat_template.uses_jinja());
    sm.max_model_len = 256;
    sm.n_vocab = m->config.n_vocab;
    const Tokenizer& tok = *m->tokenizer;
    auto prompt = [&](const std::string& extra) {
      return parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4)" + extra + "}",
                                sm)
          .job.prompt;
    };
    auto bos_and = [&](const std::string& text) {
      std::vector<TokenId> ids = tok.encode(text, false, true);
      ids.insert(ids.begin(), tok.bos());
      return ids;
    };
    const std::string chat = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    const std::vector<TokenId> want = bos_and(chat), want_off = bos_and(chat + "<think>\n\n</think>\n\n");
    QCOMPARE(prompt(""), want);
    QCOMPARE(prompt(R"(, "chat_template_kwargs": {"enable_thinking": false})"), want_off);
    QCOMPARE(prompt(R"(, "chat_template_kwargs": {"enable_thinking": true})"), want);
    QCOMPARE(prompt(R"(, "chat_template_kwargs": null)"), want);
    const ParsedRequest pr = parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}]})", sm);
    QVERIFY(std::find(pr.job.stop_tokens.begin(), pr.job.stop_tokens.end(), tok.find_token("<|im_end|>")) !=
            pr.job.stop_tokens.end());
    auto refused = [&](const std::string& extra, const char* says) {
      try {
        prompt(extra);
        QFAIL(("accepted " + extra).c_str());
      } catch (const ApiError& e) {
        QCOMPARE(e.status, 400);
        QVERIFY2(std::string(e.what()).find(says) != std::string::npos, e.what());
      }
    };
    refused(R"(, "chat_template_kwargs": [1])", "must be an object");
    refused(R"(, "chat_template_kwargs": {"messages": []})", "must not set 'messages'");
    sm.chat_template.jinja = "{{ raise_exception('no chats on Sundays') }}";
    refused("", "no chats on Sundays");
  }

  // serve --record: sequences ending out of order still give lines in arrival order; one that
  // never ran is dropped and stops holding the others back; the file reads as a kvscope trace.
  void traffic_recording_is_in_arrival_order() {
    const std::string path = (test::tmp_dir() / "traffic.jsonl").string();
    const auto t0 = serve::TrafficRecorder::Clock::now();
    std::vector<TokenId> a(40, 7), b(40, 7), c(5, 9);
    b[20] = 8;  // b shares a's first block of 16 only
    {
      serve::TrafficRecorder rec(path, 16);
      rec.started(1, t0 + std::chrono::milliseconds(10));
      rec.started(2, t0 + std::chrono::milliseconds(20));
      rec.started(3, t0 + std::chrono::milliseconds(30));
      rec.started(4, t0 + std::chrono::milliseconds(40));
      rec.finished(3, c, 1, "", true);  // held: 1 and 2 arrived earlier and run
      rec.finished(2, b, 2, "bob", true);
      QCOMPARE(rec.lines_written(), int64_t{0});
      rec.finished(1, {}, 0, "", false);  // refused: dropped, releasing 2 and 3
      QCOMPARE(rec.lines_written(), int64_t{2});
      rec.finished(4, a, 5, "alice", true);
      QCOMPARE(rec.lines_written(), int64_t{3});
    }
    std::ifstream in(path);
    TraceReaderOptions o;
    o.format = TraceFormat::Kvscope;
    const std::vector<TraceRequest> t = read_trace(in, o);
    QCOMPARE(t.size(), size_t{3});
    QCOMPARE(t[0].input_length, 40);
    QCOMPARE(t[0].output_length, 2);
    QCOMPARE(t[0].session_id, std::string("bob"));
    QCOMPARE(t[1].input_length, 5);
    QVERIFY(t[1].hash_ids.empty());  // shorter than a block
    QCOMPARE(t[2].session_id, std::string("alice"));
    QCOMPARE(t[0].hash_ids.size(), size_t{2});
    QCOMPARE(t[0].hash_ids[0], t[2].hash_ids[0]);
    QVERIFY(t[0].hash_ids[1] != t[2].hash_ids[1]);
    QVERIFY(t[0].timestamp_ms <= t[1].timestamp_ms && t[1].timestamp_ms <= t[2].timestamp_ms);
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, serve::TrafficRecorder("/nonexistent/dir/x.jsonl", 16));
  }

  void prometheus_text_has_vllm_names_and_cumulative_buckets() {
    Snapshot s;
    s.memory.blocks_total = 10;
    s.memory.blocks_used = 4;
    s.running = 2;
    ServeMetrics m;
    m.ttft.observe(0.003);
    m.ttft.observe(0.3);
    const std::string t = render_prometheus(s, m, MetricsContext{"tiny \"model\"", {{400, 3}}});
    QVERIFY(t.find("vllm:kv_cache_usage_perc{model_name=\"tiny \\\"model\\\"\"} 0.4\n") != std::string::npos);
    QVERIFY(t.find("vllm:num_requests_running{model_name=\"tiny \\\"model\\\"\"} 2\n") != std::string::npos);
    QVERIFY(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny \\\"model\\\"\",le=\"0.001\"} 0\n") !=
            std::string::npos);
    QVERIFY(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny \\\"model\\\"\",le=\"0.005\"} 1\n") !=
            std::string::npos);
    QVERIFY(t.find("vllm:time_to_first_token_seconds_bucket{model_name=\"tiny \\\"model\\\"\",le=\"+Inf\"} 2\n") !=
            std::string::npos);
    QVERIFY(t.find("kvscope:http_errors_total{model_name=\"tiny \\\"model\\\"\",status=\"400\"} 3\n") !=
            std::string::npos);
  }
};

QTEST_APPLESS_MAIN(TestServeUnits)
#include "test_serve_units.moc"
