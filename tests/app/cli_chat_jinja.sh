#!/bin/sh
# `kvscope-cli chat` through a model's own Jinja template: a synthetic model (random weights)
# whose file carries Qwen 2.5's real chat template and ChatML's control tokens. Turn 2 starts
# with every token of turn 1 (prefix-cache hits); --chat-template FILE; a template file that
# raises is a usage error (exit 2, its message shown); one that raises on a later turn gives a
# warning and the built-in family writes that turn. Usage: cli_chat_jinja.sh KVSCOPE_CLI
set -u
cli="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="$tmp/out"
fail() { echo "FAIL: $*"; echo "----- output -----"; cat "$out"; exit 1; }

# Qwen2.5-7B-Instruct's chat template, as llama.cpp's models/templates/ has it.
cat >"$tmp/qwen.jinja" <<'T'
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
T
"$cli" make-model --out "$tmp/m.gguf" --n-vocab 512 --n-embd 64 --n-layer 2 --n-head 2 --n-head-kv 1 --n-ff 128 \
  --special-tokens '<|endoftext|>,<|im_start|>,<|im_end|>' --chat-template "$tmp/qwen.jinja" >"$out" 2>&1 ||
  fail "make-model exit code $?"

field() { grep '^\[prompt ' "$out" | sed -n "$1p" | sed "s/.*$2 \([0-9]*\).*/\1/"; }
prompt() { grep '^\[prompt ' "$out" | sed -n "$1p" | sed 's/^\[prompt \([0-9]*\) tokens.*/\1/'; }

printf '%s\n' "Hello there, who are you?" "Tell me more" | "$cli" chat --model "$tmp/m.gguf" -n 12 --greedy \
  --kv-blocks 64 --threads 1 >"$out" 2>&1 || fail "exit code $?"
grep -q "^chat template: jinja (the model's tokenizer.chat_template; built-in fallback: chatml)" "$out" || fail "template line"
[ "$(grep -c '^\[prompt ' "$out")" -eq 2 ] || fail "expected 2 turn lines"
grep -q '^\[note\|^\[warning' "$out" && fail "a plain conversation needs no note"
[ "$(prompt 2)" -ge $(($(prompt 1) + $(field 1 generated))) ] || fail "turn 2's prompt should hold all of turn 1"
[ "$(field 2 cached)" -ge $(( ($(prompt 1) + $(field 1 generated) - 1) / 16 * 16 )) ] ||
  fail "turn 2 should find turn 1's full blocks in the prefix cache (cached $(field 2 cached))"

# --chat-template FILE: that template instead of the model's.
printf '%s' "{% for m in messages %}<|im_start|>{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant: {% endif %}" >"$tmp/own.jinja"
printf 'Hi\n' | "$cli" chat --model "$tmp/m.gguf" -n 4 --greedy --threads 1 --chat-template "$tmp/own.jinja" >"$out" 2>&1 ||
  fail "--chat-template FILE exit code $?"
grep -q "^chat template: jinja (Jinja, from $tmp/own.jinja; built-in fallback: chatml)" "$out" || fail "FILE template line"

# A template that raises: a usage error naming the template's own message.
printf '%s' "{{ raise_exception('This template takes no questions') }}" >"$tmp/bad.jinja"
"$cli" chat --model "$tmp/m.gguf" --chat-template "$tmp/bad.jinja" </dev/null >"$out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "raising --chat-template: exit code $rc, expected 2"
grep -q "This template takes no questions" "$out" || fail "raising --chat-template: message"

# One that raises only on a longer conversation: turn 2 is written by the built-in chatml,
# with a warning that quotes the template, and the chat goes on.
printf '%s' "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}" >"$tmp/once.jinja"
cat "$tmp/own.jinja" >>"$tmp/once.jinja"
printf '%s\n' "Hi" "Again" "/stats" | "$cli" chat --model "$tmp/m.gguf" -n 4 --greedy --threads 1 \
  --chat-template "$tmp/once.jinja" >"$out" 2>&1 || fail "fallback exit code $?"
[ "$(grep -c '^\[prompt ' "$out")" -eq 2 ] || fail "fallback: expected 2 turn lines"
grep -q "^\[warning: the chat template failed: one message only; this turn is written in the built-in chatml template instead\]" "$out" ||
  fail "fallback warning"
grep -q '^conversation: 2 turns' "$out" || fail "fallback: the conversation should go on"
echo "cli chat jinja: OK"
