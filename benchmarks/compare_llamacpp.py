#!/usr/bin/env python3
"""kvscope vs llama.cpp on the same GGUF file, side by side, in one process tree.

For every model given, both engines get:
  * the same GGUF file,
  * the same thread count (--threads, default 2),
  * the same prompt: --prompt-len token ids (default 128), BOS first, the rest drawn
    uniformly from [3, n_vocab) by Python's random.Random(--seed),
  * the same number of generated tokens (--gen, default 64), EOS ignored, greedy sampling.

Definitions (identical for both engines, wall clock):
  prefill tokens/s = prompt_len / (time to evaluate the whole prompt as one batch + pick the first token)
  decode tokens/s  = (gen - 1)  / (time for the remaining gen-1 single-token steps, sampling included)
This is exactly what `kvscope-cli bench` / `generate` report.

Repetitions alternate the engines (kvscope, llama.cpp, llama.cpp, kvscope, ...) so a burst of
background load hits both; the medians are reported.  This is meant for small shared machines:
before every sample the script waits (up to --max-wait) until other processes leave the CPUs
alone, and it records for every sample the share of CPU time that *other* processes used while
it ran (foreign_cpu_frac, from /proc/stat minus our own CPU time).  Medians are taken over the
quiet samples (<= --noisy-above) when at least half of them are quiet, else over all of them
(the JSON says which).  Raw samples and the llama.cpp build's system info go into the JSON.

llama.cpp comes from PyPI, in one of two ways (--llama):
  llama-cpp-python  built from its sdist (bundled llama.cpp) with GGML_NATIVE=ON, i.e. compiled for
                    this CPU like kvscope's default build (-march=native).  Driven through its
                    low-level C API (llama_decode + a greedy sampler), timed here.  Preferred.
  xllamacpp         prebuilt CPU wheel (AVX2/FMA only, no AVX-512), driven through its embedded
                    llama.cpp server; times are the server's own `timings` (prompt_ms, predicted_ms).
  auto              llama-cpp-python if importable, else xllamacpp.

kvscope is timed with `kvscope-cli bench --reps 1` (a warm-up run, then a timed one); see KvscopeEngine.

Beyond the two engines (issue 14), in the same script and the same alternation:
  * kvscope's previous matmul path (one vec-dot per weight row and token) as a third engine,
    `kvscope-vecdot`: the same binary with KVSCOPE_GEMM=off and KVSCOPE_GEMV=off (prefill and
    decode both on the one-row vec-dot, the fused Q/K/V hand-off off too), so old and new are
    side by side;
  * several prompt lengths (--prompt-len 128,512);
  * batched decode (`kvscope-cli bench --no-single --no-paging --batches 1,16`), new and old path
    alternating, tokens/s and the batch-16 / batch-1 ratio (--batch-model: which models);
  * benchmarks/gemm_bench (--gemm-bench): GEMM GOP/s against the measured int8 peak, and a
    STREAM-like read bandwidth; decode is then reported as a fraction of the bandwidth limit
    bandwidth / (weight bytes one decode token reads: every matrix once, the output matrix
    included, the token embedding only if it is also the output matrix).

A correctness sanity check runs too: the greedy tokens of both engines on the same prompt ids
(the first --check-tokens of them, default 16).  Random-weight models have tiny logit margins,
so a late divergence is not by itself a bug; the report says how many match and where the
first mismatch is.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# ----------------------------------------------------------------------------------------------
# helpers

def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f) - idle, sum(f)


def own_cpu_s(children: bool) -> float:
    t = os.times()
    return t.children_user + t.children_system if children else t.user + t.system


def busy_fraction(window_s: float = 1.0) -> float:
    """Share of all CPUs busy over a short window while this script sleeps (= other people's load)."""
    b0, t0 = cpu_jiffies()
    time.sleep(window_s)
    b1, t1 = cpu_jiffies()
    return (b1 - b0) / max(1, t1 - t0)


def wait_for_quiet(quiet_below: float, max_wait_s: float) -> float:
    """Wait (at most max_wait_s) until other processes use less than quiet_below of the CPUs."""
    start = time.time()
    busy = busy_fraction()
    while busy > quiet_below and time.time() - start < max_wait_s:
        busy = busy_fraction(2.0)
    return busy


class ForeignLoad:
    """Measures how much CPU *other* processes used while one sample ran (0 = machine to ourselves)."""

    def __init__(self, children: bool):
        self.children = children

    def __enter__(self):
        self.b0, self.t0 = cpu_jiffies()
        self.own0 = own_cpu_s(self.children)
        self.w0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        b1, t1 = cpu_jiffies()
        hz = os.sysconf("SC_CLK_TCK")
        ncpu = os.cpu_count() or 1
        wall = time.perf_counter() - self.w0
        foreign_s = max(0.0, (b1 - self.b0) / hz - (own_cpu_s(self.children) - self.own0))
        self.frac = min(1.0, foreign_s / max(1e-9, wall * ncpu))
        return False


def make_prompt(n: int, n_vocab: int, bos: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [bos] + [rng.randrange(3, n_vocab) for _ in range(n - 1)]


def median(xs):
    return statistics.median(xs) if xs else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def first_match_stats(a: list[int], b: list[int], n: int) -> dict:
    a, b = a[:n], b[:n]
    same = sum(1 for x, y in zip(a, b) if x == y)
    prefix = 0
    for x, y in zip(a, b):
        if x != y:
            break
        prefix += 1
    return {"compared": min(len(a), len(b)), "equal_positions": same, "common_prefix": prefix,
            "kvscope": a, "llama_cpp": b}


from bench_engines import KvscopeEngine, LlamaCppPythonEngine, make_llama  # noqa: E402  (beside this file)


# ----------------------------------------------------------------------------------------------

def summarize(samples: list[dict], noisy_above: float) -> dict:
    quiet = [x for x in samples if x["foreign_cpu_frac"] <= noisy_above]
    use = quiet if len(quiet) >= max(3, (len(samples) + 1) // 2) else samples
    return {
        "prefill_tokens_per_s": median([x["prefill_tokens_per_s"] for x in use]),
        "decode_tokens_per_s": median([x["decode_tokens_per_s"] for x in use]),
        "median_over": "quiet samples" if use is quiet else "all samples (too few quiet ones)",
        "n_samples": len(samples), "n_quiet": len(quiet),
        "all_samples_median": {
            "prefill_tokens_per_s": median([x["prefill_tokens_per_s"] for x in samples]),
            "decode_tokens_per_s": median([x["decode_tokens_per_s"] for x in samples])},
        "samples": samples,
    }


def logits_check(kv: KvscopeEngine, ll, prompt: list[int], n_vocab: int) -> dict | None:
    """First-step logits of both engines on the same prompt (llama-cpp-python only)."""
    if not isinstance(ll, LlamaCppPythonEngine):
        return None
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "logits.bin"
        kv._run(["generate", "--model", str(kv.model), "--prompt-ids", ",".join(map(str, prompt)), "-n", "1",
                 "--ignore-eos", "--json", "--threads", str(kv.threads), "--logits-out", str(f)])
        a = np.fromfile(f, dtype="<f4")[:n_vocab].astype(np.float64)
    b = np.array(ll.first_logits(prompt, n_vocab), dtype=np.float64)
    ta, tb = np.argsort(-a)[:5], np.argsort(-b)[:5]
    return {
        "corr": float(np.corrcoef(a, b)[0, 1]),
        "max_abs_diff": float(np.abs(a - b).max()),
        "rms_diff": float(np.sqrt(np.mean((a - b) ** 2))),
        "logit_std": float(b.std()),
        "kvscope_top5": [int(x) for x in ta], "llama_cpp_top5": [int(x) for x in tb],
        "kvscope_top1_margin": float(a[ta[0]] - a[ta[1]]), "llama_cpp_top1_margin": float(b[tb[0]] - b[tb[1]]),
    }


def timed_sample(eng, prompt: list[int], gen: int, args, is_child: bool) -> dict:
    before = wait_for_quiet(args.quiet_below, args.max_wait)
    with ForeignLoad(children=is_child) as fl:
        s = eng.timed(prompt, gen)
    s["foreign_cpu_frac_before"] = round(before, 3)
    s["foreign_cpu_frac"] = round(fl.frac, 3)
    return s


def bench_model(args, model: Path, bandwidth_gbs: float | None) -> list[dict]:
    kv = KvscopeEngine(args.kvscope_cli, model, args.threads, args.kvscope_timing)
    engines = [("kvscope", kv)]
    if args.old_path:
        engines.append(("kvscope_vecdot", KvscopeEngine(args.kvscope_cli, model, args.threads, args.kvscope_timing,
                                                         env={"KVSCOPE_GEMM": "off", "KVSCOPE_GEMV": "off"}, name="kvscope-vecdot")))
    info = kv.describe()
    n_vocab, bos = int(info["n_vocab"]), int(info["bos"])
    max_len = max(args.prompt_lens)
    n_ctx = max(256, ((max_len + args.gen + 255) // 256) * 256)
    t_load = time.perf_counter()
    ll = make_llama(args.llama, model, args.threads, n_ctx)
    t_load = time.perf_counter() - t_load
    engines.append(("llama_cpp", ll))
    print(f"\n== {model.name}: {info['n_params']} params, vocab {n_vocab}; llama.cpp via {ll.name} "
          f"(loaded in {t_load:.1f}s)", flush=True)

    results = []
    for prompt_len in args.prompt_lens:
        prompt = make_prompt(prompt_len, n_vocab, bos, args.seed)
        # warm-up, untimed: llama.cpp gets one full run; kvscope warms up inside each `bench` process
        ll.timed(prompt, args.gen)
        samples = {key: [] for key, _ in engines}
        for r in range(args.reps):
            # Rotate the order every rep so each engine runs first, middle and last equally often.
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            if r % 2:
                order.reverse()
            for key, eng in order:
                s = timed_sample(eng, prompt, args.gen, args, isinstance(eng, KvscopeEngine))
                samples[key].append(s)
                print(f"  p{prompt_len} rep {r} {key:14s} prefill {s['prefill_tokens_per_s']:9.1f} tok/s  decode "
                      f"{s['decode_tokens_per_s']:8.1f} tok/s  (other load {s['foreign_cpu_frac']:4.0%})", flush=True)

        res = {"model": str(model), "model_file_bytes": info["file_size"], "n_params": info["n_params"], "n_vocab": n_vocab,
               "prompt_len": prompt_len, "gen": args.gen, "threads": args.threads, "reps": args.reps,
               "prompt_seed": args.seed, "prompt_ids_head": prompt[:8],
               "decode_bytes_per_token": info["decode_bytes_per_token"]}
        for key in samples:
            res[key] = summarize(samples[key], args.noisy_above)
        res["ratio_kvscope_over_llama_cpp"] = {
            m: res["kvscope"][m] / res["llama_cpp"][m] for m in ("prefill_tokens_per_s", "decode_tokens_per_s")}
        if args.old_path:
            res["ratio_kvscope_over_kvscope_vecdot"] = {
                m: res["kvscope"][m] / res["kvscope_vecdot"][m] for m in ("prefill_tokens_per_s", "decode_tokens_per_s")}
        if bandwidth_gbs:
            limit = bandwidth_gbs * 1e9 / info["decode_bytes_per_token"]
            res["decode_bandwidth_limit_tokens_per_s"] = limit
            res["decode_fraction_of_bandwidth_limit"] = {key: res[key]["decode_tokens_per_s"] / limit for key in samples}

        if args.check_tokens > 0 and prompt_len == args.prompt_lens[0]:
            a = kv.generate(prompt, args.check_tokens)["tokens"]
            b = ll.generate(prompt, args.check_tokens)
            res["greedy_token_check"] = c = first_match_stats(a, b, args.check_tokens)
            print(f"  greedy tokens: {c['equal_positions']}/{c['compared']} positions equal, common prefix {c['common_prefix']}")
            lc = logits_check(kv, ll, prompt, n_vocab)
            if lc:
                res["first_step_logits_check"] = lc
                print(f"  first-step logits: corr {lc['corr']:.5f}, max |diff| {lc['max_abs_diff']:.3f} (logit std "
                      f"{lc['logit_std']:.2f}); top-5 kvscope {lc['kvscope_top5']} llama.cpp {lc['llama_cpp_top5']}; "
                      f"top-1 margin kvscope {lc['kvscope_top1_margin']:.4f} llama.cpp {lc['llama_cpp_top1_margin']:.4f}")

        rt = res["ratio_kvscope_over_llama_cpp"]
        print(f"  p{prompt_len} median: kvscope prefill {res['kvscope']['prefill_tokens_per_s']:.1f} decode "
              f"{res['kvscope']['decode_tokens_per_s']:.1f} | llama.cpp prefill {res['llama_cpp']['prefill_tokens_per_s']:.1f} "
              f"decode {res['llama_cpp']['decode_tokens_per_s']:.1f} | kvscope/llama.cpp prefill "
              f"{rt['prefill_tokens_per_s']:.2f}x decode {rt['decode_tokens_per_s']:.2f}x", flush=True)
        res["llama_cpp_engine"] = ll.version()
        results.append(res)
    ll.close()

    if any(m in model.name for m in args.batch_model):
        results[0]["batched_decode"] = batched_decode(args, engines)
    return results


def batched_decode(args, engines) -> dict:
    """`bench --no-single --no-paging --batches ...`: new and old path alternating, medians."""
    kvs = [(k, e) for k, e in engines if isinstance(e, KvscopeEngine)]
    raw = {k: [] for k, _ in kvs}
    for r in range(args.batch_reps):
        for key, eng in (kvs if r % 2 == 0 else kvs[::-1]):
            before = wait_for_quiet(args.quiet_below, args.max_wait)
            with ForeignLoad(children=True) as fl:
                tps = eng.batched(args.batches, args.batch_gen)
            raw[key].append({"tokens_per_s": tps, "foreign_cpu_frac": round(fl.frac, 3),
                             "foreign_cpu_frac_before": round(before, 3)})
            print(f"  batched rep {r} {key:14s} " + "  ".join(f"b{b} {v:7.1f} tok/s" for b, v in tps.items()) +
                  f"  (other load {fl.frac:4.0%})", flush=True)
    out = {"batches": args.batches, "gen": args.batch_gen, "reps": args.batch_reps}
    for key, samples in raw.items():
        quiet = [x for x in samples if x["foreign_cpu_frac"] <= args.noisy_above]
        use = quiet if len(quiet) >= max(2, (len(samples) + 1) // 2) else samples
        med = {b: median([x["tokens_per_s"][b] for x in use]) for b in samples[0]["tokens_per_s"]}
        bs = list(med)
        out[key] = {"tokens_per_s": med, "median_over": "quiet samples" if use is quiet else "all samples",
                    f"ratio_b{bs[-1]}_over_b{bs[0]}": med[bs[-1]] / med[bs[0]], "samples": samples}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, type=Path, help="GGUF file (repeatable)")
    ap.add_argument("--kvscope-cli", type=Path, default=REPO / "build-bench" / "app" / "kvscope-cli")
    ap.add_argument("--kvscope-timing", choices=["bench", "generate"], default="bench")
    ap.add_argument("--llama", choices=["auto", "llama-cpp-python", "xllamacpp"], default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", default="128", help="prompt length(s), comma separated: 128,512")
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--check-tokens", type=int, default=16, help="greedy tokens compared (0: skip)")
    ap.add_argument("--quiet-below", type=float, default=0.15,
                    help="before each sample wait until other processes use less than this share of the CPUs")
    ap.add_argument("--max-wait", type=float, default=120.0, help="longest wait for --quiet-below, seconds")
    ap.add_argument("--noisy-above", type=float, default=0.10,
                    help="a sample during which other processes used more than this share of the CPUs is 'noisy'; "
                         "medians use the quiet samples when at least half (and >= 3) are quiet")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default benchmarks/results/<date>.json)")
    ap.add_argument("--old-path", action=argparse.BooleanOptionalAction, default=True,
                    help="also time kvscope's vec-dot matmul path (KVSCOPE_GEMM=off KVSCOPE_GEMV=off) as engine kvscope_vecdot")
    ap.add_argument("--gemm-bench", type=Path, default=None, help="benchmarks/gemm_bench binary: GEMM GOP/s, int8 peak, bandwidth")
    ap.add_argument("--batch-model", action="append", default=[],
                    help="run batched decode on models whose file name contains this (repeatable)")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--batch-gen", type=int, default=32)
    ap.add_argument("--batch-reps", type=int, default=3)
    ap.add_argument("--llama-omp-wait", choices=["auto", "passive", "active", "unset"], default="auto",
                    help="OMP_WAIT_POLICY for llama.cpp's OpenMP threads (read once, at import). auto: PASSIVE when "
                         "other processes already use > 25%% of the CPUs at start (spinning OpenMP barriers then "
                         "collapse: 0.5 vs 29 decode tok/s measured under 75%% foreign load), else unset (llama.cpp's default)")
    args = ap.parse_args()
    try:
        args.prompt_lens = [int(x) for x in args.prompt_len.split(",")]
    except ValueError:
        ap.error("--prompt-len takes integers separated by commas")
    if args.gen < 2 or min(args.prompt_lens) < 1:
        ap.error("need --gen >= 2 and --prompt-len >= 1")
    if args.gemm_bench and not args.gemm_bench.exists():
        ap.error(f"{args.gemm_bench} not found")
    if not args.kvscope_cli.exists():
        ap.error(f"{args.kvscope_cli} not found (build kvscope-cli first, or pass --kvscope-cli)")

    started = _dt.datetime.now(_dt.timezone.utc)
    busy0 = busy_fraction()
    policy = args.llama_omp_wait
    if policy == "auto":
        policy = "passive" if busy0 > 0.25 else "unset"
    if policy != "unset" and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = policy.upper()
    out = {
        "what": "kvscope vs llama.cpp, same GGUF / threads / prompt ids / generated tokens; medians over alternating reps",
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "started_utc": started.isoformat(timespec="seconds"),
        "host": {"cpu": cpu_model(), "nproc": os.cpu_count(), "loadavg_at_start": os.getloadavg(), "busy_at_start": round(busy0, 3)},
        "llama_omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "kvscope": KvscopeEngine(args.kvscope_cli, args.model[0], args.threads, args.kvscope_timing).version(),
        "results": [],
    }
    bandwidth = None
    if args.gemm_bench:
        wait_for_quiet(args.quiet_below, args.max_wait)
        with ForeignLoad(children=True) as fl:
            p = subprocess.run([str(args.gemm_bench), "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        out["gemm_bench"] = json.loads(p.stdout)
        out["gemm_bench"]["foreign_cpu_frac"] = round(fl.frac, 3)
        bandwidth = out["gemm_bench"]["read_bandwidth_gbs"]
        print(f"gemm_bench: int8 peak {out['gemm_bench']['int8_peak_gops']:.0f} GOP/s, read bandwidth {bandwidth:.1f} GB/s "
              f"(other load {fl.frac:.0%})", flush=True)
    for m in args.model:
        out["results"].extend(bench_model(args, m, bandwidth))
    out["llama_cpp"] = out["results"][0]["llama_cpp_engine"] if out["results"] else None
    out["seconds"] = round((_dt.datetime.now(_dt.timezone.utc) - started).total_seconds(), 1)

    path = args.out or (HERE / "results" / f"{started.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {path}")
    print("\n| model | prompt | engine | prefill tok/s | decode tok/s |\n|---|---:|---|---:|---:|")
    for r in out["results"]:
        name, pl = Path(r["model"]).name, r["prompt_len"]
        labels = [("kvscope", "kvscope (GEMM)")]
        if "kvscope_vecdot" in r:
            labels.append(("kvscope_vecdot", "kvscope (vec-dot, before)"))
        labels.append(("llama_cpp", f"llama.cpp ({r['llama_cpp_engine']['package']})"))
        for key, label in labels:
            print(f"| {name} | {pl} | {label} | {r[key]['prefill_tokens_per_s']:.1f} | {r[key]['decode_tokens_per_s']:.1f} |")
        rt = r["ratio_kvscope_over_llama_cpp"]
        print(f"| {name} | {pl} | kvscope / llama.cpp | {rt['prefill_tokens_per_s']:.2f}x | {rt['decode_tokens_per_s']:.2f}x |")
        if "decode_fraction_of_bandwidth_limit" in r:
            f = r["decode_fraction_of_bandwidth_limit"]
            print(f"| {name} | {pl} | decode / bandwidth limit ({r['decode_bandwidth_limit_tokens_per_s']:.0f} tok/s) | | "
                  + ", ".join(f"{k} {v:.2f}" for k, v in f.items()) + " |")
        if "batched_decode" in r:
            bd = r["batched_decode"]
            for key in ("kvscope", "kvscope_vecdot"):
                if key in bd:
                    ratio = [v for k, v in bd[key].items() if k.startswith("ratio_")][0]
                    print(f"| {name} | batched | {key} | " + ", ".join(f"b{b} {v:.1f}" for b, v in bd[key]["tokens_per_s"].items())
                          + f" | ratio {ratio:.2f}x |")
    for r in out["results"]:
        for key in ("kvscope", "llama_cpp"):
            if r[key]["n_quiet"] < r[key]["n_samples"] and r[key]["median_over"].startswith("all"):
                print(f"WARNING: {Path(r['model']).name} {key}: only {r[key]['n_quiet']}/{r[key]['n_samples']} samples "
                      "ran on a quiet machine; these medians include noisy samples (other processes were busy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
