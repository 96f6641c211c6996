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

using ojson = nlohmann::ordered_json;

// A field that is absent or null counts as not given (OpenAI clients send null for defaults).
template <class J>
const J* field(const J& j, const char* name) {
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

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}, added to the logits before sampling.
void logit_bias(const json& j, const ServedModel& m, SamplingParams& s) {
  const json* lb = field(j, "logit_bias");
  if (!lb) return;
  if (!lb->is_object()) throw ApiError(400, "'logit_bias' must be an object of token ids to biases", "logit_bias");
  if (lb->size() > 1024) throw ApiError(400, "'logit_bias' takes at most 1024 tokens", "logit_bias");
  for (const auto& [key, v] : lb->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) { used = 0; }
    if (used == 0 || used != key.size() || id < 0 || id >= m.n_vocab)
      throw ApiError(400,
                     "'logit_bias' key '" + key.substr(0, 40) + "' is not a token id of the vocabulary (0.." +
                         std::to_string(m.n_vocab - 1) + ")",
                     "logit_bias");
    if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 100)
      throw ApiError(400, "'logit_bias' values must be numbers between -100 and 100", "logit_bias");
    s.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
  }
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
  logit_bias(j, m, s);
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

std::string message_content(const ojson& msg, const std::string& at) {
  const ojson* c = field(msg, "content");
  const std::string where = at + ".content";
  if (!c) return "";
  if (c->is_string()) return c->get<std::string>();
  if (c->is_array()) {  // [{"type": "text", "text": "..."}]: the text parts, joined
    std::string out;
    for (const ojson& part : *c) {
      if (!part.is_object() || !field(part, "type") || !part["type"].is_string())
        throw ApiError(400, where + " parts must be objects with a 'type'", "messages");
      if (part["type"] != "text") throw ApiError(400, where + ": only text parts are supported", "messages");
      const ojson* t = field(part, "text");
      if (!t || !t->is_string()) throw ApiError(400, where + ": a text part needs a string 'text'", "messages");
      if (!out.empty()) out += "\n";
      out += t->get<std::string>();
    }
    return out;
  }
  throw ApiError(400, where + " must be a string or an array of text parts", "messages");
}

// A tool call's arguments as the template gets them: vLLM parses the JSON string clients send
// into an object (transformers' templates expect one); absent or "" is {}.
ojson tool_arguments(const ojson* args, const std::string& where) {
  if (!args || (args->is_string() && args->get_ref<const std::string&>().empty())) return ojson::object();
  if (args->is_object()) return *args;
  if (!args->is_string()) throw ApiError(400, where + " must be a JSON string or an object", "messages");
  try {
    return ojson::parse(args->get<std::string>());
  } catch (const ojson::parse_error&) {
    throw ApiError(400, where + " is not valid JSON: " + args->get<std::string>().substr(0, 80), "messages");
  }
}

// An assistant's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
ojson tool_calls(const ojson& calls, const std::string& at) {
  if (!calls.is_array()) throw ApiError(400, at + ".tool_calls must be an array", "messages");
  ojson out = ojson::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string where = at + ".tool_calls[" + std::to_string(k) + "]";
    const ojson& c = calls[k];
    const ojson* fn = c.is_object() ? field(c, "function") : nullptr;
    if (!fn || !fn->is_object()) throw ApiError(400, where + " must be an object with a 'function' object", "messages");
    const ojson* name = field(*fn, "name");
    if (!name || !name->is_string()) throw ApiError(400, where + ".function.name must be a string", "messages");
    for (const char* f : {"id", "type"})
      if (const ojson* v = field(c, f); v && !v->is_string())
        throw ApiError(400, where + "." + f + " must be a string", "messages");
    ojson call = c;
    call["function"]["arguments"] = tool_arguments(field(*fn, "arguments"), where + ".function.arguments");
    out.push_back(std::move(call));
  }
  return out;
}

const ojson* string_field(const ojson& msg, const char* name, const std::string& at) {
  const ojson* v = field(msg, name);
  if (v && !v->is_string()) throw ApiError(400, at + "." + name + " must be a string", "messages");
  return v;
}

// One message as the template sees it (vLLM's parse_chat_messages): role and content; an
// assistant's reasoning (`reasoning`, or the older `reasoning_content`) and tool_calls; a tool
// message's tool_call_id; any message's name.
ChatMessage parse_message(const ojson& msg, size_t i) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!msg.is_object()) throw ApiError(400, at + " must be an object", "messages");
  const ojson* role = field(msg, "role");
  if (!role || !role->is_string()) throw ApiError(400, at + ".role must be a string", "messages");
  std::string rs = role->get<std::string>();
  if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
  if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
    throw ApiError(400, at + ".role '" + rs.substr(0, 40) + "' is not one of system, user, assistant, tool",
                   "messages");
  ChatMessage m(rs, message_content(msg, at));
  m.fields = ojson::object();
  if (const ojson* name = string_field(msg, "name", at)) m.fields["name"] = *name;
  if (rs == "assistant") {
    const ojson* r = string_field(msg, "reasoning", at);
    const ojson* rc = string_field(msg, "reasoning_content", at);
    if (r && !r->get_ref<const std::string&>().empty())
      m.reasoning = r->get<std::string>();
    else if (rc)
      m.reasoning = rc->get<std::string>();
    else if (r)
      m.reasoning = "";
    if (const ojson* calls = field(msg, "tool_calls")) m.fields["tool_calls"] = tool_calls(*calls, at);
  } else if (rs == "tool") {
    if (const ojson* id = string_field(msg, "tool_call_id", at)) m.fields["tool_call_id"] = *id;
  }
  return m;
}

