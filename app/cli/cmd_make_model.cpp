// kvscope-cli make-model: write a synthetic random-weight GGUF of any supported shape and dtype.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
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
               {"out",
                "arch",
                "dtype",
                "n-vocab",
                "n-embd",
                "n-layer",
                "n-head",
                "n-head-kv",
                "head-dim",
                "n-ff",
                "ctx",
                "seed",
                "rope-base",
                "window",
                "swa-pattern",
                "n-expert",
                "n-expert-used",
                "n-ff-exp",
                "n-expert-shared",
                "n-dense-lead",
                "kv-lora-rank",
                "q-lora-rank",
                "rope-dim",
                "rope-scaling",
                "rope-factor",
                "rope-orig-ctx",
                "yarn-log-mul",
                "n-expert-group",
                "n-group-used",
                "chat-template",
                "special-tokens",
                "user-tokens",
                "head-dim-swa",
                "n-head-kv-swa",
                "n-kv-shared",
                "n-embd-per-layer",
                "softcap",
                "rope-partial",
                "rope-base-swa",
                "attn-interval",
                "ssm-state",
                "ssm-v-heads",
                "ssm-k-heads"},
               {"tied", "help", "preset-100m", "preset-moe-1b", "k-eq-v"});
  if (a.has("help") || !a.has("out")) {
    std::cout
        << "kvscope-cli make-model --out F.gguf [--arch ARCH] [--dtype f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k]\n"
           "  ARCH: llama qwen2 qwen3 gemma3 qwen3moe glm4moe mistral3 phi3 glm4 smollm3 gpt-oss\n"
           "    deepseek2 gemma4 lfm2 qwen35 qwen35moe granitehybrid\n"
           "  [--n-vocab 512 --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --head-dim 0 --n-ff 768 --ctx 4096]\n"
           "  [--n-expert 8 --n-expert-used 2 --n-ff-exp 0 (n-ff / n-expert-used)]  qwen3moe, glm4moe, mistral3, gpt-oss,\n"
           "    deepseek2\n"
           "  [--n-expert-shared 1 --n-dense-lead 1]  glm4moe, deepseek2\n"
           "  [--kv-lora-rank 128 --q-lora-rank 96 (0: one attn_q) --rope-dim 32]  deepseek2 (latent attention)\n"
           "  [--n-expert-group 0 --n-group-used 0]  grouped expert routing (DeepSeek-V3: 8 and 4)\n"
           "  [--head-dim-swa (head-dim / 2) --n-head-kv-swa (n-head-kv) --n-kv-shared 0 --n-embd-per-layer 0\n"
           "   --softcap 0 --rope-partial 1 --rope-base-swa 10000 --k-eq-v]  gemma4 (--head-dim, --n-head-kv: its\n"
           "   full layers; --swa-pattern, --window as gemma3)\n"
           "  [--attn-interval 4 --ssm-state 32 --ssm-v-heads 4 --ssm-k-heads 2 --rope-dim (head-dim)]  qwen35 (Gated\n"
           "   DeltaNet layers, every attn-interval-th layer gated attention, RoPE on rope-dim dims of a head)\n"
           "  [--swa-pattern 3 --ssm-state 32 --ssm-v-heads 4 --ssm-k-heads 2]  granitehybrid (Mamba-2 layers of\n"
           "   2 x n-embd with ssm-v-heads heads in ssm-k-heads groups, every swa-pattern-th layer attention)\n"
           "  [--rope-scaling linear|yarn --rope-factor 1 --rope-orig-ctx 0 --yarn-log-mul 0 (deepseek2)]\n"
           "  [--seed 1] [--tied] [--preset-100m: a ~110M-parameter llama (768 wide, 12 layers, 32000 vocab)]\n"
           "  [--preset-moe-1b: a qwen3moe of ~1.1B parameters, ~0.2B active (32 experts, 4 per token)]\n"
           "  [--special-tokens '<|im_start|>,<|im_end|>': control tokens on the last ids]\n"
           "  [--user-tokens '<think>,</think>': user-defined tokens (printed as text) on the ids before them]\n"
           "  [--chat-template FILE: written as tokenizer.chat_template]\n";
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
  if (a.has("preset-moe-1b")) {
    // 1024 wide, 16 layers, 32 experts of 512 with 4 routed: 16 x 32 x 3 x 1024 x 512 = 0.81B expert
    // parameters (0.10B of them active), plus attention and embeddings.
    s.arch = "qwen3moe";
    s.n_vocab = 32000;
    s.n_embd = 1024;
    s.n_layer = 16;
    s.n_head = 16;
    s.n_head_kv = 4;
    s.head_dim = 64;
    s.n_ff = 2048;
    s.n_expert = 32;
    s.n_expert_used = 4;
    s.n_ff_exp = 512;
  }
  s.arch = a.str("arch", s.arch);
  if ((s.arch == "qwen3moe" || s.arch == "glm4moe" || s.arch == "gpt-oss" || s.arch == "deepseek2" ||
       s.arch == "qwen35moe") &&
      s.n_expert == 0) {
    s.n_expert = 8;
    s.n_expert_used = 2;
  }
  s.n_expert = static_cast<int32_t>(a.i64("n-expert", s.n_expert));
  s.n_expert_used = static_cast<int32_t>(a.i64("n-expert-used", s.n_expert_used));
  s.n_ff_exp = static_cast<int32_t>(a.i64("n-ff-exp", s.n_ff_exp));
  s.n_expert_shared = static_cast<int32_t>(a.i64("n-expert-shared", s.n_expert_shared));
  s.n_dense_lead = static_cast<int32_t>(a.i64("n-dense-lead", s.n_dense_lead));
  s.kv_lora_rank = static_cast<int32_t>(a.i64("kv-lora-rank", s.kv_lora_rank));
  s.q_lora_rank = static_cast<int32_t>(a.i64("q-lora-rank", s.q_lora_rank));
  if (s.arch == "qwen35" || s.arch == "qwen35moe")
    s.rope_dim = static_cast<int32_t>(a.i64("rope-dim", 0));
  else
    s.mla_rope = static_cast<int32_t>(a.i64("rope-dim", s.mla_rope));
  s.full_attention_interval = static_cast<int32_t>(a.i64("attn-interval", s.full_attention_interval));
  s.ssm_state = static_cast<int32_t>(a.i64("ssm-state", s.ssm_state));
  s.ssm_v_heads = static_cast<int32_t>(a.i64("ssm-v-heads", s.ssm_v_heads));
  s.ssm_k_heads = static_cast<int32_t>(a.i64("ssm-k-heads", s.ssm_k_heads));
  s.n_expert_group = static_cast<int32_t>(a.i64("n-expert-group", s.n_expert_group));
  s.n_group_used = static_cast<int32_t>(a.i64("n-group-used", s.n_group_used));
  s.rope_scaling = a.str("rope-scaling", "");
  if (!s.rope_scaling.empty() && s.rope_scaling != "linear" && s.rope_scaling != "yarn")
    throw UsageError("--rope-scaling '" + s.rope_scaling + "' is not linear or yarn");
  s.rope_factor = static_cast<float>(a.f64("rope-factor", s.rope_factor));
  s.rope_orig_ctx = static_cast<int32_t>(a.i64("rope-orig-ctx", s.rope_orig_ctx));
  s.yarn_log_mul = static_cast<float>(a.f64("yarn-log-mul", s.yarn_log_mul));
  s.dtype = parse_dtype(a.str("dtype", "f32"));
  s.n_vocab = static_cast<int32_t>(a.i64("n-vocab", s.n_vocab));
  s.n_embd = static_cast<int32_t>(a.i64("n-embd", s.n_embd));
  s.n_layer = static_cast<int32_t>(a.i64("n-layer", s.n_layer));
  s.n_head = static_cast<int32_t>(a.i64("n-head", s.n_head));
  s.n_head_kv = static_cast<int32_t>(a.i64("n-head-kv", s.n_head_kv));
  s.head_dim = static_cast<int32_t>(a.i64("head-dim", s.head_dim));
  s.n_ff = static_cast<int32_t>(a.i64("n-ff", s.n_ff));
  s.n_ctx = static_cast<int32_t>(a.i64("ctx", s.n_ctx));
  s.seed = static_cast<uint64_t>(a.i64("seed", 1));
  s.rope_base = static_cast<float>(a.f64("rope-base", s.rope_base));
  s.sliding_window = static_cast<int32_t>(a.i64("window", s.sliding_window));
  s.swa_pattern = static_cast<int32_t>(a.i64("swa-pattern", s.swa_pattern));
  s.tied_output = a.has("tied");
  const int32_t hd = s.head_dim > 0 ? s.head_dim : s.n_embd / std::max(1, s.n_head);
  s.head_dim_swa = static_cast<int32_t>(a.i64("head-dim-swa", hd / 2));
  s.n_head_kv_swa = static_cast<int32_t>(a.i64("n-head-kv-swa", s.n_head_kv));
  s.n_kv_shared = static_cast<int32_t>(a.i64("n-kv-shared", 0));
  s.n_embd_per_layer = static_cast<int32_t>(a.i64("n-embd-per-layer", 0));
  s.final_softcap = static_cast<float>(a.f64("softcap", 0.0));
  s.rope_partial_full = static_cast<float>(a.f64("rope-partial", 1.0));
  s.rope_base_swa = static_cast<float>(a.f64("rope-base-swa", 10000.0));
  s.k_eq_v = a.has("k-eq-v");
  if (a.has("chat-template")) {
    std::ifstream in(a.str("chat-template"), std::ios::binary);
    if (!in) throw UsageError("cannot read --chat-template " + a.str("chat-template"));
    std::stringstream ss;
    ss << in.rdbuf();
    s.chat_template = ss.str();
  }
  for (const char* opt : {"special-tokens", "user-tokens"})
    for (std::string list = a.str(opt); !list.empty();) {
      const size_t comma = list.find(',');
      (opt[0] == 's' ? s.special_tokens : s.user_tokens).push_back(list.substr(0, comma));
      list = comma == std::string::npos ? "" : list.substr(comma + 1);
    }
  write_synthetic_model(s, a.str("out"));
  std::cerr << "wrote " << a.str("out") << " (" << s.arch << ", " << ggml_type_name(static_cast<uint32_t>(s.dtype))
            << ", RANDOM WEIGHTS)\n";
  return 0;
}

}  // namespace kvscope::cli
