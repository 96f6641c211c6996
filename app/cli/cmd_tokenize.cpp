// kvscope-cli tokenize: a text through a GGUF's own tokenizer (any GGUF with tokenizer.ggml.*,
// a vocabulary-only file too), printed as ids. The defaults are llama.cpp's for a prompt:
// special tokens added as the vocabulary says (BOS), special-token text left as text.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "model/pretokenizer.h"
#include "model/tokenizer.h"

namespace kvscope::cli {

int cmd_tokenize(int argc, char** argv, int first) {
  const Args a(argc, argv, first, {"model", "text-file", "text"},
               {"json", "jsonl", "no-add-special", "parse-special", "pieces", "help"});
  if (a.has("help") || !a.has("model") || (a.has("text-file") == a.has("text"))) {
    std::cerr
        << "kvscope-cli tokenize --model M (--text-file F | --text T) [--json] [--no-add-special] "
           "[--parse-special] [--pieces]\n"
           "  The text's token ids under the model's own tokenizer: {\"tokens\": [...]} with --json, else one\n"
           "  line of ids. As llama.cpp tokenizes a prompt: BOS (and EOS) added when the vocabulary says so\n"
           "  (--no-add-special: never), text that spells a special token stays text (--parse-special: it\n"
           "  becomes that token). The file is read as bytes, unchanged. --jsonl: the file holds one JSON\n"
           "  string per line, and each gets its own {\"tokens\": [...]} line (many texts, one model load).\n"
           "  --pieces: also the pre-tokenizer's words, {\"tokens\": [...], \"pieces\": [...]} (byte-level BPE).\n";
    return a.has("help") ? 0 : 2;
  }
  std::string text = a.str("text", "");
  if (a.has("text-file")) {
    std::ifstream f(a.str("text-file"), std::ios::binary);
    if (!f) throw UsageError("cannot read --text-file '" + a.str("text-file") + "'");
    std::ostringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  const auto file = GgufFile::open(a.str("model"));
  const auto tok = Tokenizer::from_gguf(*file);
  std::unique_ptr<PreTokenizer> pre;
  if (a.has("pieces")) {
    if (tok->model_name() != "gpt2")
      throw UsageError("--pieces: only byte-level BPE vocabularies (tokenizer.ggml.model gpt2) have a pre-tokenizer");
    pre = std::make_unique<PreTokenizer>(tok->pre_name());
  }
  auto result = [&](const std::string& t) {
    nlohmann::json j{{"tokens", tok->encode(t, !a.has("no-add-special"), a.has("parse-special"))}};
    if (pre) j["pieces"] = pre->split(t);
    return j;
  };
  if (a.has("jsonl")) {
    std::istringstream lines(text);
    int n = 0;
    for (std::string line; std::getline(lines, line);) {
      ++n;
      if (line.empty()) continue;
      const nlohmann::json s = nlohmann::json::parse(line, nullptr, false);
      if (!s.is_string()) throw UsageError("--jsonl: line " + std::to_string(n) + " is not a JSON string");
      std::cout << result(s.get<std::string>()).dump() << "\n";
    }
    return 0;
  }
  if (a.has("json") || pre) {
    std::cout << result(text).dump() << "\n";
    return 0;
  }
  const std::vector<TokenId> ids = tok->encode(text, !a.has("no-add-special"), a.has("parse-special"));
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
  return 0;
}

}  // namespace kvscope::cli
