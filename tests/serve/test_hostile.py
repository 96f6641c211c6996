"""Hostile and malformed requests against `kvscope-cli serve`, over raw sockets: each gets its
status (an OpenAI-shaped JSON error where it has a body) and the server keeps serving.
usage: test_hostile.py KVSCOPE_CLI MODEL"""
import json
import socket
import sys
import time

from serve_fixture import Checks, Server, samples, value, wait_idle

CLI, MODEL = sys.argv[1], sys.argv[2]


def raw(port, data, read_timeout=30, pause_after=None):
    """Sends bytes on a fresh connection and returns (status or None, body bytes)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        if pause_after is not None:
            s.sendall(data[:pause_after])
            time.sleep(7)  # longer than the server's 5 s read timeout
            try:
                s.sendall(data[pause_after:])
            except OSError:
                pass
        else:
            s.sendall(data)
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            chunks.append(b)
            head = b"".join(chunks)
            if b"\r\n\r\n" in head:
                hdr, _, body = head.partition(b"\r\n\r\n")
                cl = [l for l in hdr.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(body) >= int(cl[0].split(b":")[1]):
                    break
        resp = b"".join(chunks)
        if not resp.startswith(b"HTTP/1.1 "):
            return None, resp
        return int(resp[9:12]), resp.partition(b"\r\n\r\n")[2]
    finally:
        s.close()


def post(path, body, extra_headers=b"", content_length=None):
    if isinstance(body, str):
        body = body.encode()
    cl = len(body) if content_length is None else content_length
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
            extra_headers + b"Content-Length: " + str(cl).encode() + b"\r\nConnection: close\r\n\r\n" + body)


def main():
    srv = Server(CLI, MODEL)
    checks = Checks()
    P = srv.port
    ok_body = json.dumps({"prompt": "Once upon", "max_tokens": 2})
    long_ids = [1] + [300] * 3000

    # (name, request bytes, wanted status, optional text the error message must contain)
    cases = [
        ("truncated_json", post("/v1/completions", '{"prompt": "Once upon a ti'), 400, "not valid JSON"),
        ("json_not_an_object", post("/v1/completions", '[1, 2, 3]'), 400, "JSON object"),
        ("empty_body", post("/v1/completions", ""), 400, "empty"),
        ("prompt_wrong_type", post("/v1/completions", '{"prompt": 42}'), 400, "prompt"),
        ("prompt_missing", post("/v1/completions", '{"max_tokens": 3}'), 400, "prompt"),
        ("max_tokens_string", post("/v1/completions", '{"prompt": "a", "max_tokens": "ten"}'), 400, "max_tokens"),
        ("max_tokens_huge", post("/v1/completions", '{"prompt": "a", "max_tokens": 99999999999999999999}'), 400, None),
        ("max_tokens_over_context", post("/v1/completions", '{"prompt": "a", "max_tokens": 5000}'), 400, "2048"),
        ("max_tokens_zero", post("/v1/completions", '{"prompt": "a", "max_tokens": 0}'), 400, "max_tokens"),
        ("n_negative", post("/v1/completions", '{"prompt": "a", "n": -1}'), 400, "'n'"),
        ("n_huge", post("/v1/completions", '{"prompt": "a", "n": 100000}'), 400, "'n'"),
        ("temperature_negative", post("/v1/completions", '{"prompt": "a", "temperature": -0.5}'), 400, "temperature"),
        ("temperature_nan_string", post("/v1/completions", '{"prompt": "a", "temperature": "NaN"}'), 400, "temperature"),
        ("top_p_zero", post("/v1/completions", '{"prompt": "a", "top_p": 0}'), 400, "top_p"),
        ("top_k_minus_five", post("/v1/completions", '{"prompt": "a", "top_k": -5}'), 400, "top_k"),
        ("logprobs_too_many", post("/v1/completions", '{"prompt": "a", "logprobs": 1000}'), 400, "logprobs"),
        ("stream_not_bool", post("/v1/completions", '{"prompt": "a", "stream": "yes"}'), 400, "stream"),
        ("stop_wrong_type", post("/v1/completions", '{"prompt": "a", "stop": [1, 2]}'), 400, "stop"),
        ("token_id_outside_vocab", post("/v1/completions", '{"prompt": [1, 999999]}'), 400, "vocabulary"),
        ("token_id_negative", post("/v1/completions", '{"prompt": [1, -3]}'), 400, "vocabulary"),
        ("prompt_longer_than_context", post("/v1/completions", json.dumps({"prompt": long_ids})), 400, "3001"),
        ("seven_mb_prompt_refused_untokenized", post("/v1/completions", json.dumps({"prompt": "the dog ran. " * 550000})), 400, "at least"),
        ("text_just_over_context", post("/v1/completions", json.dumps({"prompt": "the dog ran. " * 1200})), 400, "input tokens"),
        ("batched_prompts", post("/v1/completions", '{"prompt": ["a", "b"]}'), 400, "one prompt"),
        ("invalid_utf8", post("/v1/completions", b'{"prompt": "\xff\xfe\xc3("}'), 400, "JSON"),
        ("raw_nul_bytes", post("/v1/completions", b'{"prompt": "a\x00b"}'), 400, "JSON"),
        ("escaped_nul_is_text", post("/v1/completions", '{"prompt": "a\\u0000b", "max_tokens": 1}'), 200, None),
        ("unknown_model", post("/v1/completions", '{"prompt": "a", "model": "gpt-9"}'), 404, "gpt-9"),
        ("unknown_path", post("/v1/nothing", ok_body), 404, None),
        ("get_on_post_endpoint", b"GET /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, None),
        ("messages_not_array", post("/v1/chat/completions", '{"messages": "hi"}'), 400, "messages"),
        ("message_role_unknown", post("/v1/chat/completions", '{"messages": [{"role": "root", "content": "x"}]}'), 400, "role"),
        ("message_content_number", post("/v1/chat/completions", '{"messages": [{"role": "user", "content": 5}]}'), 400, "content"),
        ("image_part", post("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'), 400, "text"),
        # Reasoning and tool fields of input messages, tools, logit_bias: wrong shapes are 400s.
        ("reasoning_not_string", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "reasoning": 5},
            {"role": "user", "content": "c"}]})), 400, "reasoning must be a string"),
        ("reasoning_content_list", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "assistant", "content": "b", "reasoning_content": ["x"]}]})), 400, "reasoning_content"),
        ("tool_calls_not_array", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "assistant", "content": None, "tool_calls": {"id": "1"}}]})), 400, "tool_calls must be an array"),
        ("tool_call_without_function", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "assistant", "tool_calls": [{"id": "1", "type": "function"}]}]})), 400, "'function' object"),
        ("tool_call_name_number", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "assistant", "tool_calls": [{"function": {"name": 7, "arguments": "{}"}}]}]})), 400, "name must be a string"),
        ("tool_call_arguments_not_json", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})), 400, "not valid JSON"),
        ("tool_call_id_number", post("/v1/chat/completions", json.dumps({"messages": [
            {"role": "tool", "content": "42", "tool_call_id": 3}]})), 400, "tool_call_id must be a string"),
        ("tools_not_array", post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "a"}],
                                                                      "tools": {"type": "function"}})), 400, "'tools' must be an array"),
        ("tools_item_without_name", post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "a"}],
                                                                              "tools": [{"type": "function", "function": {}}]})), 400, "tools[0]"),
        ("tools_with_a_builtin_template", post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "a"}],
            "tools": [{"type": "function", "function": {"name": "f"}}]})), 400, "no tool calls"),
        ("logit_bias_not_object", post("/v1/completions", '{"prompt": "a", "logit_bias": [1, 2]}'), 400, "logit_bias"),
        ("logit_bias_key_not_a_token", post("/v1/completions", '{"prompt": "a", "logit_bias": {"x1": 5}}'), 400, "token id"),
        ("logit_bias_key_outside_vocab", post("/v1/completions", '{"prompt": "a", "logit_bias": {"999999": 5}}'), 400, "vocabulary"),
        ("logit_bias_value_too_big", post("/v1/completions", '{"prompt": "a", "logit_bias": {"5": 1000}}'), 400, "-100 and 100"),
        ("stream_options_without_stream", post("/v1/completions", '{"prompt": "a", "stream_options": {"include_usage": true}}'), 400, "stream"),
        ("deeply_nested_json", post("/v1/completions", "[" * 100000 + "]" * 100000), 400, None),
        ("ten_mb_body", post("/v1/completions", b'{"prompt": "' + b"a" * (10 << 20) + b'"}'), 413, None),
        ("header_flood", b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-Flood-%d: %s\r\n" % (i, b"v" * 50) for i in range(5000)) +
         b"Connection: close\r\n\r\n", 431, None),
        ("garbage_request_line", b"HELLO THERE\r\n\r\n", 400, None),
        ("unknown_fields_ignored", post("/v1/completions", '{"prompt": "a", "max_tokens": 1, "frobnicate": {"x": [1]}}'), 200, None),
    ]

    def one(name, data, want, text):
        status, body = raw(P, data)
        assert status == want, "%s: got %s %r" % (name, status, body[:200])
        if want >= 400 and body:
            err = json.loads(body)["error"]
            assert set(err) >= {"message", "type", "param", "code"}, err
            assert err["code"] == want
            if text:
                assert text in err["message"], err["message"]
        assert raw(P, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0] == 200, "server stopped serving"

    for c in cases:
        checks.run(c[0], one, *c)

    def slow_client():
        # Sends half the request, stalls past the read timeout: the server drops it, not hangs.
        t0 = time.time()
        status, _ = raw(P, post("/v1/completions", ok_body), pause_after=40, read_timeout=30)
        assert status in (None, 400, 408), status
        assert time.time() - t0 < 30
        assert raw(P, post("/v1/completions", ok_body))[0] == 200

    def short_body():
        # Content-Length promises more than comes, then the client half-closes.
        s = socket.create_connection(("127.0.0.1", P), timeout=30)
        s.sendall(post("/v1/completions", '{"prompt": "a"', content_length=500))
        s.shutdown(socket.SHUT_WR)
        s.recv(1000)
        s.close()
        assert raw(P, post("/v1/completions", ok_body))[0] == 200

    def idle_connections():
        socks = [socket.create_connection(("127.0.0.1", P)) for _ in range(40)]
        try:
            assert raw(P, post("/v1/completions", ok_body))[0] == 200
        finally:
            for s in socks:
                s.close()

    def disconnect_before_answer():
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", P))
            s.sendall(post("/v1/completions", json.dumps({"prompt": "Once", "max_tokens": 200, "stream": True})))
            s.close()
        smp, idle = wait_idle(srv, timeout=30)
        assert idle, "blocks in use after the clients left"

    checks.run("slow_client", slow_client)
    checks.run("short_body_then_half_close", short_body)
    checks.run("forty_idle_connections", idle_connections)
    checks.run("disconnect_before_answer", disconnect_before_answer)

    def no_500_and_clean():
        smp, idle = wait_idle(srv)
        assert idle
        assert ("kvscope:http_errors_total", frozenset({("model_name", srv.model_name), ("status", "500")})) not in smp
        assert value(smp, "kvscope:kv_validation_failures_total") == 0
        print("  error statuses seen:", sorted((dict(ls)["status"], v) for (n, ls), v in smp.items()
                                              if n == "kvscope:http_errors_total"))
    checks.run("no_500_and_kv_clean", no_500_and_clean)
    assert srv.alive(), "the server died"
    srv.stop()
    print("%d hostile kinds" % (len(cases) + 4))
    checks.exit()


if __name__ == "__main__":
    main()
