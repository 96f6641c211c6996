// kvscope-cli chat-template: renders a conversation through a Jinja chat template (a file's or
// a GGUF's tokenizer.chat_template) exactly as transformers' apply_chat_template would, and
// prints the prompt as is (core/jinja/; docs/chat.md).
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "jinja/error.h"
#include "jinja/template.h"

namespace kvscope::cli {

namespace {

using ojson = nlohmann::ordered_json;

const char* kChatTemplateHelp =
    "kvscope-cli chat-template --template FILE | --model M  --messages FILE [--no-generation-prompt]\n"
    "  [--bos-token T] [--eos-token T] [--tools FILE] [--kwargs JSON] [--now YYYY-MM-DD[THH:MM[:SS]]]\n"
    "  Prints the prompt the template renders for the conversation (no newline added), as transformers'\n"
    "  apply_chat_template does: variables messages, tools, documents (null), add_generation_prompt,\n"
    "  bos_token and eos_token, plus the --kwargs object's keys (e.g. {\"enable_thinking\": false}).\n"
    "  --model: the GGUF's tokenizer.chat_template and its BOS/EOS token texts (options override them)\n"
    "  --messages: a JSON array of messages, or an object with \"messages\" (and \"tools\")\n"
    "  --now: the date strftime_now() formats (default: the local time)\n"
    "  A template error exits 1 with the template's message on stderr.\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ojson parse_json(const std::string& text, const std::string& what) {
  try {
    return ojson::parse(text);
  } catch (const std::exception& e) { throw UsageError(what + " is not JSON: " + e.what()); }
}

std::tm parse_now(const std::string& iso) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const int n = std::sscanf(iso.c_str(), "%d-%d-%d%*[T ]%d:%d:%d", &y, &mo, &d, &h, &mi, &s);
  if (n < 3 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
    throw UsageError("--now '" + iso + "' is not a date (YYYY-MM-DD[THH:MM[:SS]])");
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  const std::time_t t = timegm(&tm);  // fills in the weekday and the day of the year
  gmtime_r(&t, &tm);
  return tm;
}

std::string token_text(const GgufFile& f, const char* id_key) {
  const auto id = f.get_int(id_key);
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (!id || !tokens || tokens->type != GgufValueType::ARRAY || *id < 0 ||
      static_cast<size_t>(*id) >= tokens->arr.size())
    return "";
  return tokens->arr[static_cast<size_t>(*id)].as_string();
}

// The template and the special tokens a GGUF carries.
void read_model(const std::string& path, std::string& source, ojson& vars) {
  const auto f = GgufFile::open(path);
  const auto tmpl = f->get_string("tokenizer.chat_template");
  if (!tmpl) throw std::runtime_error(path + " has no tokenizer.chat_template");
  source = *tmpl;
  if (auto bos = token_text(*f, "tokenizer.ggml.bos_token_id"); !bos.empty()) vars["bos_token"] = bos;
  if (auto eos = token_text(*f, "tokenizer.ggml.eos_token_id"); !eos.empty()) vars["eos_token"] = eos;
}

}  // namespace

int cmd_chat_template(int argc, char** argv, int first) {
  const Args a(argc, argv, first, {"template", "model", "messages", "bos-token", "eos-token", "tools", "kwargs", "now"},
               {"no-generation-prompt", "help"});
  if (a.has("help") || !a.has("messages") || a.has("template") == a.has("model")) {
    (a.has("help") ? std::cout : std::cerr) << kChatTemplateHelp;
    return a.has("help") ? 0 : 2;
  }
  ojson vars = ojson::object();
  std::string source;
  if (a.has("model"))
    read_model(a.str("model"), source, vars);
  else
    source = read_file(a.str("template"));
  const ojson input = parse_json(read_file(a.str("messages")), "--messages");
  ojson messages = input.is_object() ? input.value("messages", ojson::array()) : input;
  if (!messages.is_array()) throw UsageError("--messages must hold a JSON array of messages");
  ojson tools = input.is_object() && input.contains("tools") ? input["tools"] : ojson();
  if (a.has("tools")) tools = parse_json(read_file(a.str("tools")), "--tools");
  vars["messages"] = messages;
  vars["tools"] = tools;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = !a.has("no-generation-prompt");
  if (a.has("bos-token")) vars["bos_token"] = a.str("bos-token");
  if (a.has("eos-token")) vars["eos_token"] = a.str("eos-token");
  if (a.has("kwargs")) {
    const ojson extra = parse_json(a.str("kwargs"), "--kwargs");
    if (!extra.is_object()) throw UsageError("--kwargs must be a JSON object");
    for (const auto& [k, v] : extra.items()) vars[k] = v;
  }
  jinja::RenderOptions opt;
  if (a.has("now")) opt.now = parse_now(a.str("now"));
  try {
    const std::string prompt = jinja::render(source, vars, opt);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  } catch (const jinja::Error& e) {
    std::cerr << "kvscope-cli chat-template: template error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kvscope::cli
