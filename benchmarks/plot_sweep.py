#!/usr/bin/env python3
"""Pictures and tables from `kvscope-cli eval --sweep ... --out FILE.json`.

  plot_sweep.py pareto SWEEP.json OUT.png        peak KV bytes vs mean KL (or perplexity), frontier marked,
                                                 token-eviction points (evict axis) as labelled triangles
  plot_sweep.py nll OUT.png SWEEP.json [MORE.json] [--avg N] per-position NLL (running mean over N tokens), one
                                                 panel per window: full attention, window only, sinks
  plot_sweep.py table SWEEP.json [MORE.json ...] the StreamingLLM table (markdown) in the paper's layout; the
                                                 points and recompute-window runs of every file, the
                                                 reference (full attention) of the first

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
    # Token-eviction points (the sweep's evict axis; their label names the policy) as triangles.
    for marker, evicting in (("o", False), ("^", True)):
        sel = [i for i, p in enumerate(pts) if evicts(p) == evicting]
        if sel:
            ax.scatter([xs[i] for i in sel], [ys[i] for i in sel], marker=marker, zorder=3,
                       c=["#d62728" if pts[i]["pareto"] else "#7f7f7f" for i in sel],
                       label="token eviction (h2o / snapkv)" if evicting else None)
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


def evicts(p):
    """A point of the sweep's evict axis (files from before it have no "evict" field)."""
    return p.get("evict", "off") != "off"


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
    files = [load(f) for f in args.json]
    j = files[0]
    j["points"] = [p for f in files for p in f["points"] if not evicts(p)]  # windows and sinks only
    windows = sorted({p["window"] for p in j["points"] if p["window"] > 0})
    fig, axes = plt.subplots(len(windows), 1, figsize=(9, 2.8 * len(windows)), dpi=120, sharex=True, squeeze=False)
    full = j["reference"]["nll"]
    for ax, w in zip(axes[:, 0], windows):
        # The excess over full attention, position by position: the text's own difficulty cancels.
        ax.axhline(0, color="black", lw=1.0, label="full attention")
        colors = iter(["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"])
        for p in j["points"]:
            if p["window"] != w or p["kv_dtype"] != "f32":
                continue
            label = sink_name(p["sinks"], p.get("sinks_layers", "all"))
            style = dict(color="#d62728", lw=1.4) if p["sinks"] == 0 else dict(color=next(colors), lw=0.8)
            if p.get("sinks_layers", "all") != "all":
                style["ls"] = "--"
            excess = [a - b for a, b in zip(p["nll"], full)]
            ax.plot(running_mean(excess, args.avg), label=label, **style)
        ax.axvline(w, color="gray", ls=":", lw=0.8)
        ax.set_ylabel("NLL - full attention's\n(nats, mean of %d)" % args.avg)
        ax.set_title("window %d: the first tokens leave the cache at position %d (dotted)" % (w, w), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("position in the text (tokens)")
    fig.suptitle("%s on %s: per-position NLL above full attention's" % (j["model"].split("/")[-1], j["text"].split("/")[-1]), fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out)
    print("wrote", args.out)


def ppl(values):
    return math.exp(sum(values) / len(values)) if values else float("nan")


def sink_name(s, layers="all"):
    if s == 0:
        return "window only"
    return "%d sink%s%s" % (s, "s" if s > 1 else "", "" if layers == "all" else " (global layers)")


def table(args):
    files = [load(f) for f in args.json]
    j = files[0]
    rec = [r for f in files for r in f.get("recompute_window", [])]
    j["points"] = [p for f in files for p in f["points"] if not evicts(p)]  # the paper's layout: windows and sinks
    windows = sorted({p["window"] for p in j["points"] if p["window"] > 0})
    cols = sorted({(p["sinks"], p.get("sinks_layers", "all")) for p in j["points"] if p["kv_dtype"] == "f32"},
                  key=lambda c: (c[1] != "all", c[0]))
    full = j["reference"]["nll"]
    by = {(p["window"], p["sinks"], p.get("sinks_layers", "all")): p for p in j["points"] if p["kv_dtype"] == "f32"}
    print("Perplexity of the first %d tokens (%d predictions) of %s, f32 KV" % (j["n_tokens"], len(full), j["text"].split("/")[-1]))
    print()
    # The paper's layout (its Table 2): one row per cache, columns S + W.
    print("| cache | full attention | " + " | ".join(sink_name(s, l) for s, l in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for w in windows:
        cells = ["%.2f (%d+%d)" % (by[(w, s, l)]["perplexity"], s, w) if (w, s, l) in by else "-" for s, l in cols]
        print("| W = %d | %.2f | %s |" % (w, ppl(full), " | ".join(cells)))
    print()
    print("Only the predictions at positions >= W (those whose window has lost the text's first tokens):")
    print()
    print("| cache | full attention | " + " | ".join(sink_name(s, l) for s, l in cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for w in windows:
        cells = ["%.2f" % ppl(by[(w, s, l)]["nll"][w:]) if (w, s, l) in by else "-" for s, l in cols]
        print("| W = %d | %.2f | %s |" % (w, ppl(full[w:]), " | ".join(cells)))
    if rec:
        print()
        print("Recompute-window (BOS + the last W-1 tokens re-encoded for every scored row) on rows spread over [W-1, n-2],")
        print("and the other methods on the same rows:")
        print()
        print("| cache | rows | recompute-window | full attention | window only | 4 sinks + window |")
        print("|---|---|---|---|---|---|")
        for r in rec:
            w, rows = r["window"], r["rows"]
            def on(p):
                return "%.2f" % ppl([p["nll"][i] for i in rows]) if p else "-"
            print("| W = %d | %d (%d..%d) | %.2f | %.2f | %s | %s |" % (w, len(rows), rows[0], rows[-1], r["perplexity"],
                  ppl([full[i] for i in rows]), on(by.get((w, 0, "all"))), on(by.get((w, 4, "all")))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("pareto")
    a.add_argument("json")
    a.add_argument("out")
    b = sub.add_parser("nll")
    b.add_argument("out")
    b.add_argument("json", nargs="+")
    b.add_argument("--avg", type=int, default=32)
    c = sub.add_parser("table")
    c.add_argument("json", nargs="+")
    args = ap.parse_args()
    {"pareto": pareto, "nll": nll, "table": table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
