// kvscope-cli chat: a terminal conversation with the paged engine. Reads one message per line
// from stdin (a terminal or a pipe; EOF ends), streams the reply, and after each turn says how
// many prompt tokens came back from the prefix cache: turn n+1's prompt is every token of the
// turns before it, so their full blocks are hits. Commands: /reset /stats /system TEXT /quit.
// A reasoning model's thinking is printed marked "[thinking] ..." (dim on a terminal), or
// hidden with --hide-reasoning; either way the turn's line says how many tokens it took.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "chat/chat_conversation.h"
#include "chat/chat_template_choice.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/reasoning_option.h"
#include "engine/request_story_text.h"

namespace kvscope::cli {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

void print_stats(const Engine& engine, const ChatConversation& conv) {
  const SnapshotPtr snap = engine.snapshot();
  const MemorySnap& m = snap->memory;
  const EngineCounters& c = snap->counters;
  std::printf(
      "KV cache: %d blocks of %d tokens: %d used, %d cached (evictable), %d free; %lld tokens stored, %.2f MiB used\n",
      m.blocks_total, snap->block_size, m.blocks_used, m.blocks_cached, m.blocks_free,
      static_cast<long long>(m.slots_filled),
      static_cast<double>(static_cast<int64_t>(m.blocks_used) * m.kv_bytes_per_block) / (1 << 20));
  std::printf("conversation: %d turns, %zu tokens; prefix cache: %llu of %llu prompt tokens reused\n", conv.turns(),
              conv.tokens().size(), static_cast<unsigned long long>(c.prefix_hits_tokens),
              static_cast<unsigned long long>(c.prefix_queries_tokens));
}

// After a turn whose prefix hit stopped short of what it shares with an earlier request (the
// previous turn, usually): the first missed block and why, from the request's story.
void print_miss(const Engine& engine, SeqId id, const Tokenizer& tok) {
  const RequestStory* s = engine.stories().find(id, engine.story_engine());
  if (!s || s->admissions.empty()) return;
  const PrefixLookup& l = s->admissions.front().lookup;
  if (l.hit_tokens >= l.shared_tokens) return;
  const std::string why =
      describe_miss(l, engine.config().block_size, [&](TokenId t) { return tok.token_to_piece(t); });
  std::printf("[prefix hit %d of %d tokens shared with request %lld: %s]\n", l.hit_tokens, l.shared_tokens,
              static_cast<long long>(l.shared_with), why.c_str());
}

// Prints a reply as it streams: its reasoning after a "[thinking]" tag (dim on a terminal) or
// not at all, then its content on a line of its own; keeps both for the conversation.
class ReplyPrinter {
 public:
  ReplyPrinter(bool hide, bool tty) : hide_(hide), tty_(tty) {}
  void start(const ReasoningSetup& setup) {
    parser_ = ReasoningParser(setup);
    content_.clear();
    reasoning_.clear();
  }
  void feed(const std::string& piece) { show(parser_.feed(piece)); }
  void finish() {  // the caller ends the line
    show(parser_.finish());
    if (thinking_ && tty_) std::fputs("\033[0m", stdout);
    thinking_ = false;
  }
  const std::string& content() const { return content_; }
  std::optional<std::string> reasoning() const {
    return parser_.saw_reasoning() ? std::optional<std::string>(reasoning_) : std::nullopt;
  }

 private:
  void show(const ReasoningDelta& d) {
    reasoning_ += d.reasoning;
    if (!d.reasoning.empty() && !hide_) {
      if (!thinking_) std::fputs(tty_ ? "\033[2m[thinking] " : "[thinking] ", stdout);
      thinking_ = true;
      std::fputs(d.reasoning.c_str(), stdout);
    }
    if (!d.content.empty()) {
      end_thought();
      content_ += d.content;
      std::fputs(d.content.c_str(), stdout);
    }
    std::fflush(stdout);
  }
  void end_thought() {
    if (thinking_) std::fputs(tty_ ? "\033[0m\n" : "\n", stdout);
    thinking_ = false;
  }

