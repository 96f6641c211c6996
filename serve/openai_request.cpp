#include "serve/openai_request.h"

#include <atomic>
#include <algorithm>
#include <cmath>
#include <random>
#include <limits>

#include <nlohmann/json.hpp>

#include "chat/chat_conversation.h"
#include "chat/chat_tokens.h"

namespace kvscope::serve {
namespace {

using nlohmann::json;

json parse_body(const std::string& body) {
  if (body.empty()) throw ApiError(400, "the request body is empty; a JSON object is expected");
  json j;
  try {
    j = json::parse(body);  // rejects truncated JSON and invalid UTF-8 alike
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

// A field that is absent or null counts as not given (OpenAI clients send null for defaults).
const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& j, const char* name, bool def) {
  const json* v = field(j, name);
  if (!v) return def;
  if (!v->is_boolean()) throw ApiError(400, std::string("'") + name + "' must be a boolean", name);
  return v->get<bool>();
}

int64_t get_int(const json& j, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(j, name);
  if (!v) return def;
  int64_t x = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw ApiError(400, std::string("'") + name + "' is out of range", name);
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) && std::fabs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());  // 2.0 is an integer, as pydantic takes it
  } else {
    throw ApiError(400, std::string("'") + name + "' must be an integer", name);
  }
  if (x < lo || x > hi)
    throw ApiError(400,
                   std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                       ", got " + std::to_string(x),
                   name);
  return x;
}

double get_num(const json& j, const char* name, double def, double lo, double hi, bool lo_open = false) {
  const json* v = field(j, name);
  if (!v) return def;
  if (!v->is_number()) throw ApiError(400, std::string("'") + name + "' must be a number", name);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    throw ApiError(400,
                   std::string("'") + name + "' must be in " + (lo_open ? "(" : "[") + json(lo).dump() + ", " +
                       json(hi).dump() + "], got " + json(x).dump(),
                   name);
  }
  return x;
}

std::string check_model(const json& j, const ServedModel& m) {
  const json* v = field(j, "model");
  if (!v) return m.name;
  if (!v->is_string()) throw ApiError(400, "'model' must be a string", "model");
  const std::string name = v->get<std::string>();
  if (name == m.name) return name;
  for (const std::string& a : m.aliases)
    if (name == a) return m.name;
  throw ApiError(404, "The model `" + name + "` does not exist.", "model", "NotFoundError");
}

// Fields both endpoints share; max tokens and the context check come after the prompt.
void common_fields(const json& j, const ServedModel& m, ParsedRequest& r) {
  r.model = check_model(j, m);
  r.stream = get_bool(j, "stream", false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) throw ApiError(400, "'stream_options' must be an object", "stream_options");
    r.include_usage = get_bool(*so, "include_usage", false);
    if (!r.stream) throw ApiError(400, "'stream_options' is only allowed with 'stream': true", "stream_options");
  }
  SamplingParams& s = r.job.sampling;
  s.temperature = static_cast<float>(get_num(j, "temperature", 1.0, 0.0, 100.0));
  s.top_p = static_cast<float>(get_num(j, "top_p", 1.0, 0.0, 1.0, /*lo_open=*/true));
  const int64_t top_k = get_int(j, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  s.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // vLLM: -1 (or 0) is off
  s.min_p = static_cast<float>(get_num(j, "min_p", 0.0, 0.0, 1.0));
  s.repetition_penalty = static_cast<float>(get_num(j, "repetition_penalty", 1.0, 0.0, 100.0, /*lo_open=*/true));
  // No seed: a fresh one, so repeated sampled requests differ (OpenAI's and vLLM's behaviour);
  // the engine's own default (0) would make them all alike.
  if (field(j, "seed")) {
    s.seed = static_cast<uint64_t>(
        get_int(j, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  } else {
    static std::atomic<uint64_t> counter{std::random_device{}()};
    s.seed = counter.fetch_add(0x9e3779b97f4a7c15ull);
  }
  r.job.ignore_eos = get_bool(j, "ignore_eos", false);
  r.job.n = static_cast<int>(get_int(j, "n", 1, 1, m.max_n));
  if (const json* u = field(j, "user")) {
    if (!u->is_string() || u->get<std::string>().size() > 256)
      throw ApiError(400, "'user' must be a string of at most 256 bytes", "user");
    r.job.session = u->get<std::string>();
  }
  if (const json* st = field(j, "stop")) {
    auto add = [&](const json& x) {
      if (!x.is_string()) throw ApiError(400, "'stop' must be a string or an array of strings", "stop");
      const std::string s2 = x.get<std::string>();
      if (!s2.empty()) r.job.stop.push_back(s2);
    };
    if (st->is_array()) {
      if (st->size() > 16) throw ApiError(400, "'stop' takes at most 16 strings", "stop");
      for (const json& x : *st) add(x);
    } else {
      add(*st);
    }
  }
}

// A multi-megabyte prompt takes seconds to tokenize; when its length alone proves it cannot
// fit the context, it is refused at once (with a lower bound on its token count).
void check_text_fits(size_t bytes, const ServedModel& m, const char* param) {
  if (m.max_piece_bytes <= 0) return;
  const uint64_t at_least =
      (bytes + static_cast<uint64_t>(m.max_piece_bytes) - 1) / static_cast<uint64_t>(m.max_piece_bytes);
  if (at_least >= static_cast<uint64_t>(m.max_model_len))
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(m.max_model_len) +
                       " tokens. However, your request has at least " + std::to_string(at_least) + " input tokens (" +
                       std::to_string(bytes) + " bytes of text; no token is longer than " +
                       std::to_string(m.max_piece_bytes) + " bytes). Please reduce the length of the input.",
                   param);
}

void check_prompt_tokens(const std::vector<TokenId>& p, const ServedModel& m, const char* param) {
  if (p.empty()) throw ApiError(400, "the prompt is empty: at least one token is needed", param);
  for (TokenId t : p)
    if (t < 0 || t >= m.n_vocab)
      throw ApiError(
          400,
          "token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(m.n_vocab - 1) + ")",
          param);
}

