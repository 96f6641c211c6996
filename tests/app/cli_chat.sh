#!/bin/sh
# `kvscope-cli chat` through a pipe on stories260K (a base model: completion template):
# two turns (the second reuses the first's blocks from the prefix cache), /stats, /reset,
# an unknown command, /quit, and a bad --chat-template. Usage: cli_chat.sh KVSCOPE_CLI SHARED_DIR
set -u
cli="$1"
model="$2/models/stories260K.gguf"
fail() { echo "FAIL: $*"; echo "----- output -----"; cat "$out"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

printf '%s\n' "Once upon a time there was a little girl named Lily." "She liked to play" /stats /reset "One day" \
  /bogus /quit "never read" |
  "$cli" chat --model "$model" -n 24 --kv-blocks 64 --threads 2 >"$out" 2>&1 || fail "exit code $?"

grep -q '^chat template: completion (the model file has no tokenizer.chat_template' "$out" || fail "template line"
turns=$(grep -c '^\[prompt [0-9]* tokens, cached [0-9]*, generated' "$out")
[ "$turns" -eq 3 ] || fail "expected 3 turn lines, got $turns"
cached() { grep '^\[prompt ' "$out" | sed -n "$1p" | sed 's/.*cached \([0-9]*\),.*/\1/'; }
prompt() { grep '^\[prompt ' "$out" | sed -n "$1p" | sed 's/^\[prompt \([0-9]*\) tokens.*/\1/'; }
[ "$(cached 1)" -eq 0 ] || fail "turn 1 should have no cached tokens"
[ "$(cached 2)" -ge 16 ] || fail "turn 2 should reuse at least one block, cached $(cached 2)"
[ "$(prompt 2)" -gt "$(prompt 1)" ] || fail "turn 2's prompt should contain turn 1"
[ "$(prompt 3)" -lt "$(prompt 1)" ] || fail "after /reset the prompt should start over"
grep -q '^KV cache: 64 blocks of 16 tokens: [0-9]* used, [0-9]* cached (evictable), [0-9]* free' "$out" || fail "/stats KV line"
grep -q '^conversation: 2 turns, [0-9]* tokens; prefix cache: [0-9]* of [0-9]* prompt tokens reused' "$out" || fail "/stats conversation line"
grep -q '^\[conversation reset\]' "$out" || fail "/reset"
# Sampling starts from the local-chat defaults; turn 2's hit stops short of what it shares with
# turn 1 (turn 1 ended inside a block), and the story says which block missed and why.
grep -q '^sampling: temperature 0.8, top-k 40, top-p 0.95, repeat penalty 1.1' "$out" || fail "sampling defaults line"
grep -q '^\[prefix hit [0-9]* of [0-9]* tokens shared with request 1: Block [0-9]* (tokens [0-9]*-[0-9]*) missed: ' "$out" ||
  fail "miss reason after turn 2"
grep -q '^unknown command /bogus' "$out" || fail "unknown command message"
grep -q 'never read' "$out" && fail "input after /quit was read"

# --greedy: reproducible, and said so.
printf 'Once upon a time\n' | "$cli" chat --model "$model" -n 8 --greedy >"$out" 2>&1 || fail "--greedy exit code $?"
grep -q '^sampling: greedy (reproducible)' "$out" || fail "--greedy line"

# A bad template name: a usage error (exit 2) that names the problem, no crash.
"$cli" chat --model "$model" --chat-template chatmll </dev/null >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "bad --chat-template: exit code $rc, expected 2"
grep -q "chatmll" "$out" && grep -q "chatml, llama3" "$out" || fail "bad --chat-template message"
echo "cli chat: OK"
