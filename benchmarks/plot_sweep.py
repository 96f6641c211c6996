#!/usr/bin/env python3
"""Pictures and tables from `kvscope-cli eval --sweep ... --out FILE.json`.

  plot_sweep.py pareto SWEEP.json OUT.png        peak KV bytes vs mean KL (or perplexity), frontier marked
  plot_sweep.py nll SWEEP.json OUT.png [--avg N] per-position NLL (running mean over N tokens), one
                                                 panel per window: full attention, window only, sinks
  plot_sweep.py table SWEEP.json [RECOMPUTE.json] the StreamingLLM table (markdown) in the paper's layout

Needs matplotlib for the plots (benchmarks/streaming_llm.sh puts it in a venv); `table` needs
nothing but Python.
"""
import argparse
import json
import math
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def pareto(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    j = load(args.json)
    metric = j.get("frontier_metric", "kl_mean")
    pts = j["points"]
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    xs = [p["peak_kv_bytes"] / 2**20 for p in pts]
    ys = [p[metric] for p in pts]
    ax.scatter(xs, ys, c=["#d62728" if p["pareto"] else "#7f7f7f" for p in pts], zorder=3)
    for p, x, y in zip(pts, xs, ys):
        ax.annotate(p["label"], (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
    front = sorted((x, y) for p, x, y in zip(pts, xs, ys) if p["pareto"])
    if front:
        ax.step([f[0] for f in front], [f[1] for f in front], where="post", color="#d62728", lw=1.2,
                label="Pareto frontier (no point has fewer bytes and less %s)" % metric)
    ax.set_xscale("log")
    pos = [y for y in ys if y > 0]
    if metric == "kl_mean" and pos:
        # log-like above the smallest positive KL, linear down to the exact zeros (f32 full)
        ax.set_yscale("symlog", linthresh=min(pos) / 2)
        ax.set_ylim(bottom=0, top=max(pos) * 4)
    ax.set_xlabel("peak KV MiB (log)")
    ax.set_ylabel("mean KL vs f32 full attention (nats)" if metric == "kl_mean" else "perplexity")
    ax.set_title("%s, %d tokens of %s" % (j["model"].split("/")[-1], j["n_tokens"], j["text"].split("/")[-1]), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out)
    print("wrote", args.out)


def running_mean(v, n):
    out, s = [], 0.0
    for i, x in enumerate(v):
        s += x
        if i >= n:
            s -= v[i - n]
        out.append(s / min(i + 1, n))
    return out


def nll(args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    j = load(args.json)
    windows = sorted({p["window"] for p in j["points"] if p["window"] > 0})
    fig, axes = plt.subplots(len(windows), 1, figsize=(9, 2.8 * len(windows)), dpi=120, sharex=True, squeeze=False)
    full = j["reference"]["nll"]
    for ax, w in zip(axes[:, 0], windows):
        ax.plot(running_mean(full, args.avg), color="black", lw=1.0, label="full attention")
        for p in j["points"]:
            if p["window"] != w or p["kv_dtype"] != "f32":
                continue
            label = "window only" if p["sinks"] == 0 else "%d sink%s + window" % (p["sinks"], "s" if p["sinks"] > 1 else "")
            style = dict(color="#d62728", lw=1.2) if p["sinks"] == 0 else dict(lw=0.8)
            ax.plot(running_mean(p["nll"], args.avg), label=label, **style)
        ax.axvline(w, color="gray", ls=":", lw=0.8)
        ax.set_ylabel("NLL (nats), mean of %d" % args.avg)
        ax.set_title("window %d: the first tokens leave the cache at position %d (dotted)" % (w, w), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("position in the text (tokens)")
    fig.suptitle("%s on %s: per-position NLL" % (j["model"].split("/")[-1], j["text"].split("/")[-1]), fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out)
    print("wrote", args.out)


def ppl(values):
    return math.exp(sum(values) / len(values)) if values else float("nan")


def table(args):
    j = load(args.json)
    rec = load(args.recompute)["recompute_window"] if args.recompute else j.get("recompute_window", [])
    windows = sorted({p["window"] for p in j["points"] if p["window"] > 0})
    sinks = sorted({p["sinks"] for p in j["points"]})
    full = j["reference"]["nll"]
    by = {(p["window"], p["sinks"]): p for p in j["points"] if p["kv_dtype"] == "f32"}
    print("Perplexity of the first %d tokens (%d predictions); full attention: %.2f" % (j["n_tokens"], len(full), ppl(full)))
    print()
    print("| cache (sinks + window) | " + " | ".join("W = %d" % w for w in windows) + " |")
    print("|---|" + "---|" * len(windows))
    print("| full attention | " + " | ".join("%.2f" % ppl(full) for w in windows) + " |")
    for s in sinks:
        cells = []
        for w in windows:
            p = by.get((w, s))
            cells.append("%.2f (%d+%d)" % (p["perplexity"], s, w) if p else "-")
        print("| %s | %s |" % ("window only" if s == 0 else "%d sink%s + window" % (s, "s" if s > 1 else ""), " | ".join(cells)))
    # Past the first window only: where the methods differ at all.
    print()
    print("Perplexity over positions >= W only (every row there has lost the text's start):")
    print()
    print("| method | " + " | ".join("W = %d" % w for w in windows) + " |")
    print("|---|" + "---|" * len(windows))
    print("| full attention | " + " | ".join("%.2f" % ppl(full[w:]) for w in windows) + " |")
    for s in sinks:
        cells = ["%.2f" % ppl(by[(w, s)]["nll"][w:]) if (w, s) in by else "-" for w in windows]
        print("| %s | %s |" % ("window only" if s == 0 else "%d sinks + window" % s, " | ".join(cells)))
    if rec:
        print()
        print("Recompute-window (BOS + last W-1 tokens re-encoded per row) on sampled rows, against the others on the same rows:")
        print()
        print("| W | rows | recompute | full attention | window only | 4 sinks + window |")
        print("|---|---|---|---|---|---|")
        for r in rec:
            w, rows = r["window"], r["rows"]
            def on(p):
                return "%.2f" % ppl([p["nll"][i] for i in rows]) if p else "-"
            print("| %d | %d (%d..%d) | %.2f | %.2f | %s | %s |" % (w, len(rows), rows[0], rows[-1], r["perplexity"],
                  ppl([full[i] for i in rows]), on(by.get((w, 0))), on(by.get((w, 4)))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pareto")
    a.add_argument("json")
    a.add_argument("out")
    b = sub.add_parser("nll")
    b.add_argument("json")
    b.add_argument("out")
    b.add_argument("--avg", type=int, default=32)
    c = sub.add_parser("table")
    c.add_argument("json")
    c.add_argument("recompute", nargs="?")
    args = ap.parse_args()
    {"pareto": pareto, "nll": nll, "table": table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
