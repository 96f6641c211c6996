#!/bin/sh
# `kvscope-cli chat` with a reasoning model: a synthetic model (random weights) whose vocabulary
# has <think> and </think> and whose file carries Qwen3.5's real template, which opens <think>
# in the generation prompt, so the whole reply is thinking (the random model never writes
# </think>). The thinking prints after "[thinking]", the turn's line counts its tokens and the
# KV blocks they fill; --hide-reasoning hides it, --reasoning-parser none turns the split off,
# an unknown parser name is a usage error. Usage: cli_chat_reasoning.sh KVSCOPE_CLI SOURCE_DIR
set -u
cli="$1" src="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="$tmp/out"
fail() { echo "FAIL: $*"; echo "----- output -----"; cat "$out"; exit 1; }

"$cli" make-model --out "$tmp/q35.gguf" --n-vocab 512 --n-embd 64 --n-layer 2 --n-head 2 --n-head-kv 1 --n-ff 128 \
  --special-tokens '<|endoftext|>,<|im_start|>,<|im_end|>' --user-tokens '<think>,</think>' \
  --chat-template "$src/tests/support/templates/Qwen3.5-4B.jinja" 2>/dev/null || fail "make-model"

printf 'Hello there\n' | "$cli" chat --model "$tmp/q35.gguf" -n 12 --greedy --block-size 16 >"$out" 2>&1 || fail "chat exited $?"
grep -q '^reasoning: think (the vocabulary has <think> and </think>)' "$out" || fail "the format is not named"
grep -q '^\[thinking\] ' "$out" || fail "no [thinking] line"
line=$(grep '^\[prompt ' "$out")
prompt=$(echo "$line" | sed 's/^\[prompt \([0-9]*\) tokens.*/\1/')
# Every generated token was thinking; the blocks are those of positions prompt .. prompt+11.
blocks=$(( (prompt + 11) / 16 - prompt / 16 + 1 ))
echo "$line" | grep -q "generated 12 (stop: length), reasoning 12 tokens in $blocks blocks, unfinished" ||
  fail "turn line: $line (expected 12 reasoning tokens in $blocks blocks)"

printf 'Hello there\n' | "$cli" chat --model "$tmp/q35.gguf" -n 12 --greedy --hide-reasoning >"$out" 2>&1 || fail "hide exited $?"
grep -q '^\[thinking\]' "$out" && fail "--hide-reasoning printed the thinking"
grep -q "reasoning 12 tokens in [0-9]* blocks (hidden)" "$out" || fail "--hide-reasoning: no count"

printf 'Hello there\n' | "$cli" chat --model "$tmp/q35.gguf" -n 12 --greedy --reasoning-parser none >"$out" 2>&1 || fail "none exited $?"
grep -q -e '^\[thinking\]' -e 'reasoning 12' "$out" && fail "--reasoning-parser none still split the reply"

"$cli" chat --model "$tmp/q35.gguf" --reasoning-parser sometimes </dev/null >"$out" 2>&1
[ $? -eq 2 ] || fail "an unknown --reasoning-parser is not a usage error"
grep -q "auto, none, think, harmony" "$out" || fail "the usage error does not list the parsers"
echo "cli_chat_reasoning: ok"
