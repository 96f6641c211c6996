// Workload generators: the shapes of generators.h, written with StoryWriter's vocabulary.
#include "workload/generators.h"

#include <set>
#include <stdexcept>
#include <string>

#include "workload/story_text.h"

namespace kvscope {
namespace {

void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("workload generator: ") + what);
}

std::string numbered(const std::string& prefix, int32_t i, int32_t n) {
  std::string num = std::to_string(i);
  const size_t width = std::to_string(n - 1).size();  // zero-padded so ids sort in order
  return prefix + std::string(width > num.size() ? width - num.size() : 0, '0') + num;
}

WorkloadRequest text_request(std::string id, std::string prompt, int64_t arrival, int32_t max_new, bool ignore_eos) {
  WorkloadRequest r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.arrival_step = arrival;
  r.max_new_tokens = max_new;
  r.ignore_eos = ignore_eos;
  return r;
}

// The first n space-separated words of `text` (all of it when shorter).
std::string first_words(const std::string& text, int32_t n) {
  size_t end = 0;
  for (int32_t i = 0; i < n && end != std::string::npos; ++i) end = text.find(' ', end + (i > 0));
  return end == std::string::npos ? text : text.substr(0, end);
}

// Draws until the text is new: a prompt repeated by chance would turn "N different questions"
// into fewer, and inflate prefix-cache hits beyond the shared prefix being measured.
template <class Draw>
std::string distinct(std::set<std::string>& seen, Draw draw) {
  for (int tries = 0; tries < 1000; ++tries) {
    std::string s = draw();
    if (seen.insert(s).second) return s;
  }
  throw std::invalid_argument("workload generator: cannot draw enough distinct prompts; ask for fewer");
}

}  // namespace

Workload many_short_chats(const ManyShortChatsParams& p) {
  require(p.n_requests > 0, "n_requests must be > 0");
  require(p.min_words >= 1 && p.min_words <= p.max_words, "need 1 <= min_words <= max_words");
  require(p.min_new_tokens >= 1 && p.min_new_tokens <= p.max_new_tokens, "need 1 <= min_new_tokens <= max_new_tokens");
  require(p.mean_arrival_gap >= 0, "mean_arrival_gap must be >= 0");
  StoryWriter w(p.seed);
  Workload out;
  out.name = "many-short-chats";
  out.description = std::to_string(p.n_requests) + " independent story beginnings (" + std::to_string(p.min_words) +
                    "-" + std::to_string(p.max_words) + " words) asking for " + std::to_string(p.min_new_tokens) + "-" +
                    std::to_string(p.max_new_tokens) + " new tokens each, arriving about every " +
                    std::to_string(p.mean_arrival_gap) + " steps. No shared prefix beyond BOS.";
  out.max_model_len = p.max_model_len;
  std::set<std::string> seen;
  int64_t arrival = 0;
  for (int32_t i = 0; i < p.n_requests; ++i) {
    const int32_t n_words = w.rng().uniform(p.min_words, p.max_words);
    const int sentences = 3 + n_words / 6;  // enough text for n_words (a sentence has ~6-10 words)
    const std::string prompt = distinct(seen, [&] { return first_words(w.snippet(w.cast(), sentences), n_words); });
    WorkloadRequest r = text_request(numbered("chat-", i, p.n_requests), prompt, arrival,
                                     w.rng().uniform(p.min_new_tokens, p.max_new_tokens), p.ignore_eos);
    if (p.temperature > 0) {
      SamplingParams s;
      s.temperature = p.temperature;
      s.top_p = 0.95f;
      s.seed = p.seed * 1000 + static_cast<uint64_t>(i);
      r.sampling = s;
    }
    out.requests.push_back(std::move(r));
    arrival += w.rng().uniform(0, 2 * p.mean_arrival_gap);
  }
  return out;
}

Workload shared_system_prompt(const SharedSystemPromptParams& p) {
  require(p.n_questions > 0 && p.max_new_tokens > 0 && p.arrival_gap >= 0, "bad counts");
  require(p.story_sentences >= 5, "story_sentences must be >= 5");
  StoryWriter w(p.seed);
  const StoryCast c = w.cast();
  // Ends with a space-free boundary ("...\n") so that every question starts a new token.
  const std::string system =
      "You are a kind helper who tells stories to children. Answer every question with a short, happy story. "
      "Here is a story you know.\n" +
      w.story(c, p.story_sentences) + "\n";
  Workload out;
  out.name = "shared-system-prompt";
  out.description = "One system prompt (an instruction + a " + std::to_string(p.story_sentences) +
                    "-sentence story) shared as a text prefix by " + std::to_string(p.n_questions) +
                    " different questions arriving " + std::to_string(p.arrival_gap) +
                    " steps apart. Measures prefix caching: every request after the first can reuse the system "
                    "prompt's full blocks.";
  out.max_model_len = p.max_model_len;
  std::set<std::string> seen;
  for (int32_t i = 0; i < p.n_questions; ++i) {
    // Half ask about the story in the system prompt, half start something new.
    const std::string q = distinct(seen, [&] { return w.rng().uniform(0, 1) ? w.question(c) : w.follow_up(c); });
    out.requests.push_back(text_request(numbered("q-", i, p.n_questions), system + "Question: " + q + "\nAnswer:",
                                        static_cast<int64_t>(i) * p.arrival_gap, p.max_new_tokens, p.ignore_eos));
  }
  return out;
}

