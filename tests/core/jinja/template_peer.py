"""Renders every template of llama.cpp's models/templates/ times a set of conversations with
Python's jinja2, configured as Hugging Face transformers configures it, and with
`kvscope-cli chat-template`; the two must agree byte for byte, or both must raise.

usage: template_peer.py KVSCOPE_CLI TEMPLATES_DIR
Templates in EXPECTED_FAILURES must mismatch (each with the reason); the test fails when one of
them starts passing (remove it from the list) or when any other template mismatches.
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)
NOW_ARG = "2026-01-15T10:30:00"
BOS, EOS = "<s>", "</s>"

# template file -> why kvscope's rendering differs from jinja2's (none known today).
EXPECTED_FAILURES = {}


def make_env():
    """transformers.utils.chat_template_utils._cached_compile_jinja_template, minus the
    assistant-mask tracking (the generation tag only renders its body there)."""

    class AssistantTracker(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError("underscore-prefixed namespace attribute")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
TOOL_CALL = {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CONVERSATIONS = {
    "system": {"messages": [SYSTEM, {"role": "user", "content": "Hello!"}]},
    "no_system": {"messages": [{"role": "user", "content": "What is 2+2?"}]},
    "multi_turn": {"messages": [
        SYSTEM,
        {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "I am an assistant."},
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?"}]},
    "unicode": {"messages": [
        {"role": "user", "content": "Héllo wörld, 你好世界 🌍! \"quoted\" 'single' back\\slash\ttab\nnew line  "},
        {"role": "assistant", "content": "Ça va? Привет 👋 <b>tags</b> & {{ braces }}"},
        {"role": "user", "content": "  leading and trailing spaces  "}]},
    "ends_with_assistant": {"messages": [
        {"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi!"}],
        "add_generation_prompt": False},
    "tool_calls": {"tools": [WEATHER_TOOL], "messages": [
        SYSTEM,
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temperature\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees in Paris."},
        {"role": "user", "content": "Thanks!"}]},
    "tools_only": {"tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Oslo, 3 days?"}]},
    "reasoning": {"messages": [
        {"role": "user", "content": "What is 17*3?"},
        {"role": "assistant", "content": "51", "reasoning_content": "17*3 = 51, easy."},
        {"role": "user", "content": "And 18*3?"}],
        "kwargs": {"enable_thinking": True, "reasoning_effort": "high"}},
    "content_parts": {"messages": [
        SYSTEM,
        {"role": "user", "content": [{"type": "text", "text": "Describe this."}, {"type": "text", "text": "Briefly."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A short description."}]},
        {"role": "user", "content": "Thanks"}]},
    "parallel_string_args": {"tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call67890", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call67890", "content": "rain"}]},
    "thinking_off": {"messages": [SYSTEM, {"role": "user", "content": "Quick answer: capital of France?"}],
                     "kwargs": {"enable_thinking": False}},
}


def python_render(env, source, case):
    try:
        template = env.from_string(source)
        return template.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                               add_generation_prompt=case.get("add_generation_prompt", True),
                               bos_token=BOS, eos_token=EOS, **case.get("kwargs", {})), None
    except Exception as e:  # a template may raise on purpose: kvscope must then raise too
        return None, f"{type(e).__name__}: {e}"


def kvscope_render(cli, template_path, case, tmp):
    messages_path = os.path.join(tmp, "messages.json")
    with open(messages_path, "w", encoding="utf-8") as f:
        json.dump({"messages": case["messages"], **({"tools": case["tools"]} if "tools" in case else {})}, f,
                  ensure_ascii=False)
    cmd = [cli, "chat-template", "--template", template_path, "--messages", messages_path,
           "--bos-token", BOS, "--eos-token", EOS, "--now", NOW_ARG]
    if not case.get("add_generation_prompt", True):
        cmd.append("--no-generation-prompt")
    if "kwargs" in case:
        cmd += ["--kwargs", json.dumps(case["kwargs"])]
    p = subprocess.run(cmd, capture_output=True, timeout=60)
    if p.returncode == 0:
        return p.stdout.decode("utf-8"), None
    if p.returncode != 1:
        return None, f"CRASH rc={p.returncode}: {p.stderr.decode(errors='replace')}"
    return None, p.stderr.decode("utf-8", errors="replace").strip()


def first_difference(a, b):
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at char {i}: jinja2 {a[max(0, i - 40):i + 40]!r} vs kvscope {b[max(0, i - 40):i + 40]!r}"


def check_template(env, cli, path, tmp):
    """The list of mismatches of one template over all conversations."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    problems, rendered = [], 0
    for name, case in CONVERSATIONS.items():
        want, want_err = python_render(env, source, case)
        got, got_err = kvscope_render(cli, path, case, tmp)
        if got_err and got_err.startswith("CRASH"):
            problems.append(f"{name}: {got_err}")
        elif want_err and got_err:
            continue
        elif want_err or got_err:
            problems.append(f"{name}: jinja2 {'raised ' + want_err if want_err else 'rendered'}, "
                            f"kvscope {'raised ' + got_err if got_err else 'rendered'}")
        elif want != got:
            problems.append(f"{name}: output differs {first_difference(want, got)}")
        else:
            rendered += 1
    return problems, rendered


def main():
    cli, templates = sys.argv[1], sys.argv[2]
    only = os.environ.get("KVSCOPE_TEMPLATE_ONLY")
    env = make_env()
    names = sorted(n for n in os.listdir(templates) if n.endswith(".jinja") and (not only or only in n))
    if len(names) < (1 if only else 50):
        print(f"FAIL: only {len(names)} templates in {templates}")
        return 1
    failures, passed, total_rendered = [], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            problems, rendered = check_template(env, cli, os.path.join(templates, name), tmp)
            total_rendered += rendered
            expected = name in EXPECTED_FAILURES
            if problems and not expected:
                failures.append(name)
                print(f"FAIL {name}:\n  " + "\n  ".join(problems))
            elif not problems and expected:
                failures.append(name)
                print(f"FAIL {name}: listed as an expected failure but now matches; remove it from the list")
            elif problems:
                print(f"XFAIL {name} ({EXPECTED_FAILURES[name]})")
            else:
                passed += 1
    print(f"{passed}/{len(names)} templates identical to jinja2 {jinja2.__version__} over {len(CONVERSATIONS)} "
          f"conversations ({total_rendered} renders compared, the rest raised on both sides); "
          f"{len(EXPECTED_FAILURES)} expected failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
