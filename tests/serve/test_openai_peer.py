"""`kvscope-cli serve` driven by the `openai` Python package (PyPI), metrics read by
prometheus_client's parser. usage: test_openai_peer.py KVSCOPE_CLI MODEL"""
import concurrent.futures
import json
import subprocess
import sys
import threading
import time

import openai

from serve_fixture import Checks, Server, samples, value, wait_idle

CLI, MODEL = sys.argv[1], sys.argv[2]
PROMPT = "Once upon a time, there was a little dog"


def generate_cli(prompt, n):
    """The same greedy request through `kvscope-cli generate` (the engine without HTTP)."""
    out = subprocess.run([CLI, "generate", "--model", MODEL, "--prompt", prompt, "-n", str(n), "--ignore-eos",
                          "--json", "--threads", "1"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    srv = Server(CLI, MODEL)
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    name = srv.model_name
    checks = Checks()

    def models():
        ids = [m.id for m in client.models.list().data]
        assert ids == [name], ids

    def greedy_matches_generate():
        ref = generate_cli(PROMPT, 24)
        r = client.completions.create(model=name, prompt=PROMPT, max_tokens=24, temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].text == ref["text"], (r.choices[0].text, ref["text"])
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == ref["n_prompt"] and r.usage.completion_tokens == 24, r.usage
        assert r.usage.total_tokens == r.usage.prompt_tokens + 24
        # The prompt as token ids gives the same text.
        r2 = client.completions.create(model=name, prompt=ref["prompt_tokens"], max_tokens=24, temperature=0,
                                       extra_body={"ignore_eos": True})
        assert r2.choices[0].text == ref["text"]
        # Streamed: the chunks join to the same text, the usage chunk comes last.
        chunks = list(client.completions.create(model=name, prompt=PROMPT, max_tokens=24, temperature=0, stream=True,
                                                stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == ref["text"], (text, ref["text"])
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 24, chunks[-1]

    def chat_whole_and_streamed():
        msgs = [{"role": "system", "content": "You tell short stories."}, {"role": "user", "content": "Tell me about a cat."}]
        r = client.chat.completions.create(model=name, messages=msgs, max_tokens=20, temperature=0)
        assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
        assert r.choices[0].message.content, r
        assert 1 <= r.usage.completion_tokens <= 20, r.usage
        chunks = list(client.chat.completions.create(model=name, messages=msgs, max_tokens=20, temperature=0, stream=True,
                                                     stream_options={"include_usage": True}))
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert content == r.choices[0].message.content, (content, r.choices[0].message.content)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens

    def sixteen_concurrent_streams():
        barrier = threading.Barrier(16)

        def one(i):
            n = 0
            text = ""
            barrier.wait()  # all 16 ask at once; each stream lasts 200 engine steps at least
            t0 = time.time()
            for c in client.completions.create(model=name, prompt="Story %d: the %s" % (i, "bird" if i % 2 else "tree"),
                                               max_tokens=200, temperature=0.8, seed=i, stream=True,
                                               stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                if c.choices:
                    text += c.choices[0].text
                if c.usage:
                    n = c.usage.completion_tokens
            return n, text, t0, time.time()
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            res = list(ex.map(one, range(16)))
        assert all(n == 200 for n, _, _, _ in res), [n for n, _, _, _ in res]
        assert all(t for _, t, _, _ in res)
        # They overlapped (continuous batching), not one after another: some stream started
        # before another ended, for every pair of the first and last finisher.
        starts = [s for _, _, s, _ in res]
        ends = [e for _, _, _, e in res]
        assert max(starts) < min(ends), "the 16 streams never ran at the same time"

    def shared_system_prompt_hits_cache():
        system = " ".join(["The sun was warm and the birds sang in the tall green trees near the river."] * 12)
        msgs = lambda q: [{"role": "system", "content": system}, {"role": "user", "content": q}]
        a = client.chat.completions.create(model=name, messages=msgs("What did the fox do?"), max_tokens=4, temperature=0)
        assert a.usage.prompt_tokens >= 200, a.usage
        b = client.chat.completions.create(model=name, messages=msgs("Where did the girl go?"), max_tokens=4, temperature=0)
        cached = b.usage.prompt_tokens_details.cached_tokens
        assert cached > 0, b.usage
        assert cached >= 160, "only %d of ~%d shared tokens came from the cache" % (cached, a.usage.prompt_tokens)

    def client_closes_mid_stream():
        before = samples(srv.metrics_text())
        aborted0 = value(before, "vllm:request_success_total", finished_reason="abort")
        stream = client.completions.create(model=name, prompt=PROMPT, max_tokens=1900, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        got = 0
        for c in stream:
            got += 1
            if got == 3:
                break
        stream.close()  # the HTTP connection goes away mid-stream
        smp, idle = wait_idle(srv, timeout=20)
        assert idle, "blocks still in use after the client left"
        assert value(smp, "vllm:request_success_total", finished_reason="abort") == aborted0 + 1, "not cancelled"
        assert value(smp, "kvscope:kv_blocks", state="used") == 0

    def parallel_samples_and_logprobs():
        r = client.completions.create(model=name, prompt=PROMPT, max_tokens=8, temperature=1.0, seed=3, n=3, logprobs=2,
                                      extra_body={"ignore_eos": True})
        assert sorted(c.index for c in r.choices) == [0, 1, 2]
        assert r.usage.completion_tokens == 24, r.usage
        for c in r.choices:
            lp = c.logprobs
            assert len(lp.tokens) == 8 and len(lp.token_logprobs) == 8 and len(lp.top_logprobs) == 8
            assert all(v <= 0 for v in lp.token_logprobs)
            assert all(len(t) <= 2 for t in lp.top_logprobs)
        g = client.completions.create(model=name, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=1)
        for tok, top in zip(g.choices[0].logprobs.token_logprobs, g.choices[0].logprobs.top_logprobs):
            assert abs(max(top.values()) - tok) < 1e-5, (tok, top)  # greedy picks the top token
        ch = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                            temperature=0, logprobs=True, top_logprobs=3)
        content = ch.choices[0].logprobs.content
        assert len(content) == ch.usage.completion_tokens and all(len(e.top_logprobs) == 3 for e in content)

    def stop_strings():
        ref = client.completions.create(model=name, prompt=PROMPT, max_tokens=40, temperature=0).choices[0].text
        word = ref.split()[3]
        r = client.completions.create(model=name, prompt=PROMPT, max_tokens=40, temperature=0, stop=[word])
        assert r.choices[0].finish_reason == "stop", r
        assert r.choices[0].text == ref[:ref.index(word)], (r.choices[0].text, ref)
        s = "".join(c.choices[0].text for c in client.completions.create(
            model=name, prompt=PROMPT, max_tokens=40, temperature=0, stop=word, stream=True))
        assert s == r.choices[0].text, (s, r.choices[0].text)

    def unseeded_samples_differ_seeded_repeat():
        ask = lambda **kw: client.completions.create(model=name, prompt="The green frog", max_tokens=30, temperature=1.5,
                                                     extra_body={"ignore_eos": True}, **kw).choices[0].text
        assert len({ask() for _ in range(3)}) > 1, "three unseeded sampled replies were identical"
        assert ask(seed=11) == ask(seed=11)

    def errors_are_openai_errors():
        try:
            client.completions.create(model=name, prompt=PROMPT, max_tokens=10 ** 7)
            raise AssertionError("accepted max_tokens 1e7")
        except openai.BadRequestError as e:
            msg = e.body["message"] if isinstance(e.body, dict) else str(e)
            assert "2048" in msg and "10000000" in msg, msg  # both lengths named
        try:
            client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
            raise AssertionError("accepted an unknown model")
        except openai.NotFoundError:
            pass
        try:
            client.chat.completions.create(model=name, messages=[{"role": "wizard", "content": "x"}], max_tokens=2)
            raise AssertionError("accepted role wizard")
        except openai.BadRequestError:
            pass

    def metrics_parse_with_vllm_names():
        smp = samples(srv.metrics_text())
        for n in ["vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                  "vllm:num_preemptions_total", "vllm:num_requests_running", "vllm:num_requests_waiting",
                  "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:cache_config_info",
                  "vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
                  "vllm:request_prefill_kv_computed_tokens_count", "kvscope:kv_waste_perc", "kvscope:evictions_total"]:
            value(smp, n, model_name=name)
        info = [dict(ls) for (n, ls), v in smp.items() if n == "vllm:cache_config_info"]
        assert info and info[0]["block_size"] == "16" and info[0]["cache_dtype"] == "f32" and int(info[0]["num_gpu_blocks"]) > 0
        assert 0 <= value(smp, "vllm:kv_cache_usage_perc") <= 1
        assert value(smp, "vllm:prefix_cache_hits_total") > 0  # the shared system prompt
        assert value(smp, "vllm:prefix_cache_hits_total") <= value(smp, "vllm:prefix_cache_queries_total")
        finished = value(smp, "vllm:request_success_total", finished_reason="stop") + \
            value(smp, "vllm:request_success_total", finished_reason="length")
        assert value(smp, "vllm:e2e_request_latency_seconds_count") == finished
        assert value(smp, "vllm:time_to_first_token_seconds_bucket", le="+Inf") >= finished
        assert value(smp, "kvscope:kv_validation_failures_total") == 0

    def api_key():
        keyed = Server(CLI, MODEL, "--api-key", "sekrit")
        try:
            assert keyed.request("GET", "/health")[0] == 200  # open without the key
            assert keyed.request("GET", "/v1/models")[0] == 401
            assert keyed.request("GET", "/metrics", headers={"Authorization": "Bearer wrong"})[0] == 401
            status, body = keyed.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
            assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error", body
            bad = openai.OpenAI(base_url=keyed.base + "/v1", api_key="wrong", max_retries=0)
            try:
                bad.models.list()
                raise AssertionError("a wrong key was accepted")
            except openai.AuthenticationError:
                pass
            good = openai.OpenAI(base_url=keyed.base + "/v1", api_key="sekrit", max_retries=0)
            assert good.completions.create(model=keyed.model_name, prompt="x", max_tokens=2).usage.completion_tokens >= 1
        finally:
            keyed.stop()

    for name_, fn in [("models", models), ("greedy_matches_generate", greedy_matches_generate),
                      ("chat_whole_and_streamed", chat_whole_and_streamed),
                      ("sixteen_concurrent_streams", sixteen_concurrent_streams),
                      ("shared_system_prompt_hits_cache", shared_system_prompt_hits_cache),
                      ("client_closes_mid_stream", client_closes_mid_stream),
                      ("parallel_samples_and_logprobs", parallel_samples_and_logprobs),
                      ("stop_strings", stop_strings), ("unseeded_samples_differ_seeded_repeat", unseeded_samples_differ_seeded_repeat), ("errors_are_openai_errors", errors_are_openai_errors),
                      ("metrics_parse_with_vllm_names", metrics_parse_with_vllm_names), ("api_key", api_key)]:
        checks.run(name_, fn)
    assert srv.alive(), "the server died"
    srv.stop()
    checks.exit()


if __name__ == "__main__":
    main()
