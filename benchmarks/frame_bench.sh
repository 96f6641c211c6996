#!/usr/bin/env bash
# Does the workbench's UI thread stall while the engine works? Runs `kvscope --frame-bench`: the
# real window (offscreen), a 16K-block pool (8-token blocks) on stories260K, a scenario repeated
# for T seconds on the engine's worker thread, and a 1 ms watchdog timer on the UI thread. Prints
# and saves the JSON (max / p50 / p99 frame, UI-thread CPU per frame, block-map paint times,
# snapshot hand-off per panel, the worst frames).
#   benchmarks/frame_bench.sh [BUILD_DIR] [OUT_JSON] [extra kvscope args, e.g. --seconds 30 --scenario few-shot]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$root/benchmarks/results/frame-bench-$(date +%Y%m%d).json}"
shift $(( $# > 2 ? 2 : $# ))
[[ -x "$build/app/kvscope" ]] || { echo "no $build/app/kvscope; build the 'kvscope' target first" >&2; exit 1; }
model="${KVSCOPE_MODEL:-$root/../shared/models/stories260K.gguf}"
[[ -f "$model" ]] || { echo "model not found: $model (set KVSCOPE_MODEL)" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
QT_QPA_PLATFORM=offscreen "$build/app/kvscope" --frame-bench --model "$model" --seconds 20 --json-out "$out" "$@" \
  2> >(grep -v 'This plugin does not support' >&2)
echo "wrote $out" >&2
