#pragma once
// OpenAI request bodies (/v1/completions, /v1/chat/completions) -> a checked GenerationJob.
// Every problem is an ApiError naming the field (400; 404 for a model we do not serve), so a
// malformed or hostile body never reaches the engine. Unknown fields are ignored, as vLLM does.
#include <string>
#include <vector>

#include "chat/chat_template_choice.h"
#include "model/tokenizer.h"
#include "serve/api_error.h"
#include "serve/generation_job.h"

namespace kvscope::serve {

// What the parser needs to know about the served model.
struct ServedModel {
  std::string name;                  // the id clients pass as "model"
  std::vector<std::string> aliases;  // also accepted (e.g. the path given on the command line)
  const Tokenizer* tokenizer = nullptr;
  // How chat messages become a prompt: the model's Jinja template (chat_template_kwargs are its
  // extra variables), or a built-in family.
  ChatTemplateChoice chat_template;
  int32_t max_model_len = 2048;
  int32_t n_vocab = 0;
  int max_n = 16;  // most parallel samples one request may ask for
  int max_logprobs = 20;
  // The longest token's text in bytes (0: unknown): a text of B bytes is at least
  // B / max_piece_bytes tokens, so a prompt that cannot fit is refused before tokenizing it.
  int32_t max_piece_bytes = 0;
};

// The longest piece of a vocabulary, special tokens included (for ServedModel::max_piece_bytes).
int32_t longest_piece_bytes(const Tokenizer& tok);

struct ParsedRequest {
  GenerationJob job;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string model;           // as the response should name it
};

ParsedRequest parse_completion_request(const std::string& body, const ServedModel& m);
ParsedRequest parse_chat_request(const std::string& body, const ServedModel& m);

}  // namespace kvscope::serve
