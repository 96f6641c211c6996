#!/usr/bin/env python3
"""Serving speed: `kvscope-cli serve` against llama.cpp's `llama-server` on the same GGUF file.

The workload of issue 32: C concurrent streaming clients (the `openai` package's AsyncOpenAI,
all in this one asyncio process), each sending --waves requests one after the other; a request
is a system prompt of about 600 tokens shared by every client, then the client's own question,
and asks for --gen tokens at temperature 0 with EOS ignored (both servers accept
`ignore_eos`). Each (client count, repetition) gets a system prompt of its own, so every
measurement starts with a cold prefix on both servers.

Both servers run at once with the same thread count and the same context per request
(--ctx-per-client, 1024): kvscope with its defaults otherwise (paged KV, prefix caching, f32 KV)
and --max-model-len of that context, llama-server with one slot per client at the most
(-np max(C)), that context per slot and its prompt cache (on by default). The model's own
context (32K for gemma-3) as kvscope's max-model-len would plan its sliding-window pool for ~5
full-length sequences and preempt short ones beyond that; kvscope's preemptions per
measurement (from its /metrics) go into the JSON. The idle one is paused with SIGSTOP
while the other is measured, and the order alternates between repetitions. Reported per server
and client count: completion tokens/s over the whole run (all tokens / wall time from the first
request to the last token), mean and p50 TTFT, p50 inter-token latency, and the load
generator's own CPU share (it shares the cores with the server); medians over --reps, with the
ratio kvscope / llama-server and kvscope's C-client / 1-client tokens/s.

usage: benchmarks/serve_vs_llama_server.py --cli build/app/kvscope-cli --llama-server PATH
       --model M.gguf [--clients 1,4,16] [--waves 2] [--gen 32] [--reps 2] [--threads 2]
       [--ctx-per-client 1024] [--out F]
Needs the `openai` package (the serve peer tests' venv has it). Loopback only.
"""
import argparse
import asyncio
import datetime
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import openai

WORDS = ("the paged cache keeps every token of a sequence in fixed blocks and a block table maps "
         "logical positions to physical blocks so memory is taken only when a block fills and "
         "shared prefixes are stored once").split()


def system_prompt(tag, n_words=420):
    # ~600 tokens of plain text; the tag makes each measurement's prefix new to both servers.
    body = " ".join(WORDS[i % len(WORDS)] for i in range(n_words))
    return "System %s. You answer questions about caches. %s.\n" % (tag, body)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit("server exited with %d" % proc.returncode)
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit("server not ready: " + url)


class Server:
    def __init__(self, name, cmd, port):
        self.name, self.port = name, port
        self.base = "http://127.0.0.1:%d" % port
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(self.base, self.proc)
        with urllib.request.urlopen(self.base + "/v1/models", timeout=10) as r:
            self.model = json.load(r)["data"][0]["id"]  # the name each server answers to

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def one_request(client, model, prompt, gen, out):
    t0 = time.perf_counter()
    times, usage = [], None
    stream = await client.completions.create(model=model, prompt=prompt, max_tokens=gen, temperature=0, stream=True,
                                             stream_options={"include_usage": True},
                                             extra_body={"ignore_eos": True})
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            times.append(time.perf_counter())
        if getattr(chunk, "usage", None):
            usage = chunk.usage
    tokens = usage.completion_tokens if usage else len(times)
    out.append({"start": t0, "first": times[0] if times else None, "end": times[-1] if times else time.perf_counter(),
                "tokens": tokens, "itl": [b - a for a, b in zip(times, times[1:])]})


async def client_loop(client, model, sys_prompt, c, waves, gen, out):
    for w in range(waves):
        question = "Question %d from client %d: how many blocks does a prompt of %d tokens take?\nAnswer:" % (
            w, c, 100 + 37 * c + w)
        await one_request(client, model, sys_prompt + question, gen, out)


