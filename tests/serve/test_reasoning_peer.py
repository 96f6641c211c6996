"""Reasoning in `kvscope-cli serve`'s /v1/chat/completions, driven by the `openai` Python package:
synthetic models (random weights) whose vocabulary has Qwen3's <think> and </think> (user-defined
tokens, as Qwen3's GGUFs hold them) and whose files carry Qwen3's and Qwen3.5's real templates
(tests/support/templates/, from llama.cpp's models/templates/).

How the output comes to contain the markers: a random-weight model does not write </think> by
itself, so the requests use OpenAI's logit_bias (a request field the server supports for its own
sake): +4 on </think> makes it likely within a few tokens, and -100 on the 256 byte tokens keeps
the random text plain ASCII, so the logprobs' token strings join to exactly the generated text.
Which seed writes </think> where is not assumed: the test reads the raw reply from the logprobs
(every token as generated, markers included) and splits it itself with str.partition, then
requires the server's reasoning/content, whole and streamed, to equal that split.

The input side: an assistant message's reasoning (both names), tool_calls, tool messages and
`tools` reach the template; each prompt's token count must equal that of the same conversation
written out by hand as Qwen3's template writes it and sent to /v1/completions.
usage: test_reasoning_peer.py KVSCOPE_CLI UNUSED (the models are written here)"""
import json
import os
import subprocess
import sys
import tempfile

import openai

from serve_fixture import Checks, Server

CLI = sys.argv[1]
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support", "templates")
BYTE_TOKENS = range(3, 259)  # <0x00>..<0xFF> in make-model's vocabulary


def make_model(tmp, name, template):
    path = os.path.join(tmp, name + ".gguf")
    subprocess.run([CLI, "make-model", "--out", path, "--n-vocab", "512", "--n-embd", "64", "--n-layer", "2",
                    "--n-head", "2", "--n-head-kv", "1", "--n-ff", "128", "--special-tokens",
                    "<|endoftext|>,<|im_start|>,<|im_end|>", "--user-tokens", "<think>,</think>",
                    "--chat-template", os.path.join(TEMPLATES, template)], check=True, capture_output=True)
    return path