// The request's tools, as given, for the template's `tools` variable: function definitions.
ojson request_tools(const ojson& j) {
  const ojson* tools = field(j, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) throw ApiError(400, "'tools' must be an array", "tools");
  for (size_t k = 0; k < tools->size(); ++k) {
    const ojson& t = (*tools)[k];
    const ojson* fn = t.is_object() ? field(t, "function") : nullptr;
    const ojson* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string() || !t.contains("type") || t["type"] != "function")
      throw ApiError(400,
                     "tools[" + std::to_string(k) + "] must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                     "tools");
  }
  return *tools;
}

// The body again with its objects' keys in the order the client wrote them (the first parse
// sorts them), so that a template printing tools or tool-call arguments with tojson prints them
// as Python would. Ordered objects look keys up one by one, so a hostile body with very many keys
// would take quadratic time: past 64 KiB the sorted parse is used as it is.
ojson in_client_order(const std::string& body, const json& sorted) {
  if (body.size() > 64 * 1024) return ojson(sorted);
  return ojson::parse(body);
}

// vLLM's chat_template_kwargs: extra variables for the Jinja template (e.g. enable_thinking).
ojson template_kwargs(const ojson& j) {
  const ojson* kw = field(j, "chat_template_kwargs");
  if (!kw) return nullptr;
  if (!kw->is_object()) throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
  for (const char* own : {"messages", "add_generation_prompt"})
    if (kw->contains(own))
      throw ApiError(400, std::string("'chat_template_kwargs' must not set '") + own + "': the request sets it",
                     "chat_template_kwargs");
  return *kw;
}

struct ChatPrompt {
  std::vector<TokenId> tokens;
  std::string text;  // as the Jinja template rendered it ("" for a built-in family)
};

// What a built-in family cannot write: it would drop them without a word.
void check_builtin_can_write(const std::vector<ChatMessage>& chat, const ojson& tools, const ServedModel& m) {
  bool tool_use = !tools.is_null();
  for (const ChatMessage& c : chat)
    tool_use = tool_use || c.role == "tool" || (c.fields.is_object() && c.fields.contains("tool_calls"));
  if (tool_use)
    throw ApiError(400,
                   std::string("the model's chat is written by the built-in ") +
                       chat_template_name(m.chat_template.kind) +
                       " template, which has no tool calls; tools, tool_calls and tool messages need a Jinja template "
                       "(serve --chat-template FILE)",
                   "messages");
}

// The messages as the model's chat template writes them, as the chat panel and `kvscope-cli
// chat` build a first turn: BOS when the vocabulary asks for it, then the rendered text with
// the user's text never parsed as special tokens. A template that raises is the client's 400.
ChatPrompt chat_prompt(const json& j, const ojson& oj, const std::vector<ChatMessage>& chat, const ServedModel& m) {
  const Tokenizer& tok = *m.tokenizer;
  const bool gen = get_bool(j, "add_generation_prompt", true);
  ojson vars = template_kwargs(oj);
  const ojson tools = request_tools(oj);
  ChatPrompt p;
  try {
    if (m.chat_template.uses_jinja()) {
      if (!tools.is_null()) {
        if (!vars.is_object()) vars = ojson::object();
        vars["tools"] = tools;  // the request's field wins over a kwarg of the same name
      }
      const ChatRendered r = render_chat_jinja(m.chat_template, tok, chat, gen, vars);
      p.tokens = tokenize_chat_rendered(tok, m.chat_template, r);
      p.text = r.text;
      return p;
    }
    check_builtin_can_write(chat, tools, m);
    if (tok.add_bos() && tok.bos() >= 0) p.tokens.push_back(tok.bos());
    const std::vector<TokenId> ids = tokenize_chat_pieces(tok, render_chat(m.chat_template.kind, chat, gen), -1);
    p.tokens.insert(p.tokens.end(), ids.begin(), ids.end());
  } catch (const ChatTemplateError& e) { throw ApiError(400, std::string("messages: ") + e.what(), "messages"); }
  return p;
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
  const ojson oj = in_client_order(body, j);
  const ojson& omsgs = oj["messages"];
  std::vector<ChatMessage> chat;
  size_t text_bytes = 0;
  for (size_t i = 0; i < omsgs.size(); ++i) {
    chat.push_back(parse_message(omsgs[i], i));
    text_bytes += chat.back().content.size() + chat.back().reasoning.value_or("").size();
  }
  check_text_fits(text_bytes, m, "messages");
  const ChatPrompt prompt = chat_prompt(j, oj, chat, m);
  r.job.prompt = prompt.tokens;
  // How the reply splits into reasoning and content: the model's format, and whether the
  // prompt's tail already opened the thinking block.
  r.job.reasoning = {m.chat_template.reasoning, reply_start(m.chat_template.reasoning, prompt.text)};
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