  bool hide_, tty_, thinking_ = false;
  ReasoningParser parser_;
  std::string content_, reasoning_;
};

// ", reasoning 412 tokens in 26 blocks" for the turn's line, from the request's story.
std::string reasoning_note(const Engine& engine, SeqId id, bool hidden) {
  const RequestStory* s = engine.stories().find(id, engine.story_engine());
  if (!s || !s->reasoning || s->reasoning->span.tokens == 0) return "";
  return ", reasoning " + std::to_string(s->reasoning->span.tokens) + " tokens in " +
         std::to_string(s->reasoning->blocks) + " blocks" + (hidden ? " (hidden)" : "") +
         (s->reasoning->span.closed ? "" : ", unfinished");
}

}  // namespace

int cmd_chat(int argc, char** argv, int first) {
  const Args a(argc, argv, first, with_engine_options({"chat-template", "n-predict", "system", "reasoning-parser"}),
               {"help", "greedy", "hide-reasoning"});
  if (a.has("help")) {
    std::cout
        << "kvscope-cli chat [--model M] [--chat-template NAME|FILE] [--system TEXT] [-n N]\n"
           "  [--temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S] [--greedy]\n"
           "  sampling starts from temperature 0.8, top-k 40, top-p 0.95, repeat penalty 1.1 (as local-chat\n"
           "  apps do); --greedy: temperature 0, no top-k/top-p, no penalty (reproducible)\n"
           "  [--reasoning-parser auto|none|think|harmony] [--hide-reasoning]  a reasoning model's thinking\n"
           "  prints as \"[thinking] ...\" before the answer (auto: from the vocabulary's markers)\n"
           "  [--threads N] [--block-size B] [--kv-blocks N | --kv-memory MiB] [--kv-dtype D] [--kivi-residual R] ...\n"
           "Reads one message per line from stdin; EOF or /quit ends. Commands:\n"
           "  /reset        start a new conversation (cached blocks stay until evicted)\n"
           "  /stats        KV cache usage and prefix-cache reuse\n"
           "  /system TEXT  set the system prompt (starts a new conversation)\n"
           "Templates: ";
    for (const std::string& n : chat_template_names()) std::cout << n << " ";
    std::cout << "\n  FILE: a Jinja chat template. Default: the model's own tokenizer.chat_template, rendered by the\n"
                 "  Jinja engine (the built-in family recognised in it writes a turn the template fails on);\n"
                 "  none: completion (plain text)\n";
    return 0;
  }
  const int32_t n_predict = static_cast<int32_t>(a.i64("n-predict", 128));
  if (n_predict < 1) throw UsageError("-n must be at least 1");
  // Greedy first, then any explicit --temp etc. on top of it; else the local-chat defaults.
  const SamplingParams sampling = sampling_params(a, a.has("greedy") ? SamplingParams{} : chat_sampling_defaults());
  LoadedModel lm = load_model(a);
  const Tokenizer& tok = *lm.model->tokenizer;
  ChatTemplateChoice choice;
  try {
    choice = choose_chat_template(*lm.model->file, tok, a.str("chat-template"));
  } catch (const ChatTemplateError& e) { throw UsageError(std::string("--chat-template: ") + e.what()); }
  apply_reasoning_option(a, choice);
  auto engine = make_engine(a, lm.model);
  std::cerr << lm.model->describe() << "\n" << engine->kv_summary() << "\n";
  std::printf("chat template: %s\n", choice.describe().c_str());
  if (choice.reasoning != ReasoningFormat::None) std::printf("reasoning: %s\n", describe_reasoning(a, choice).c_str());
  if (is_greedy(sampling))
    std::printf("sampling: greedy (reproducible)\n");
  else
    std::printf(
        "sampling: temperature %.2g, top-k %d, top-p %.2g, repeat penalty %.2g, seed %llu (--greedy for reproducible)\n",
        sampling.temperature, sampling.top_k, sampling.top_p, sampling.repetition_penalty,
        static_cast<unsigned long long>(sampling.seed));
  if (!choice.warning.empty()) std::printf("warning: %s\n", choice.warning.c_str());
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive) std::printf("type a message; /reset, /stats, /system TEXT, /quit\n");

  ChatConversation conv(tok, choice);
  if (a.has("system")) conv.set_system(a.str("system"));
  Utf8StreamDecoder utf8;
  const bool hide = a.has("hide-reasoning");
  ReplyPrinter reply(hide, isatty(STDOUT_FILENO));
  const ReasoningFormat format = choice.reasoning;
  engine->set_callbacks({[&](SeqId, TokenId t) {
                           reply.feed(utf8.push(reasoning_piece(tok, t, format)));  // stop tokens print ""
                         },
                         nullptr});

  std::string line;
  for (;;) {
    if (interactive) std::printf("> "), std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    const std::string text = trim(line);
    if (text.empty()) continue;
    if (text[0] == '/') {
      const std::string cmd = text.substr(0, text.find(' '));
      if (cmd == "/quit" || cmd == "/exit") break;
      if (cmd == "/reset") {
        conv.reset();
        std::printf("[conversation reset]\n");
      } else if (cmd == "/stats") {
        print_stats(*engine, conv);
      } else if (cmd == "/system") {
        conv.set_system(text.size() > 8 ? trim(text.substr(8)) : "");
        std::printf("[system prompt %s; new conversation]\n", conv.system().empty() ? "cleared" : "set");
      } else {
        std::printf("unknown command %s (try /reset, /stats, /system TEXT, /quit)\n", cmd.c_str());
      }
      std::fflush(stdout);
      continue;
    }

    Request r;
    const ChatTurnPrompt turn = conv.next_turn(text);
    r.prompt = turn.tokens;
    r.max_new_tokens = n_predict;
    r.sampling = sampling;
    r.stop_tokens = conv.stop_tokens();
    r.label = "chat " + std::to_string(conv.turns() + 1);
    r.reasoning = turn.reasoning;
    reply.start(turn.reasoning);
    if (!interactive) std::printf("> %s\n", text.c_str());  // a piped transcript shows both sides
    if (!turn.note.empty()) std::printf("[%s: %s]\n", turn.fell_back ? "warning" : "note", turn.note.c_str());
    const auto t0 = std::chrono::steady_clock::now();
    const SeqId id = engine->submit(r);
    engine->run_until_idle();
    const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    reply.feed(utf8.flush());
    reply.finish();
    std::printf("\n");

    const Sequence& s = engine->sequence(id);
    if (s.state == SeqState::Rejected) {
      std::printf("[error: %s; the conversation is unchanged, /reset starts over]\n", s.error.c_str());
      std::fflush(stdout);
      continue;
    }
    double ttft_ms = 0;
    for (const SeqSnap& q : engine->snapshot()->seqs)
      if (q.id == id) ttft_ms = q.ttft_ms;
    const int n_gen = static_cast<int>(s.output_tokens().size());
    const double decode_s = total_s - ttft_ms / 1000.0;
    const double tps = n_gen > 1 && decode_s > 0 ? (n_gen - 1) / decode_s : 0.0;
    const char* stop = s.finish == FinishReason::Eos                           ? "end of turn"
                       : s.total_len() >= engine->config().sched.max_model_len ? "context full, /reset to go on"
                                                                               : "length";
    std::printf("[prompt %zu tokens, cached %d, generated %d (stop: %s)%s, TTFT %.1f ms, %.1f tok/s]\n",
                s.prompt_tokens().size(), s.num_cached_prompt, n_gen, stop, reasoning_note(*engine, id, hide).c_str(),
                ttft_ms, tps);
    print_miss(*engine, id, tok);
    std::fflush(stdout);
    conv.commit(turn, reply.content(), s.tokens, reply.reasoning());
  }
  return 0;
}

}  // namespace kvscope::cli