Workload few_shot(const FewShotParams& p) {
  require(p.n_examples >= 1 && p.n_queries > 0 && p.max_new_tokens > 0 && p.arrival_gap >= 0, "bad counts");
  StoryWriter w(p.seed);
  auto words = [](const StoryCast& c) { return "Words: " + c.animal + ", " + c.object + ", " + c.place + ".\n"; };
  std::string prefix = "Write a short story that uses the three words.\n\n";
  std::set<std::string> seen;
  for (int32_t k = 0; k < p.n_examples; ++k) {
    const StoryCast c = w.cast();
    seen.insert(words(c));
    prefix += words(c) + "Story: Once upon a time, there was a " + c.animal + " named " + c.name + ". " + c.name +
              " liked to play in the " + c.place + " with a " + c.adjective + " " + c.object + ". " + w.sentence(c) +
              "\n\n";
  }
  Workload out;
  out.name = "few-shot";
  out.description = "An instruction and " + std::to_string(p.n_examples) +
                    " worked examples (three words -> a short story) shared by " + std::to_string(p.n_queries) +
                    " queries with new words. The few-shot prefix is the shared part.";
  out.max_model_len = p.max_model_len;
  for (int32_t i = 0; i < p.n_queries; ++i) {
    const std::string q = distinct(seen, [&] { return words(w.cast()); });
    out.requests.push_back(text_request(numbered("fs-", i, p.n_queries), prefix + q + "Story:",
                                        static_cast<int64_t>(i) * p.arrival_gap, p.max_new_tokens, p.ignore_eos));
  }
  return out;
}

Workload multi_turn(const MultiTurnParams& p) {
  require(p.n_conversations > 0 && p.n_turns > 0 && p.opening_sentences >= 1, "bad counts");
  require(p.max_new_tokens > 0 && p.conversation_gap >= 0, "bad counts");
  StoryWriter w(p.seed);
  Workload out;
  out.name = "multi-turn-chat";
  out.description = std::to_string(p.n_conversations) + " conversations x " + std::to_string(p.n_turns) +
                    " turns. Turn 0 holds a story opening and a question; each later turn holds only the new user "
                    "line, which the replayer appends to the previous turn's prompt + answer tokens, so turn t+1 "
                    "starts with turn t's whole context.";
  out.max_model_len = p.max_model_len;
  for (int32_t c = 0; c < p.n_conversations; ++c) {
    const StoryCast cast = w.cast();
    const std::string conv = numbered("conv-", c, p.n_conversations);
    const int64_t start = static_cast<int64_t>(c) * p.conversation_gap;
    std::set<std::string> seen;
    for (int32_t t = 0; t < p.n_turns; ++t) {
      const std::string line = distinct(seen, [&] { return w.follow_up(cast); });
      const std::string text = t == 0 ? w.snippet(cast, p.opening_sentences) + " " + line : line;
      // Later turns may start as soon as the previous one finishes: their arrival is the conversation's.
      WorkloadRequest r =
          text_request(conv + "-turn-" + std::to_string(t), text, start, p.max_new_tokens, p.ignore_eos);
      r.conversation = conv;
      r.turn = t;
      out.requests.push_back(std::move(r));
    }
  }
  return out;
}

Workload long_document_rag(const LongDocumentRagParams& p) {
  require(p.n_stories >= 1 && p.sentences_per_story >= 5 && p.n_questions > 0, "bad counts");
  require(p.max_new_tokens > 0 && p.arrival_gap >= 0, "bad counts");
  StoryWriter w(p.seed);
  std::vector<StoryCast> casts;
  std::vector<std::string> used;
  std::string doc = "Read the stories below and answer the question.\n\n";
  for (int32_t s = 0; s < p.n_stories; ++s) {
    casts.push_back(w.cast_avoiding(used));  // distinct names keep each question answerable
    used.push_back(casts.back().name);
    used.push_back(casts.back().friend_name);
    doc += w.story(casts.back(), p.sentences_per_story) + "\n\n";
  }
  Workload out;
  out.name = "long-document-rag";
  out.description = "A long document (" + std::to_string(p.n_stories) + " short stories of " +
                    std::to_string(p.sentences_per_story) + " sentences) followed by one of " +
                    std::to_string(p.n_questions) +
                    " questions about it: a long shared prefix, short answers, as in retrieval-augmented generation.";
  out.max_model_len = p.max_model_len;
  std::set<std::string> seen;
  for (int32_t i = 0; i < p.n_questions; ++i) {
    const std::string q = distinct(seen, [&] { return w.question(w.rng().pick(casts)); });
    out.requests.push_back(text_request(numbered("rag-", i, p.n_questions), doc + "Question: " + q + "\nAnswer:",
                                        static_cast<int64_t>(i) * p.arrival_gap, p.max_new_tokens, p.ignore_eos));
  }
  return out;
}

}  // namespace kvscope