// max_tokens against the context, with both lengths named as vLLM's message does.
void set_max_tokens(const json& j, const ServedModel& m, ParsedRequest& r, const char* name, int64_t def_when_absent) {
  const int64_t plen = static_cast<int64_t>(r.job.prompt.size());
  const char* what = r.chat ? "messages" : "prompt";
  if (plen >= m.max_model_len)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(m.max_model_len) +
                       " tokens. However, your request has " + std::to_string(plen) + " input tokens (in the " + what +
                       "). Please reduce the length of the input.",
                   r.chat ? "messages" : "prompt");
  const int64_t room = m.max_model_len - plen;
  const bool given = field(j, name) != nullptr;
  const int64_t mt = get_int(j, name, def_when_absent < 0 ? room : std::min(def_when_absent, room), 1,
                             std::numeric_limits<int64_t>::max());
  if (given && mt > room)
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(m.max_model_len) +
                       " tokens. However, you requested " + std::to_string(plen + mt) + " tokens (" +
                       std::to_string(plen) + " in the " + what + ", " + std::to_string(mt) +
                       " in the completion). Please reduce the length of the " + what + " or completion.",
                   name);
  r.job.max_tokens = static_cast<int32_t>(mt);
}

std::string message_content(const json& msg, size_t i) {
  const json* c = field(msg, "content");
  const std::string where = "messages[" + std::to_string(i) + "].content";
  if (!c) return "";
  if (c->is_string()) return c->get<std::string>();
  if (c->is_array()) {  // [{"type": "text", "text": "..."}]: the text parts, joined
    std::string out;
    for (const json& part : *c) {
      if (!part.is_object() || !field(part, "type") || !part["type"].is_string())
        throw ApiError(400, where + " parts must be objects with a 'type'", "messages");
      if (part["type"] != "text") throw ApiError(400, where + ": only text parts are supported", "messages");
      const json* t = field(part, "text");
      if (!t || !t->is_string()) throw ApiError(400, where + ": a text part needs a string 'text'", "messages");
      if (!out.empty()) out += "\n";
      out += t->get<std::string>();
    }
    return out;
  }
  throw ApiError(400, where + " must be a string or an array of text parts", "messages");
}

// vLLM's chat_template_kwargs: extra variables for the Jinja template (e.g. enable_thinking).
nlohmann::ordered_json template_kwargs(const json& j) {
  const json* kw = field(j, "chat_template_kwargs");
  if (!kw) return nullptr;
  if (!kw->is_object()) throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
  for (const char* own : {"messages", "add_generation_prompt"})
    if (kw->contains(own))
      throw ApiError(400, std::string("'chat_template_kwargs' must not set '") + own + "': the request sets it",
                     "chat_template_kwargs");
  // Parsed again in order: the template may print a dict argument, and Python's keeps its order.
  return nlohmann::ordered_json::parse(kw->dump());
}

