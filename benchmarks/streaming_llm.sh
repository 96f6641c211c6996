#!/usr/bin/env bash
# StreamingLLM on Gemma 3 270M, reproduced (docs/quality.md, "StreamingLLM on Gemma 3"): perplexity of the
# first N tokens of resources/texts/pride-and-prejudice.txt with full attention, window only
# (absolute positions), window + 1/2/4/8 sinks (keys at their cache positions, the paper's
# scheme), at windows 256 / 512 / 1024, plus the recompute-window baseline on sampled rows; then
# the table and the per-position NLL plot (docs/streaming-llm-nll.png).
#   benchmarks/streaming_llm.sh [N=2048] [ROWS=32,24,16] [MODEL] [BUILD_DIR]
# Three single-threaded runs side by side under nice (the sweep, global-layer-only sinks, and
# recompute-window); about 35 minutes on a shared 2-core machine at N = 2048. JSON in benchmarks/results/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-2048}"
rows="${2:-32,24,16}"
model="${3:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/models/gemma-3-270m-q4_k_m.gguf}"
build="${4:-$root/build}"
cli="$build/app/kvscope-cli"
[[ -x "$cli" ]] || { echo "no $cli: build the kvscope-cli target first" >&2; exit 1; }
[[ -f "$model" ]] || { echo "no $model: kvscope-cli pull" >&2; exit 1; }
text="$root/resources/texts/pride-and-prejudice.txt"
res="$root/benchmarks/results"
mkdir -p "$res"
sweep="$res/streaming-llm-sweep-$n.json"
recompute="$res/streaming-llm-recompute-$n.json"
common=(eval --model "$model" --text "$text" --max-tokens "$n" --threads 1 --no-kl --nll)
global="$res/streaming-llm-global-sinks-$n.json"
nice -n 10 "$cli" "${common[@]}" --sweep window=256,512,1024 sinks=0,1,2,4,8 --out "$sweep" &
sweep_pid=$!
# Sinks in Gemma 3's 3 full-attention layers only (its 15 sliding layers keep their own window).
nice -n 10 "$cli" "${common[@]}" --sweep window=256,512,1024 sinks=1,4 --sinks-layers global --out "$global" &
global_pid=$!
# The sweep needs a grid: one cheap point (window 256 + 4 sinks, also in the main sweep: the two
# must agree) carries the recompute-window runs.
nice -n 10 "$cli" "${common[@]}" --sweep window=256 sinks=4 --recompute-window 256,512,1024 --recompute-rows "$rows" \
  --out "$recompute"
wait "$sweep_pid" "$global_pid"
venv="$root/benchmarks/.venv-plot"
[[ -x "$venv/bin/python" ]] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q matplotlib; }
"$venv/bin/python" "$root/benchmarks/plot_sweep.py" nll "$root/docs/streaming-llm-nll.png" "$sweep" "$global" --avg 32
python3 "$root/benchmarks/plot_sweep.py" table "$sweep" "$global" "$recompute"
