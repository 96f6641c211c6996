#!/usr/bin/env bash
# The cost of paging against every contiguous reference kvscope has: decode attention over a
# shuffled block table vs a contiguous array, for each contiguous layout (pos-major: a
# pre-paging engine's per-layer cache; head-major: each head's keys one dense stream) and
# prefetch rule (same: the reference prefetches its next chunk exactly when the paged path
# does; hardware: the hardware prefetcher alone). Processes alternate between the variants, and
# the summary is the median over processes of each process's median paged/contiguous ratio.
#   benchmarks/paging_cost.sh [BUILD_DIR] [PROCESSES] [extra kvscope-cli bench args, e.g. --block-size 64 --kv-dtype int8]
# Writes benchmarks/results/paging-cost-<date>[-<args>].json and prints a Markdown table.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
procs="${2:-3}"
shift $(( $# > 2 ? 2 : $# ))
cli="$build/app/kvscope-cli"
[[ -x "$cli" ]] || { echo "no $cli: build the kvscope-cli target first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
variants=("pos-major same" "pos-major hardware" "head-major same" "head-major hardware")
for ((p = 0; p < procs; ++p)); do
  for v in "${variants[@]}"; do
    read -r layout pf <<< "$v"
    "$cli" bench --no-single --no-batch --contexts 1024,4096,16384 --reps 101 --threads 1 \
      --contiguous-layout "$layout" --contiguous-prefetch "$pf" "$@" > "$work/$layout-$pf-$p.json" 2>/dev/null
  done
done
tag="$(echo "$*" | tr -c 'A-Za-z0-9\n' '-' | tr -s '-' | sed 's/^-//; s/-$//')"
out="$root/benchmarks/results/paging-cost-$(date +%Y-%m-%d)${tag:+-$tag}.json"
python3 - "$work" "$out" "$*" <<'EOF'
import glob, json, os, statistics, sys
work, out, extra = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}
for f in sorted(glob.glob(os.path.join(work, "*.json"))):
    for row in json.load(open(f))["paging_cost"]:
        key = (row["contiguous_layout"], row["contiguous_prefetch"], row["context"])
        runs.setdefault(key, []).append(row)
summary = []
print(f"bench args: {extra or '(defaults: --block-size 16 --kv-dtype f32)'}")
print("| contiguous reference | context | hot ratio (range) | cold ratio (range) | paged µs hot/cold | contiguous µs hot/cold |")
print("|---|---|---|---|---|---|")
for (layout, pf, ctx), rows in sorted(runs.items()):
    s = {"contiguous_layout": layout, "contiguous_prefetch": pf, "context": ctx, "processes": len(rows)}
    cells = []
    for cond in ("hot", "cold"):
        r = [x[cond]["paged_over_contiguous"] for x in rows]
        s[cond] = {"ratio_median": statistics.median(r), "ratio_min": min(r), "ratio_max": max(r),
                   "paged_us": statistics.median(x[cond]["paged_us"] for x in rows),
                   "contiguous_us": statistics.median(x[cond]["contiguous_us"] for x in rows)}
        cells.append(f"{s[cond]['ratio_median']:.2f} ({min(r):.2f}–{max(r):.2f})")
    summary.append(s)
    print(f"| {layout}, prefetch {pf} | {ctx} | {cells[0]} | {cells[1]} | "
          f"{s['hot']['paged_us']:.0f} / {s['cold']['paged_us']:.0f} | {s['hot']['contiguous_us']:.0f} / {s['cold']['contiguous_us']:.0f} |")
json.dump({"bench_args": extra, "summary": summary, "runs": {"|".join(map(str, k)): v for k, v in runs.items()}},
          open(out, "w"), indent=1)
print(f"\nwritten to {os.path.relpath(out)}")
EOF
