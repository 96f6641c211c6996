"""`kvscope-cli serve` writing chat prompts with the model's own Jinja template, driven by the
`openai` Python package: a synthetic model (random weights) whose file carries Qwen3's real chat
template; chat_template_kwargs (vLLM's: enable_thinking) change the prompt; bad kwargs and a
template that raises are 400s and the server stays up; --chat-template FILE at startup, and a
template file that cannot render is refused at startup.
usage: test_chat_template_peer.py KVSCOPE_CLI UNUSED (the model is written here)"""
import os
import subprocess
import sys
import tempfile

import openai

from serve_fixture import Checks, Server

CLI = sys.argv[1]

# Qwen3-0.6B's chat template, as llama.cpp's models/templates/ holds it.
QWEN3 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
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
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Refuses conversations that carry an earlier reply.
NO_HISTORY = ("{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no earlier replies, please') }}"
              "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="kvscope-chat-template-peer-")
    model = os.path.join(tmp, "qwen3-template.gguf")
    subprocess.run([CLI, "make-model", "--out", model, "--n-vocab", "512", "--n-embd", "64", "--n-layer", "2",
                    "--n-head", "2", "--n-head-kv", "1", "--n-ff", "128", "--special-tokens",
                    "<|endoftext|>,<|im_start|>,<|im_end|>", "--chat-template", write(os.path.join(tmp, "qwen3.jinja"), QWEN3)],
                   check=True, capture_output=True)
    srv = Server(CLI, model)
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    name = srv.model_name
    checks = Checks()
    hi = [{"role": "user", "content": "Hi"}]

    def ask(messages=hi, **kw):
        return client.chat.completions.create(model=name, messages=messages, max_tokens=4, temperature=0, **kw)

    def template_is_the_models_own():
        assert any("chat template: jinja (the model's tokenizer.chat_template" in l for l in srv.stderr_lines), \
            "".join(srv.stderr_lines)

    def kwargs_change_the_prompt():
        plain = ask().usage.prompt_tokens
        off = ask(extra_body={"chat_template_kwargs": {"enable_thinking": False}}).usage.prompt_tokens
        on = ask(extra_body={"chat_template_kwargs": {"enable_thinking": True}}).usage.prompt_tokens
        # enable_thinking false: Qwen3's template opens the reply with an empty <think></think>.
        assert off > plain and on == plain, (plain, off, on)
        chunks = list(ask(stream=True, stream_options={"include_usage": True},
                          extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
        assert chunks[-1].usage.prompt_tokens == off, chunks[-1].usage

    def multi_turn_reuses_the_prefix():
        first = ask(messages=[{"role": "system", "content": "You answer in one word. " * 8}] + hi)
        msgs = [{"role": "system", "content": "You answer in one word. " * 8}] + hi + \
            [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}]
        second = ask(messages=msgs)
        assert second.usage.prompt_tokens > first.usage.prompt_tokens
        assert second.usage.prompt_tokens_details.cached_tokens >= 16, second.usage

    def bad_kwargs_are_400():
        for bad, says in [("not an object", "must be an object"), ({"messages": []}, "must not set 'messages'")]:
            try:
                ask(extra_body={"chat_template_kwargs": bad})
                raise AssertionError("accepted chat_template_kwargs=%r" % (bad,))
            except openai.BadRequestError as e:
                assert e.status_code == 400 and says in str(e), e
        assert ask().choices[0].finish_reason in ("stop", "length")  # still serving

    def raising_template_is_400_and_server_stays_up():
        own = Server(CLI, model, "--chat-template", write(os.path.join(tmp, "no-history.jinja"), NO_HISTORY))
        try:
            c = openai.OpenAI(base_url=own.base + "/v1", api_key="unused", max_retries=0, timeout=120)
            assert any("Jinja, from " in l for l in own.stderr_lines), "".join(own.stderr_lines)
            try:
                c.chat.completions.create(model=own.model_name, max_tokens=2, messages=hi + [
                    {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Again"}])
                raise AssertionError("a template that raises gave an answer")
            except openai.BadRequestError as e:
                assert e.status_code == 400 and "no earlier replies, please" in str(e), e
            r = c.chat.completions.create(model=own.model_name, max_tokens=2, messages=hi)
            assert r.usage.completion_tokens >= 1
            assert own.request("GET", "/health")[0] == 200 and own.alive()
        finally:
            own.stop()

    def unusable_template_file_is_refused_at_startup():
        bad = write(os.path.join(tmp, "raises.jinja"), "{{ raise_exception('this template refuses') }}")
        p = subprocess.run([CLI, "serve", "--model", model, "--port", "0", "--chat-template", bad],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "this template refuses" in p.stderr, (p.returncode, p.stderr)

    for name_, fn in [("template_is_the_models_own", template_is_the_models_own),
                      ("kwargs_change_the_prompt", kwargs_change_the_prompt),
                      ("multi_turn_reuses_the_prefix", multi_turn_reuses_the_prefix),
                      ("bad_kwargs_are_400", bad_kwargs_are_400),
                      ("raising_template_is_400_and_server_stays_up", raising_template_is_400_and_server_stays_up),
                      ("unusable_template_file_is_refused_at_startup", unusable_template_file_is_refused_at_startup)]:
        checks.run(name_, fn)
    assert srv.alive(), "the server died"
    srv.stop()
    checks.exit()


if __name__ == "__main__":
    main()
