// kvscope-cli generate: one request through the full paged engine, streamed to stdout.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"

namespace kvscope::cli {

static std::vector<TokenId> parse_ids(const std::string& s) {
  std::vector<TokenId> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      ids.push_back(static_cast<TokenId>(std::stol(item, &used)));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) { throw UsageError("--prompt-ids: '" + item + "' is not a token id"); }
  }
  return ids;
}

int cmd_generate(int argc, char** argv, int first) {
  const Args a(argc, argv, first, with_engine_options({"prompt", "prompt-ids", "n-predict", "logits-out"}),
               {"json", "ignore-eos", "help"});
  if (a.has("help")) {
    std::cout
        << "kvscope-cli generate [--model M] [--prompt TEXT | --prompt-ids 1,2,3] [-n N] [--json]\n"
           "  [--ignore-eos] [--logits-out FILE] [--temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S]\n"
           "  [--threads N] [--block-size B] [--kv-blocks N | --kv-memory MiB] [--kv-dtype D]\n"
           "  [--kv-group G] [--kivi-residual R] (kivi4/kivi2/rot4c: the newest R tokens beyond the filling block stay f16)\n";
    return 0;
  }
  LoadedModel lm = load_model(a);
  const Tokenizer& tok = *lm.model->tokenizer;
  Request req;
  if (a.has("prompt-ids")) {
    req.prompt = parse_ids(a.str("prompt-ids"));  // fed as-is, BOS included by the caller
  } else {
    const std::string text = a.str("prompt", "Once upon a time");
    req.prompt = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
  }
  req.max_new_tokens = static_cast<int32_t>(a.i64("n-predict", 64));
  req.ignore_eos = a.has("ignore-eos");
  req.sampling = sampling_params(a);
  req.record_logits = a.has("logits-out");
  const bool json = a.has("json");

  auto engine = make_engine(a, lm.model);
  if (!json) std::cerr << lm.model->describe() << "\n" << engine->kv_summary() << "\n";
  Utf8StreamDecoder utf8;
  std::string text;
  engine->set_callbacks({[&](SeqId, TokenId t) {
                           const std::string piece = utf8.push(tok.token_to_piece(t));
                           text += piece;
                           if (!json) {
                             std::cout << piece;
                             std::cout.flush();
                           }
                         },
                         nullptr});
  const auto t0 = std::chrono::steady_clock::now();
  const SeqId id = engine->submit(req);
  engine->run_until_idle();
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string tail = utf8.flush();
  text += tail;
  if (!json) std::cout << tail << std::endl;  // flushed: the stats follow on stderr

  const Sequence& s = engine->sequence(id);
  if (s.state == SeqState::Rejected) throw std::runtime_error("request rejected: " + s.error);
  const SnapshotPtr snap = engine->snapshot();
  double ttft_s = 0;
  for (const SeqSnap& q : snap->seqs)
    if (q.id == id) ttft_s = q.ttft_ms / 1000.0;
  const double prefill_tps = ttft_s > 0 ? s.prompt_tokens().size() / ttft_s : 0;
  const int32_t n_gen = static_cast<int32_t>(s.output_tokens().size());
  const double decode_s = total_s - ttft_s;
  const double decode_tps = n_gen > 1 && decode_s > 0 ? (n_gen - 1) / decode_s : 0;

  if (a.has("logits-out")) {
    std::ofstream f(a.str("logits-out"), std::ios::binary);
    if (!f) throw std::runtime_error("cannot write " + a.str("logits-out"));
    for (const auto& row : engine->recorded_logits(id))
      f.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size() * sizeof(float)));
  }
  const char* stop = s.finish == FinishReason::Eos ? "eog" : "n";
  if (json) {
    nlohmann::json j;
    j["model"] = lm.path;
    j["model_description"] = lm.model->describe();
    j["prompt_tokens"] = s.prompt_tokens();
    j["tokens"] = s.output_tokens();
    j["n_prompt"] = s.prompt_tokens().size();
    j["n_generated"] = n_gen;
    j["text"] = text;
    j["stop_reason"] = stop;
    j["prefill_tokens_per_s"] = prefill_tps;
    j["decode_tokens_per_s"] = decode_tps;
    j["ttft_ms"] = ttft_s * 1000.0;
    j["backend"] = engine->backend().name();
    j["kv_cache"] = engine->kv_summary();
    if (!lm.note.empty()) j["note"] = lm.note;
    std::cout << j.dump() << "\n";
  } else {
    std::fprintf(stderr,
                 "prompt %zu tokens, generated %d tokens (stop: %s)\nprefill %.1f tokens/s, decode %.1f tokens/s\n",
                 s.prompt_tokens().size(), n_gen, stop, prefill_tps, decode_tps);
  }
  return 0;
}

}  // namespace kvscope::cli