// The messages as the model's chat template writes them, as the chat panel and `kvscope-cli
// chat` build a first turn: BOS when the vocabulary asks for it, then the rendered text with
// the user's text never parsed as special tokens. A template that raises is the client's 400.
std::vector<TokenId> chat_prompt(const json& j, const std::vector<ChatMessage>& chat, const ServedModel& m) {
  const Tokenizer& tok = *m.tokenizer;
  const bool gen = get_bool(j, "add_generation_prompt", true);
  const nlohmann::ordered_json kwargs = template_kwargs(j);
  std::vector<TokenId> prompt;
  try {
    if (m.chat_template.uses_jinja())
      return tokenize_chat_rendered(tok, m.chat_template, render_chat_jinja(m.chat_template, tok, chat, gen, kwargs));
    if (tok.add_bos() && tok.bos() >= 0) prompt.push_back(tok.bos());
    const std::vector<TokenId> ids = tokenize_chat_pieces(tok, render_chat(m.chat_template.kind, chat, gen), -1);
    prompt.insert(prompt.end(), ids.begin(), ids.end());
  } catch (const ChatTemplateError& e) { throw ApiError(400, std::string("messages: ") + e.what(), "messages"); }
  return prompt;
}

}  // namespace

int32_t longest_piece_bytes(const Tokenizer& tok) {
  size_t longest = 0;
  for (TokenId id = 0; id < tok.n_vocab(); ++id)
    longest = std::max(longest, tok.token_to_piece(id, /*special=*/true).size());
  return static_cast<int32_t>(longest);
}

ParsedRequest parse_completion_request(const std::string& body, const ServedModel& m) {
  const json j = parse_body(body);
  ParsedRequest r;
  common_fields(j, m, r);
  const json* p = field(j, "prompt");
  if (!p) throw ApiError(400, "'prompt' is required", "prompt");
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1)
      throw ApiError(400, "'prompt': one prompt per request (batched prompts are not supported)", "prompt");
    one = &p->front();
  }
  if (one->is_string()) {
    check_text_fits(one->get_ref<const std::string&>().size(), m, "prompt");
    r.job.prompt = m.tokenizer->encode(one->get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
  } else if (one->is_array()) {
    for (const json& t : *one) {
      if (!t.is_number_integer()) throw ApiError(400, "'prompt' must be a string or an array of token ids", "prompt");
      const int64_t v = t.get<int64_t>();
      if (v < 0 || v > std::numeric_limits<int32_t>::max())
        throw ApiError(
            400,
            "token id " + std::to_string(v) + " is outside the vocabulary (0.." + std::to_string(m.n_vocab - 1) + ")",
            "prompt");
      r.job.prompt.push_back(static_cast<TokenId>(v));
    }
  } else {
    throw ApiError(400, "'prompt' must be a string or an array of token ids", "prompt");
  }
  check_prompt_tokens(r.job.prompt, m, "prompt");
  set_max_tokens(j, m, r, "max_tokens", 16);  // OpenAI's and vLLM's default for completions
  if (const json* lp = field(j, "logprobs")) {
    (void)lp;
    r.job.logprobs = static_cast<int>(get_int(j, "logprobs", 0, 0, m.max_logprobs));
  }
  return r;
}

ParsedRequest parse_chat_request(const std::string& body, const ServedModel& m) {
  const json j = parse_body(body);
  ParsedRequest r;
  r.chat = true;
  common_fields(j, m, r);
  const json* msgs = field(j, "messages");
  if (!msgs) throw ApiError(400, "'messages' is required", "messages");
  if (!msgs->is_array() || msgs->empty()) throw ApiError(400, "'messages' must be a non-empty array", "messages");
  std::vector<ChatMessage> chat;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& msg = (*msgs)[i];
    if (!msg.is_object()) throw ApiError(400, "messages[" + std::to_string(i) + "] must be an object", "messages");
    const json* role = field(msg, "role");
    if (!role || !role->is_string())
      throw ApiError(400, "messages[" + std::to_string(i) + "].role must be a string", "messages");
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
    if (rs != "system" && rs != "user" && rs != "assistant")
      throw ApiError(400, "messages[" + std::to_string(i) + "].role '" + rs + "' is not one of system, user, assistant",
                     "messages");
    chat.push_back({rs, message_content(msg, i)});
  }
  size_t text_bytes = 0;
  for (const ChatMessage& c : chat) text_bytes += c.content.size();
  check_text_fits(text_bytes, m, "messages");
  r.job.prompt = chat_prompt(j, chat, m);
  r.job.stop_tokens = chat_stop_tokens(*m.tokenizer, m.chat_template);
  check_prompt_tokens(r.job.prompt, m, "messages");
  const char* mt_name = field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  set_max_tokens(j, m, r, mt_name, -1);  // chat default: the rest of the context
  if (get_bool(j, "logprobs", false))
    r.job.logprobs = static_cast<int>(get_int(j, "top_logprobs", 0, 0, m.max_logprobs));
  else if (field(j, "top_logprobs"))
    throw ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs");
  return r;
}

}  // namespace kvscope::serve
