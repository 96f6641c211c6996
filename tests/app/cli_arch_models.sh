#!/bin/sh
# make-model --arch writes each 2025-26 family; inspect reads it back (experts, and the KV per
# token that does not depend on them); plan on the file says the same; generate runs on it;
# the golden-archs fixture with llama.cpp's test vocabulary loads and generates by text too.
set -eu
cli=$1
shared=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

kv_f16() { "$cli" inspect "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["kv_bytes_per_token"]["f16"])'; }

for arch in qwen3moe glm4moe mistral3 phi3 glm4 smollm3 gpt-oss deepseek2 qwen35 qwen35moe granitehybrid; do
  "$cli" make-model --out "$dir/$arch.gguf" --arch "$arch" --n-layer 4 2> /dev/null || fail "make-model --arch $arch"
  "$cli" generate --model "$dir/$arch.gguf" --prompt "hello" --n-predict 4 --json > "$dir/$arch.json" 2> /dev/null \
    || fail "generate on $arch"
done
# The same attention with 4 or 16 experts: the same KV per token, and inspect says why.
"$cli" make-model --out "$dir/moe4.gguf" --arch qwen3moe --n-expert 4 --n-expert-used 2 2> /dev/null
"$cli" make-model --out "$dir/moe16.gguf" --arch qwen3moe --n-expert 16 --n-expert-used 4 2> /dev/null
[ "$(kv_f16 "$dir/moe4.gguf")" = "$(kv_f16 "$dir/moe16.gguf")" ] || fail "KV per token changed with the experts"
"$cli" inspect "$dir/moe16.gguf" | grep -q "mixture of experts: 16 experts, 4 per token" || fail "inspect: no MoE line"
"$cli" plan --model "$dir/moe16.gguf" --context 1024 | grep -q "MoE: 16 experts, 4 per token" || fail "plan: no MoE line"
"$cli" make-model --out "$dir/bad.gguf" --arch qwen3moe --n-expert 4 --n-expert-used 5 2> "$dir/err" \
  && fail "make-model accepted 5 of 4 experts"
grep -q "n-expert-used" "$dir/err" || fail "make-model error does not name the option"
# Latent attention: one row of kv_lora_rank + RoPE values per token and layer (f16: x 2 B), the
# same whatever the head count; inspect and plan give that formula; 4-bit KV is refused by name.
"$cli" make-model --out "$dir/mla8.gguf" --arch deepseek2 --n-head 8 --kv-lora-rank 64 --rope-dim 16 2> /dev/null
[ "$(kv_f16 "$dir/mla8.gguf")" = "$((2 * (64 + 16) * 2))" ] || fail "latent KV per token is not 2 layers x 80 x 2 B"
"$cli" make-model --out "$dir/mla4.gguf" --arch deepseek2 --n-head 4 --kv-lora-rank 64 --rope-dim 16 2> /dev/null
[ "$(kv_f16 "$dir/mla8.gguf")" = "$(kv_f16 "$dir/mla4.gguf")" ] || fail "latent KV per token changed with the heads"
"$cli" inspect "$dir/mla8.gguf" | grep -q "1 latent row of (64 latent + 16 RoPE key)" || fail "inspect: no latent line"
"$cli" plan --model "$dir/mla8.gguf" --context 1024 | grep -q "64 latent + 16 RoPE key" || fail "plan: no latent formula"
"$cli" generate --model "$dir/mla8.gguf" --prompt "hello" --n-predict 4 --kv-dtype kivi4 > /dev/null 2> "$dir/err" \
  && fail "a latent cache accepted kivi4"
grep -q "latent KV cache" "$dir/err" || fail "the kivi4 refusal does not say why"
# Qwen3.5: 3 Gated DeltaNet layers hold a fixed state, 1 gated attention layer keeps KV.
"$cli" inspect "$dir/qwen35.gguf" | grep -q "delta-rule state" || fail "inspect: no Gated DeltaNet state line"
[ "$(kv_f16 "$dir/qwen35.gguf")" = "$((2 * 1 * 2 * 64 * 2))" ] || fail "qwen35 KV per token is not 1 layer's"
# The state slots in bf16 run; a dtype it does not offer is refused by name.
"$cli" generate --model "$dir/qwen35.gguf" --prompt "hello" --n-predict 2 --state-dtype bf16 > /dev/null 2>&1 \
  || fail "generate --state-dtype bf16"
"$cli" generate --model "$dir/qwen35.gguf" --prompt "hello" --n-predict 2 --state-dtype int8 > /dev/null 2> "$dir/err" \
  && fail "--state-dtype int8 accepted"
grep -q "state-dtype 'int8' is not one of f32, f16, bf16" "$dir/err" || fail "the --state-dtype refusal does not say why"
# Prefix caching on qwen35 through state checkpoints: the shared system prompt is hit, run's JSON
# says how many checkpoints were taken; a bad policy is refused with the choices.
"$cli" run --workload "$(dirname "$0")/../../resources/scenarios/shared-system-prompt.json" --model "$dir/qwen35.gguf" \
  --state-checkpoints prompt-end --json-out "$dir/run.json" --quiet > /dev/null 2>&1 || fail "run on qwen35"
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["paged"]; c=p["state_checkpoints"]
assert p["prefix_cache_hits_tokens"] > 0 and c["policy"] == "prompt-end" and c["saved"] > 0 and c["restored"] >= 14, (p["prefix_cache_hits_tokens"], c)' \
  "$dir/run.json" || fail "run on qwen35: no prefix hits through state checkpoints"
"$cli" generate --model "$dir/qwen35.gguf" --prompt "hello" --n-predict 2 --state-checkpoints every:0 > /dev/null 2> "$dir/err" \
  && fail "--state-checkpoints every:0 accepted"
grep -q "every:N (N >= 1 blocks)" "$dir/err" || fail "the --state-checkpoints refusal does not say why"
# Granite 4.0-H: its Mamba-2 layers hold a fixed state.
"$cli" inspect "$dir/granitehybrid.gguf" | grep -q "Mamba-2 state" || fail "inspect: no Mamba-2 state line"
# tokenize: BOS as the vocabulary says, "<s>" left as text unless --parse-special, bad usage exits 2.
"$cli" tokenize --model "$dir/mla8.gguf" --text "hi <s>" --json > "$dir/tok.json" || fail "tokenize"
python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tokens"]; assert t[0]==1 and t.count(1)==1, t' "$dir/tok.json" \
  || fail "tokenize: BOS once, <s> as text"
[ "$("$cli" tokenize --model "$dir/mla8.gguf" --text "hi <s>" --parse-special | awk '{print $NF}')" = 1 ] \
  || fail "tokenize --parse-special: <s> is not BOS"
rc=0
"$cli" tokenize --model "$dir/mla8.gguf" > /dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "tokenize without a text must exit 2, not $rc"
# llama.cpp's own fixture with its "test" vocabulary: loads, and text becomes its hashed ids.
model="$shared/golden/archs/models/qwen3moe-moe.gguf"
if [ -f "$model" ]; then
  "$cli" generate --model "$model" --prompt "hello world" --n-predict 3 > /dev/null 2>&1 || fail "generate on the fixture"
fi
echo "cli_arch_models: OK"