def token_id(model, text):
    out = subprocess.run([CLI, "tokenize", "--model", model, "--text", text, "--json", "--no-add-special",
                          "--parse-special"], check=True, capture_output=True, text=True).stdout
    ids = json.loads(out)["tokens"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


def raw_reply(choice):
    """The reply as generated: every token's text, markers included, from the logprobs."""
    return "".join(t.token for t in choice.logprobs.content)


def streamed(client, **kw):
    reasoning, reasoning_content, content, order, usage = "", "", "", [], None
    for ch in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            d = c.delta.model_extra or {}
            if d.get("reasoning"):
                reasoning += d["reasoning"]
                order.append("r")
            if d.get("reasoning_content"):
                reasoning_content += d["reasoning_content"]
            if c.delta.content:
                content += c.delta.content
                order.append("c")
    return reasoning, reasoning_content, content, order, usage


def main():
    tmp = tempfile.mkdtemp(prefix="kvscope-reasoning-peer-")
    q35 = make_model(tmp, "qwen35", "Qwen3.5-4B.jinja")
    q3 = make_model(tmp, "qwen3", "Qwen-Qwen3-0.6B.jinja")
    think, end = token_id(q3, "<think>"), token_id(q3, "</think>")
    checks = Checks()
    hi = [{"role": "user", "content": "Hi"}]

    def with_bias(extra):
        b = {str(i): -100 for i in BYTE_TOKENS}
        b.update({str(k): v for k, v in extra.items()})
        return b

    srv = Server(CLI, q35)
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)

    def format_is_named():
        assert any("reasoning: think (the vocabulary has <think> and </think>)" in l for l in srv.stderr_lines), \
            "".join(srv.stderr_lines)

    # Qwen3.5 opens <think> in the generation prompt: the reply starts inside the block.
    def split_whole_and_streamed():
        for seed in range(30):
            kw = dict(model=srv.model_name, messages=hi, max_tokens=40, temperature=1.0, seed=seed,
                      logit_bias=with_bias({end: 4}))
            whole = client.chat.completions.create(logprobs=True, **kw)
            choice = whole.choices[0]
            raw = raw_reply(choice)
            want_reasoning, marker, want_content = raw.partition("</think>")
            if not (marker and want_reasoning and want_content):
                continue  # this seed wrote no </think> between text: try the next
            msg = choice.message.model_extra
            assert msg["reasoning"] == want_reasoning and msg["reasoning_content"] == want_reasoning, (raw, msg)
            assert choice.message.content == want_content, (raw, choice.message.content)
            # The reasoning's tokens: up to and including </think>.
            tokens = [t.token for t in choice.logprobs.content]
            want_tokens = tokens.index("</think>") + 1
            assert whole.usage.completion_tokens_details.reasoning_tokens == want_tokens, (whole.usage, tokens)
            r, rc, c, order, usage = streamed(client, **kw)
            assert (r, rc, c) == (want_reasoning, want_reasoning, want_content), (r, rc, c, raw)
            assert order == sorted(order, key=lambda x: x != "r"), order  # reasoning deltas first
            assert usage.completion_tokens_details.reasoning_tokens == want_tokens, usage
            return
        raise AssertionError("no seed in 0..29 wrote </think> between text")

    def no_end_marker_is_all_reasoning():
        r = client.chat.completions.create(model=srv.model_name, messages=hi, max_tokens=8, temperature=1.0, seed=1,
                                           logprobs=True, logit_bias=with_bias({end: -100}))
        c = r.choices[0]
        assert c.message.model_extra["reasoning"] == raw_reply(c) != "", c
        assert c.message.content is None, c.message
        assert r.usage.completion_tokens_details.reasoning_tokens == r.usage.completion_tokens, r.usage

    for name, fn in [("format_is_named", format_is_named), ("split_whole_and_streamed", split_whole_and_streamed),
                     ("no_end_marker_is_all_reasoning", no_end_marker_is_all_reasoning)]:
        checks.run(name, fn)
    assert srv.alive(), "the server died"
    srv.stop()

    srv = Server(CLI, q3)
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    name = srv.model_name

    def ask(messages, **kw):
        return client.chat.completions.create(model=name, messages=messages, max_tokens=3, temperature=0,
                                              logprobs=True, **kw)

    # Qwen3's generation prompt opens nothing: <think> opens a block only at the reply's start;
    # with enable_thinking false the template closed the block itself, so the reply is content.
    def thinking_opened_by_the_reply_or_closed_by_the_prompt():
        forced = with_bias({think: 100})
        r = ask(hi, logit_bias=forced)
        assert raw_reply(r.choices[0]) == "<think>" * 3, raw_reply(r.choices[0])
        assert r.choices[0].message.model_extra["reasoning"] == "<think>" * 2, r.choices[0].message
        assert r.choices[0].message.content is None
        off = ask(hi, logit_bias=forced, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        assert off.choices[0].message.content == "<think>" * 3, off.choices[0].message
        assert off.choices[0].message.model_extra["reasoning"] is None
        plain = ask(hi, logit_bias=with_bias({think: -100}))
        assert plain.choices[0].message.content == raw_reply(plain.choices[0]), plain.choices[0]
        assert plain.choices[0].message.model_extra["reasoning"] is None

    def prompt_tokens_of(text):
        return client.completions.create(model=name, prompt=text, max_tokens=1, temperature=0).usage.prompt_tokens

    # An assistant message's reasoning reaches Qwen3's template (it reads reasoning_content).
    def input_reasoning_reaches_the_template():
        for field in ("reasoning", "reasoning_content"):
            msgs = hi + [{"role": "assistant", "content": "Hello", field: "They greet me."}]
            got = ask(msgs).usage.prompt_tokens
            want = prompt_tokens_of("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nThey greet me."
                                    "\n</think>\n\nHello<|im_end|>\n<|im_start|>assistant\n")
            assert got == want, (field, got, want)
        without = ask(hi + [{"role": "assistant", "content": "Hello"}]).usage.prompt_tokens
        assert without == prompt_tokens_of("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                                           "</think>\n\nHello<|im_end|>\n<|im_start|>assistant\n"), without

    # tools, an assistant's tool_calls (arguments as the JSON string clients send) and the tool's
    # answer, written as Qwen3's template writes them.
    def tools_and_tool_calls_reach_the_template():
        tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                 "parameters": {"type": "object",
                                                                "properties": {"city": {"type": "string"}}}}}
        msgs = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"}]
        got = ask(msgs, tools=[tool]).usage.prompt_tokens
        text = ("<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
                json.dumps(tool, ensure_ascii=False) +
                "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                "<args-json-object>}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                "{\"city\": \"Paris\", \"unit\": \"C\"}}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\n<tool_response>\n18 degrees\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
        assert got == prompt_tokens_of(text), (got, prompt_tokens_of(text))

    def bad_tool_arguments_are_400():
        try:
            ask([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                      "function": {"name": "f", "arguments": "{not json"}}]}])
            raise AssertionError("accepted arguments that are not JSON")
        except openai.BadRequestError as e:
            assert "arguments is not valid JSON" in str(e), e
        assert ask(hi).choices[0].finish_reason in ("stop", "length")  # still serving

    for name_, fn in [("thinking_opened_by_the_reply_or_closed_by_the_prompt",
                       thinking_opened_by_the_reply_or_closed_by_the_prompt),
                      ("input_reasoning_reaches_the_template", input_reasoning_reaches_the_template),
                      ("tools_and_tool_calls_reach_the_template", tools_and_tool_calls_reach_the_template),
                      ("bad_tool_arguments_are_400", bad_tool_arguments_are_400)]:
        checks.run(name_, fn)
    assert srv.alive(), "the server died"
    srv.stop()
    checks.exit()


if __name__ == "__main__":
    main()
