#!/usr/bin/env bash
# One quality yardstick for the KV settings (docs/quality.md, "eval --sweep"): dtypes x windows x sinks on
# the first N tokens of resources/texts/pride-and-prejudice.txt, each point against the f32
# full-attention reference (run once), then the Pareto plot docs/kv-sweep-pareto.png.
#   benchmarks/kv_sweep.sh [N=1024] [MODEL] [BUILD_DIR]
# Keeps the reference's logits: N x n_vocab floats (1 GiB at N = 1024 on Gemma 3's 262K vocabulary).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-1024}"
model="${2:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/models/gemma-3-270m-q4_k_m.gguf}"
build="${3:-$root/build}"
cli="$build/app/kvscope-cli"
[[ -x "$cli" ]] || { echo "no $cli: build the kvscope-cli target first" >&2; exit 1; }
out="$root/benchmarks/results/kv-sweep-$n-$(basename "$model" .gguf).json"
mkdir -p "$root/benchmarks/results"
nice -n 10 "$cli" eval --model "$model" --text "$root/resources/texts/pride-and-prejudice.txt" --max-tokens "$n" --threads 1 \
  --sweep dtype=f16,int8,int4,rot4,kivi4,kivi2 window=0,256 sinks=0,4 --out "$out"
venv="$root/benchmarks/.venv-plot"
[[ -x "$venv/bin/python" ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q matplotlib; }
"$venv/bin/python" "$root/benchmarks/plot_sweep.py" pareto "$out" "$root/docs/kv-sweep-pareto.png"
