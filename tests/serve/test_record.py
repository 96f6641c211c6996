"""`kvscope-cli serve --record`, driven by the `openai` package (PyPI): the recording holds one
line per sequence in arrival order with the lengths the server reported, and `kvscope-cli replay`
of it serves from its prefix cache exactly the prompt tokens the live engine served from its own
(sequential requests, same block size). usage: test_record.py KVSCOPE_CLI MODEL"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile

import openai

from serve_fixture import Server

CLI, MODEL = sys.argv[1], sys.argv[2]
SYSTEM = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. " * 3


def serve_and_send(path, requests, parallel=False):
    srv = Server(CLI, MODEL, "--record", path, "--block-size", "16")
    client = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=120)

    def one(req):
        prompt, user, n_out = req
        r = client.completions.create(model=srv.model_name, prompt=prompt, max_tokens=n_out, temperature=0,
                                      user=user, extra_body={"ignore_eos": True})
        return r.usage

    try:
        if parallel:
            with concurrent.futures.ThreadPoolExecutor(8) as ex:
                usages = list(ex.map(one, requests))
        else:
            usages = [one(r) for r in requests]
    finally:
        srv.stop()  # SIGTERM: the recorder writes what it still holds
    return usages


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    tmp = tempfile.mkdtemp()
    # Sequential: two questions on a shared system prompt, then the first again, each by a user.
    seq = [(SYSTEM + "What did Lily see?", "alice", 5), (SYSTEM + "Where did Lily go?", "bob", 3),
           (SYSTEM + "What did Lily see?", "alice", 4), ("Hi", "", 2)]
    path = os.path.join(tmp, "seq.jsonl")
    usages = serve_and_send(path, seq)
    lines = read_lines(path)
    assert len(lines) == len(seq), lines
    for line, u, (_, user, n_out) in zip(lines, usages, seq):
        assert line["input_length"] == u.prompt_tokens and line["output_length"] == u.completion_tokens == n_out, (line, u)
        assert line["block_size"] == 16 and len(line["hash_ids"]) == u.prompt_tokens // 16, line
        assert line.get("session_id", "") == user, line
    ts = [line["timestamp_ms"] for line in lines]
    assert ts == sorted(ts), ts
    # Shared prefix: equal leading ids; the repeated prompt has all the same ids.
    assert lines[0]["hash_ids"][:5] == lines[1]["hash_ids"][:5] != lines[0]["hash_ids"] and lines[0]["hash_ids"] == lines[2]["hash_ids"], lines[:3]
    live_hits = sum(u.prompt_tokens_details.cached_tokens for u in usages)
    assert live_hits > 0, usages
    out = subprocess.run([CLI, "replay", "--trace", path, "--format", "kvscope", "--block-size", "16", "--json-out",
                          os.path.join(tmp, "r.json")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    curve = json.load(open(os.path.join(tmp, "r.json")))["curve"]
    assert curve[0]["hit_tokens"] == live_hits, (curve[0], [u.prompt_tokens_details.cached_tokens for u in usages])
    print("sequential: %d lines, %d hit tokens live and replayed" % (len(lines), live_hits))

    # Concurrent: 16 requests from 8 threads finish in any order; the lines still come in
    # arrival order, one per request, and the file replays.
    conc = [(SYSTEM + "Question %d?" % i, "u%d" % (i % 3), 2 + i % 5) for i in range(16)]
    path = os.path.join(tmp, "conc.jsonl")
    usages = serve_and_send(path, conc, parallel=True)
    lines = read_lines(path)
    assert len(lines) == 16, len(lines)
    ts = [line["timestamp_ms"] for line in lines]
    assert ts == sorted(ts), ts
    assert sorted(line["output_length"] for line in lines) == sorted(u.completion_tokens for u in usages)
    out = subprocess.run([CLI, "replay", "--trace", path, "--format", "kvscope", "--block-size", "16"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    # A file that cannot be written is a usage error, not a crash.
    bad = subprocess.run([CLI, "serve", "--model", MODEL, "--port", "0", "--record", "/nonexistent/dir/x.jsonl"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "cannot write" in bad.stderr, (bad.returncode, bad.stderr)
    print("serve --record: ok")


if __name__ == "__main__":
    main()
