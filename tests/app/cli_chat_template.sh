#!/bin/sh
# `kvscope-cli chat-template` end to end: a template file and a GGUF's tokenizer.chat_template
# with its BOS/EOS token texts (a metadata-only GGUF written here), the exact bytes printed (no
# newline added), --kwargs, --now, --no-generation-prompt, and the template's own error (exit 1,
# its message on stderr). Usage: cli_chat_template.sh KVSCOPE_CLI
set -u
cli="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/out" ] && { echo "----- output -----"; cat "$tmp/out"; }; exit 1; }

cat >"$tmp/t.jinja" <<'T'
{{- bos_token }}
{% for m in messages %}
  <{{ m.role }}>{{ m.content | trim }}{{ eos_token }}
{% endfor %}
{% if add_generation_prompt %}<assistant>{% if think is defined and think %}<think>{% endif %}{% endif %}
{{ strftime_now('%d %b %Y') }}
T
printf '%s' '{"messages": [{"role": "user", "content": " Héllo 👋 "}]}' >"$tmp/m.json"

"$cli" chat-template --template "$tmp/t.jinja" --messages "$tmp/m.json" --bos-token '<s>' --eos-token '</s>' \
  --kwargs '{"think": true}' --now 2026-01-15 >"$tmp/out" 2>"$tmp/err" || fail "exit code $?: $(cat "$tmp/err")"
# What jinja2 3.1.6 renders, as transformers sets it up.
printf '<s>\n  <user>Héllo 👋</s>\n<assistant><think>15 Jan 2026' >"$tmp/want"
cmp -s "$tmp/out" "$tmp/want" || fail "template file: output differs from $(od -c "$tmp/want" | head -5)"

"$cli" chat-template --template "$tmp/t.jinja" --messages "$tmp/m.json" --no-generation-prompt --now 2026-01-15 \
  >"$tmp/out" 2>&1 || fail "--no-generation-prompt exit code $?"
printf '\n  <user>Héllo 👋\n15 Jan 2026' >"$tmp/want"
cmp -s "$tmp/out" "$tmp/want" || fail "--no-generation-prompt: output differs"

# A metadata-only GGUF v3: the template and a 4-token vocabulary whose BOS is 1 and EOS is 2.
python3 - "$tmp/t.jinja" "$tmp/model.gguf" <<'PY' || fail "writing the GGUF"
import struct, sys
def s(x): b = x.encode(); return struct.pack("<Q", len(b)) + b
kv = [("general.architecture", 8, s("llama")), ("tokenizer.chat_template", 8, s(open(sys.argv[1]).read())),
      ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 4) + b"".join(s(t) for t in ["<unk>", "<|bos|>", "<|eos|>", "a"])),
      ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)), ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2))]
out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(s(k) + struct.pack("<I", t) + v for k, t, v in kv)
open(sys.argv[2], "wb").write(out)
PY
"$cli" chat-template --model "$tmp/model.gguf" --messages "$tmp/m.json" --now 2026-01-15 >"$tmp/out" 2>"$tmp/err" ||
  fail "--model exit code $?: $(cat "$tmp/err")"
printf '<|bos|>\n  <user>Héllo 👋<|eos|>\n<assistant>15 Jan 2026' >"$tmp/want"
cmp -s "$tmp/out" "$tmp/want" || fail "--model: output differs"

# The template's own error: exit 1 and its message; a usage error: exit 2.
printf '%s' "{{ raise_exception('Conversation roles must alternate') }}" >"$tmp/bad.jinja"
"$cli" chat-template --template "$tmp/bad.jinja" --messages "$tmp/m.json" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || fail "raise_exception: exit code $rc, want 1"
grep -q "Conversation roles must alternate" "$tmp/err" || fail "raise_exception: message missing from stderr"
[ -s "$tmp/out" ] && fail "raise_exception: something was printed on stdout"
"$cli" chat-template --messages "$tmp/m.json" >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "no --template/--model: want exit 2"
"$cli" chat-template --template "$tmp/t.jinja" --messages "$tmp/m.json" --kwargs '[1]' >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "--kwargs not an object: want exit 2"
echo "chat-template: file, GGUF, kwargs, now, errors: ok"