def preemptions(server):
    if server.name != "kvscope":
        return None
    with urllib.request.urlopen(server.base + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("vllm:num_preemptions_total"):
                return float(line.split()[-1])
    return None


async def measure(server, n_clients, waves, gen, tag):
    client = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=600)
    out = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(client_loop(client, server.model, system_prompt(tag), c, waves, gen, out)
                           for c in range(n_clients)))
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    await client.close()
    tokens = sum(r["tokens"] for r in out)
    ttft = [r["first"] - r["start"] for r in out if r["first"]]
    itl = [x for r in out for x in r["itl"]]
    return {"completion_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
            "mean_ttft_ms": 1e3 * statistics.mean(ttft), "p50_ttft_ms": 1e3 * statistics.median(ttft),
            "p50_itl_ms": 1e3 * statistics.median(itl) if itl else None,
            "loadgen_cpu_share": cpu / wall / (os.cpu_count() or 1), "requests": len(out)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--waves", type=int, default=2)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-per-client", type=int, default=1024)
    ap.add_argument("--out")
    a = ap.parse_args()
    clients = [int(x) for x in a.clients.split(",")]
    np_slots = max(clients)
    kv_port, ll_port = free_port(), free_port()
    servers = {
        "kvscope": Server("kvscope", [a.cli, "serve", "--model", a.model, "--port", str(kv_port), "--threads",
                                      str(a.threads), "--max-model-len", str(a.ctx_per_client)], kv_port),
        "llama-server": Server("llama-server", [a.llama_server, "-m", a.model, "--port", str(ll_port), "-t",
                                                str(a.threads), "-tb", str(a.threads), "-np", str(np_slots), "-c",
                                                str(a.ctx_per_client * np_slots), "--no-webui"], ll_port),
    }
    samples = {name: {c: [] for c in clients} for name in servers}
    try:
        for s in servers.values():  # warm up: one short request each, then paused
            asyncio.run(measure(s, 1, 1, 4, "warm-up"))
            s.pause()
        for rep in range(a.reps):
            for c in clients:
                order = list(servers) if (rep + c) % 2 == 0 else list(reversed(servers))
                for name in order:
                    s = servers[name]
                    s.resume()
                    p0 = preemptions(s)
                    r = asyncio.run(measure(s, c, a.waves, a.gen, "%d-%d" % (rep, c)))
                    if p0 is not None:
                        r["preemptions"] = preemptions(s) - p0
                    s.pause()
                    samples[name][c].append(r)
                    print("rep %d %-12s %2d clients: %6.1f tok/s, mean TTFT %7.1f ms, p50 ITL %s ms, "
                          "load generator %.0f%% CPU" % (rep, name, c, r["tokens_per_s"], r["mean_ttft_ms"],
                                                         "%.1f" % r["p50_itl_ms"] if r["p50_itl_ms"] else "-",
                                                         100 * r["loadgen_cpu_share"]), flush=True)
    finally:
        for s in servers.values():
            s.stop()

    def med(name, c, key):
        return statistics.median(x[key] for x in samples[name][c])

    table = []
    for c in clients:
        row = {"clients": c}
        for name in servers:
            row[name] = {k: med(name, c, k) for k in ("tokens_per_s", "mean_ttft_ms", "p50_ttft_ms", "p50_itl_ms",
                                                        "loadgen_cpu_share")}
            if "preemptions" in samples[name][c][0]:
                row[name]["preemptions"] = max(x["preemptions"] for x in samples[name][c])
        row["ratio_tokens_per_s"] = row["kvscope"]["tokens_per_s"] / row["llama-server"]["tokens_per_s"]
        row["ratio_mean_ttft"] = row["kvscope"]["mean_ttft_ms"] / row["llama-server"]["mean_ttft_ms"]
        table.append(row)
    one = next((r for r in table if r["clients"] == 1), None)
    print("\n| clients | kvscope tok/s | llama-server tok/s | **ratio** | mean TTFT ms kvscope / llama-server | "
          "kvscope vs its 1 client | load generator CPU |")
    print("|---:|---:|---:|---:|---|---:|---|")
    for r in table:
        scale = r["kvscope"]["tokens_per_s"] / one["kvscope"]["tokens_per_s"] if one else float("nan")
        print("| %d | %.1f | %.1f | **%.2fx** | %.0f / %.0f | %.2fx | %.0f%% / %.0f%% |" % (
            r["clients"], r["kvscope"]["tokens_per_s"], r["llama-server"]["tokens_per_s"], r["ratio_tokens_per_s"],
            r["kvscope"]["mean_ttft_ms"], r["llama-server"]["mean_ttft_ms"], scale,
            100 * r["kvscope"]["loadgen_cpu_share"], 100 * r["llama-server"]["loadgen_cpu_share"]))
    result = {"what": "kvscope serve vs llama-server, shared ~600-token system prompt, streaming openai clients",
              "command": " ".join(sys.argv), "date": datetime.date.today().isoformat(),
              "model": a.model, "threads": a.threads, "waves": a.waves, "gen": a.gen, "reps": a.reps,
              "llama_server_args": "-np %d -c %d (prompt cache on: the default)" % (np_slots, a.ctx_per_client * np_slots),
              "kvscope_args": "--max-model-len %d (otherwise defaults)" % a.ctx_per_client,
              "cpus": os.cpu_count(), "table": table, "samples": samples}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote " + a.out)


if __name__ == "__main__":
    main()
