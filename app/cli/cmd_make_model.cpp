// kvscope-cli make-model: write a synthetic random-weight GGUF of any supported shape and dtype.
#include <iostream>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "gguf/ggml_types.h"
#include "model/synthetic_model.h"

namespace kvscope::cli {

static GgmlType parse_dtype(const std::string& s) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                     GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    std::string name = ggml_type_name(static_cast<uint32_t>(t));
    for (auto& ch : name) ch = static_cast<char>(std::tolower(ch));
    std::string want = s;
    for (auto& ch : want) ch = static_cast<char>(std::tolower(ch));
    if (name == want) return t;
  }
  throw UsageError("--dtype '" + s + "' is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
}

int cmd_make_model(int argc, char** argv, int first) {
  const Args a(argc, argv, first,
               {"out", "arch", "dtype", "n-vocab", "n-embd", "n-layer", "n-head", "n-head-kv", "head-dim", "n-ff",
                "ctx", "seed", "rope-base", "window", "swa-pattern"},
               {"tied", "help", "preset-100m"});
  if (a.has("help") || !a.has("out")) {
    std::cout
        << "kvscope-cli make-model --out F.gguf [--arch llama|qwen2|qwen3|gemma3] [--dtype f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k]\n"
           "  [--n-vocab 512 --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 0 --n-ff 768 --ctx 4096]\n"
           "  [--seed 1] [--tied] [--preset-100m: a ~110M-parameter llama (768 wide, 12 layers, 32000 vocab)]\n";
    return a.has("help") ? 0 : 2;
  }
  SyntheticSpec s;
  if (a.has("preset-100m")) {
    s.n_vocab = 32000;
    s.n_embd = 768;
    s.n_layer = 12;
    s.n_head = 12;
    s.n_head_kv = 12;
    s.n_ff = 2048;
    s.n_ctx = 4096;
  }
  s.arch = a.str("arch", s.arch);
  s.dtype = parse_dtype(a.str("dtype", "f32"));
  s.n_vocab = static_cast<int32_t>(a.i64("n-vocab", s.n_vocab));
  s.n_embd = static_cast<int32_t>(a.i64("n-embd", s.n_embd));
  s.n_layer = static_cast<int32_t>(a.i64("n-layer", s.n_layer));
  s.n_head = static_cast<int32_t>(a.i64("n-head", s.n_head));
  s.n_head_kv = static_cast<int32_t>(a.i64("n-head-kv", s.n_head_kv));
  s.head_dim = static_cast<int32_t>(a.i64("head-dim", 0));
  s.n_ff = static_cast<int32_t>(a.i64("n-ff", s.n_ff));
  s.n_ctx = static_cast<int32_t>(a.i64("ctx", s.n_ctx));
  s.seed = static_cast<uint64_t>(a.i64("seed", 1));
  s.rope_base = static_cast<float>(a.f64("rope-base", s.rope_base));
  s.sliding_window = static_cast<int32_t>(a.i64("window", s.sliding_window));
  s.swa_pattern = static_cast<int32_t>(a.i64("swa-pattern", s.swa_pattern));
  s.tied_output = a.has("tied");
  write_synthetic_model(s, a.str("out"));
  std::cerr << "wrote " << a.str("out") << " (" << s.arch << ", " << ggml_type_name(static_cast<uint32_t>(s.dtype))
            << ", RANDOM WEIGHTS)\n";
  return 0;
}

}  // namespace kvscope::cli
