#!/usr/bin/env python3
"""How long `kvscope-cli replay` takes on the Mooncake traces, and how much memory, as JSON.

Runs each configuration `--reps` times (alternating them, so a busy spell of a shared machine hits
all of them) and reports per configuration the wall seconds (min and median) and the peak RSS of
the replay process (os.wait4's ru_maxrss), plus what the replay itself reported (hit ratios,
timed-mode latencies), so the numbers in docs/replay.md can be reproduced:

  python3 benchmarks/replay_bench.py --cli build/app/kvscope-cli --traces ../shared/traces \\
      --out benchmarks/results/replay-DATE.json
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

CONFIGS = {
    # issue 31's speed targets: six capacities of the conversation hour, and 16 timed instances
    "curve-512-six-capacities": ["--trace", "{conv}", "--block-size", "512", "--capacity-tokens", "0,1M,2M,4M,8M,16M"],
    "curve-16-six-capacities": ["--trace", "{conv}", "--block-size", "16", "--capacity-tokens", "0,1M,2M,4M,8M,16M"],
    "fleet-4-prefix-aware": ["--trace", "{conv}", "--instances", "4", "--router", "prefix-aware",
                             "--capacity-tokens", "1M"],
    "timed-16-instances": ["--trace", "{conv}", "--instances", "16", "--router", "prefix-aware", "--capacity-tokens",
                           "256K", "--timed", "--preset", "Llama-3-70B", "--weights", "fp8", "--hardware", "H100",
                           "--tp", "2"],
}


def run_once(cli, args, json_out):
    t0 = time.perf_counter()
    p = subprocess.Popen([cli, "replay", *args, "--json-out", json_out], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"replay {' '.join(args)} exited {p.returncode}: {err[-500:]}")
    return wall, usage.ru_maxrss * 1024


def summary(report):
    out = {}
    if "curve" in report:
        out["hit_ratio"] = {str(c["capacity_tokens"]): c["hit_ratio"] for c in report["curve"]}
    if "fleet" in report:
        out["fleet_hit_ratio"] = report["fleet"]["total"]["hit_ratio"]
        out["pooled_hit_ratio"] = report["pooled"]["total"]["hit_ratio"]
    if "timed" in report:
        t = report["timed"]
        out["timed"] = {k: t[k] for k in ("finished", "rejected", "preemptions", "makespan_s")}
        out["timed"]["ttft_s"] = t["ttft_s"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/app/kvscope-cli")
    ap.add_argument("--traces", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", action="append", help="configuration names (default: all)")
    ap.add_argument("--out")
    a = ap.parse_args()
    conv = os.path.join(a.traces, "conversation_trace.jsonl")
    names = a.only or list(CONFIGS)
    samples = {n: [] for n in names}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for n in names:
                args = [x.format(conv=conv) for x in CONFIGS[n]]
                path = os.path.join(tmp, n + ".json")
                wall, rss = run_once(a.cli, args, path)
                samples[n].append((wall, rss))
                results[n] = summary(json.load(open(path)))
                print(f"rep {rep + 1}: {n}: {wall:.2f} s, {rss / 2**20:.0f} MiB", flush=True)
    report = {
        "kind": "kvscope replay benchmark",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(), "load_avg": os.getloadavg()},
        "trace": conv,
        "configs": {
            n: {"args": CONFIGS[n], "wall_s_min": min(w for w, _ in samples[n]),
                "wall_s_median": statistics.median(w for w, _ in samples[n]),
                "peak_rss_bytes_max": max(r for _, r in samples[n]), "samples": samples[n], "result": results[n]}
            for n in names
        },
    }
    text = json.dumps(report, indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
