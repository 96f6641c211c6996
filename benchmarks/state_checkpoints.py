#!/usr/bin/env python3
"""Prefix caching on a hybrid recurrent model: state-checkpoint memory against TTFT.

Runs the shared-system-prompt scenario (16 questions after one ~370-token system prompt) on a
synthetic qwen35 (Gated DeltaNet + gated attention, random weights: the work is real, the words
are not) under each checkpoint policy and budget, the processes alternating between configs,
and reports per config the median over passes of the mean TTFT, the prompt tokens computed,
the prefix-cache hits and the checkpoints' peak memory, with TTFT as a ratio to the run
without checkpoints (no prefix-cache hits at all) from the same passes.

    benchmarks/state_checkpoints.py [--build build] [--passes 3] [--out FILE]

Writes benchmarks/results/state-checkpoints-<date>.json and prints a Markdown table.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# policy, checkpoint memory in MiB
CONFIGS = [("off", 256), ("prompt-end", 256), ("every:8", 256), ("every:4", 256), ("every:2", 256),
           ("every-block", 256), ("every-block", 8), ("every-block", 2)]
# Qwen3.5's shape at a tenth of the width: 3 of 4 layers Gated DeltaNet, Q8_0 weights.
MODEL = ["--arch", "qwen35", "--dtype", "q8_0", "--n-vocab", "2048", "--n-embd", "512", "--n-layer", "8",
         "--n-head", "8", "--n-head-kv", "2", "--n-ff", "1536", "--attn-interval", "4", "--ssm-state", "64",
         "--ssm-v-heads", "8", "--ssm-k-heads", "4", "--rope-dim", "32"]


def run(cli, model, workload, policy, mib, out):
    subprocess.run([cli, "run", "--workload", workload, "--model", model, "--json-out", out, "--quiet",
                    "--threads", "2", "--state-checkpoints", policy, "--checkpoint-memory", str(mib)],
                   check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)["paged"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(
        ROOT, "benchmarks", "results", f"state-checkpoints-{datetime.date.today().isoformat()}.json"))
    a = ap.parse_args()
    cli = os.path.join(a.build, "app", "kvscope-cli")
    workload = os.path.join(ROOT, "resources", "scenarios", "shared-system-prompt.json")
    rows = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "qwen35.gguf")
        subprocess.run([cli, "make-model", "--out", model] + MODEL, check=True, stdout=subprocess.DEVNULL)
        for p in range(a.passes):
            order = CONFIGS if p % 2 == 0 else list(reversed(CONFIGS))  # alternate: drift hits all alike
            for c in order:
                rows[c].append(run(cli, model, workload, c[0], c[1], os.path.join(tmp, "r.json")))
    off_ttft = statistics.median(r["mean_ttft_ms"] for r in rows[CONFIGS[0]])
    results = []
    for (policy, mib), rs in rows.items():
        ck = rs[0]["state_checkpoints"]
        ttft = statistics.median(r["mean_ttft_ms"] for r in rs)
        results.append({"policy": policy, "checkpoint_memory_mib": mib, "mean_ttft_ms": ttft,
                        "ttft_vs_off": ttft / off_ttft, "prefill_tokens": rs[0]["prefill_tokens"],
                        "prefix_hit_tokens": rs[0]["prefix_cache_hits_tokens"],
                        "prompt_tokens": rs[0]["prefix_cache_queries_tokens"],
                        "checkpoints_saved": ck["saved"], "checkpoints_evicted": ck["evicted"],
                        "checkpoint_peak_mib": ck["peak_bytes"] / 2**20, "checkpoint_bytes_each": ck["bytes_each"],
                        "ttft_samples_ms": [r["mean_ttft_ms"] for r in rs]})
    doc = {"benchmark": "state checkpoints: memory vs TTFT, shared-system-prompt, synthetic qwen35",
           "command": "benchmarks/state_checkpoints.py --passes %d" % a.passes, "model": " ".join(MODEL),
           "date": datetime.date.today().isoformat(), "results": results}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print("| policy | budget MiB | checkpoints peak MiB | saved / evicted | prompt tokens computed | hit tokens | "
          "mean TTFT ms | vs off |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['policy']} | {r['checkpoint_memory_mib']} | {r['checkpoint_peak_mib']:.1f} | "
              f"{r['checkpoints_saved']} / {r['checkpoints_evicted']} | {r['prefill_tokens']} | "
              f"{r['prefix_hit_tokens']} | {r['mean_ttft_ms']:.1f} | {r['ttft_vs_off']:.2f} |")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
