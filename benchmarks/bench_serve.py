#!/usr/bin/env python3
"""HTTP serving speed of `kvscope-cli serve` against the same workload through `kvscope-cli run`.

For each model and each client count C (1, 4, 16 by default) the same requests (the prompts and
lengths of a scenario file, ignore_eos, so every request generates exactly its max_tokens) go
  * through the server: C client threads, each sending its next streamed /v1/completions
    request as soon as the previous one ends (closed loop), timestamps taken per SSE chunk;
  * through `kvscope-cli run`: the same requests, all arriving at step 0, with --max-running C,
    so the engine also holds at most C of them at a time (no HTTP, no JSON, no threads).
Server and run alternate, --reps times each; the medians and the ratio server / run of
generated tokens/s are reported (the HTTP overhead), with TTFT and inter-token-latency
percentiles as the clients saw them. The clients are Python threads on the same machine as the
server, so on a small machine they compete with it for the cores: that cost is part of the
number, and the JSON says how many cores there were.

usage: benchmarks/bench_serve.py --cli build/app/kvscope-cli [--model M ...] [--clients 1,4,16]
       [--scenario resources/scenarios/tiny-completions.json] [--requests N] [--reps 3] [--threads 1]
       [--out results.json]
Only the Python standard library is needed. Loopback only.
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Server:
    def __init__(self, cli, model, threads, extra=()):
        self.proc = subprocess.Popen([cli, "serve", "--model", model, "--port", "0", "--threads", str(threads), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError("server did not start: %r" % line)
        self.port = int(line.split("127.0.0.1:")[1].split()[0])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def stream_one(port, req):
    """One streamed completion; returns (ttft_s, [inter-chunk gaps], completion_tokens, tpot_s).

    Chunk gaps are as the client read them: chunks that arrive together (the client was busy)
    count as gaps of 0. TPOT, (last token time - first token time) / (tokens - 1), is the
    per-request mean that does not depend on how the reads fell."""
    body = json.dumps({"prompt": req["prompt"], "max_tokens": req["max_tokens"], "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}, **req.get("sampling", {})})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:200]))
    ttft, last, gaps, tokens = None, None, [], 0
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        now = time.perf_counter()
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            j = json.loads(event[6:])
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            if j.get("choices") and j["choices"][0].get("finish_reason") is None:
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
    conn.close()
    tpot = (last - t0 - ttft) / (tokens - 1) if tokens > 1 and ttft is not None else None
    return ttft, gaps, tokens, tpot


def run_server(port, reqs, clients):
    lock = threading.Lock()
    todo = list(range(len(reqs)))
    ttfts, itls, tpots, tokens, errors = [], [], [], [0], []

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            try:
                t, g, n, tp = stream_one(port, reqs[i])
            except Exception as e:  # a failed request is reported, never silently dropped
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                ttfts.append(t)
                itls.extend(g)
                if tp is not None:
                    tpots.append(tp)
                tokens[0] += n
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError("%d requests failed: %s" % (len(errors), errors[:3]))
    return {"wall_s": wall, "generated_tokens": tokens[0], "tokens_per_s": tokens[0] / wall,
            "requests_per_s": len(reqs) / wall, "ttft_ms": [x * 1000 for x in ttfts], "itl_ms": [x * 1000 for x in itls],
            "tpot_ms": [x * 1000 for x in tpots]}


def run_cli(cli, model, reqs, clients, threads, max_model_len):
    wl = {"name": "bench-serve", "description": "bench_serve.py: every request at step 0", "max_model_len": max_model_len,
          "requests": [dict(r, arrival_step=0, ignore_eos=True) for r in reqs]}
    with tempfile.TemporaryDirectory() as d:
        path, out = os.path.join(d, "wl.json"), os.path.join(d, "out.json")
        with open(path, "w") as f:
            json.dump(wl, f)
        subprocess.run([cli, "run", "--model", model, "--workload", path, "--max-running", str(clients), "--threads",
                        str(threads), "--json-out", out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            p = json.load(f)["paged"]
    return {"wall_s": p["wall_s"], "generated_tokens": p["generated_tokens"], "tokens_per_s": p["tokens_per_s"],
            "requests_per_s": len(reqs) / p["wall_s"], "mean_ttft_ms": p["mean_ttft_ms"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "app", "kvscope-cli"))
    ap.add_argument("--model", action="append", help="GGUF file (repeatable); default stories260K from ../shared")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--scenario", default=os.path.join(ROOT, "resources", "scenarios", "tiny-completions.json"))
    ap.add_argument("--requests", type=int, default=48, help="requests per run (the scenario's, repeated as needed)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="backend threads for both server and run")
    ap.add_argument("--out")
    a = ap.parse_args()
    models = a.model or [os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")]
    with open(a.scenario) as f:
        sc = json.load(f)
    base = [{"prompt": r["prompt"], "max_tokens": r["max_tokens"], "sampling": r.get("sampling", {})} for r in sc["requests"]]
    reqs = [dict(base[i % len(base)]) for i in range(a.requests)]
    for i, r in enumerate(reqs):  # repeated prompts differ in their seed only (no extra prefix hits)
        r["sampling"] = dict(r["sampling"], seed=r["sampling"].get("seed", 0) + 7919 * (i // len(base)))
    result = {"command": " ".join(sys.argv), "cores": os.cpu_count(), "scenario": os.path.basename(a.scenario),
              "requests": len(reqs), "reps": a.reps, "backend_threads": a.threads, "models": []}
    for model in models:
        entry = {"model": os.path.basename(model), "by_clients": []}
        srv = Server(a.cli, model, a.threads)
        try:
            stream_one(srv.port, reqs[0])  # warm-up
            for c in [int(x) for x in a.clients.split(",")]:
                s_runs, r_runs = [], []
                for _ in range(a.reps):  # alternating, so drift hits both alike
                    s_runs.append(run_server(srv.port, reqs, c))
                    r_runs.append(run_cli(a.cli, model, reqs, c, a.threads, sc.get("max_model_len", 2048)))
                s_tps = statistics.median(x["tokens_per_s"] for x in s_runs)
                r_tps = statistics.median(x["tokens_per_s"] for x in r_runs)
                ttft = [t for x in s_runs for t in x["ttft_ms"]]
                itl = [t for x in s_runs for t in x["itl_ms"]]
                tpot = [t for x in s_runs for t in x["tpot_ms"]]
                row = {"clients": c,
                       "serve_tokens_per_s": s_tps, "run_tokens_per_s": r_tps, "serve_over_run": s_tps / r_tps,
                       "serve_requests_per_s": statistics.median(x["requests_per_s"] for x in s_runs),
                       "run_requests_per_s": statistics.median(x["requests_per_s"] for x in r_runs),
                       "ttft_ms": {"p50": pct(ttft, 50), "p90": pct(ttft, 90), "p99": pct(ttft, 99)},
                       "itl_ms": {"p50": pct(itl, 50), "p90": pct(itl, 90), "p99": pct(itl, 99)},
                       "tpot_ms": {"p50": pct(tpot, 50), "p90": pct(tpot, 90), "p99": pct(tpot, 99)},
                       "run_mean_ttft_ms": statistics.median(x["mean_ttft_ms"] for x in r_runs),
                       "serve_tokens_per_s_runs": [x["tokens_per_s"] for x in s_runs],
                       "run_tokens_per_s_runs": [x["tokens_per_s"] for x in r_runs]}
                entry["by_clients"].append(row)
                print("%s C=%-2d serve %8.1f tok/s  run %8.1f tok/s  ratio %.3f  req/s %.1f  TTFT p50 %.1f p99 %.1f ms  TPOT p50 %.2f p99 %.2f ms"
                      % (entry["model"], c, s_tps, r_tps, s_tps / r_tps, row["serve_requests_per_s"], row["ttft_ms"]["p50"],
                         row["ttft_ms"]["p99"], row["tpot_ms"]["p50"], row["tpot_ms"]["p99"]), file=sys.stderr, flush=True)
        finally:
            srv.stop()
        result["models"].append(entry)
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
