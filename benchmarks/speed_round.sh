#!/usr/bin/env bash
# Issue 32's measurements in one run of one build, one JSON file each in OUT_DIR: decode and
# prefill against llama.cpp (run.sh: the 110M Q8_0 llama and gemma-3-270m, prompts of 128 and
# 512), an 8K-token prefill on gemma, decode on the synthetic ~1.1B qwen3moe (--preset-moe-1b,
# Q8_0), serving against llama-server (1, 4 and 16 clients), and where a 16-sequence decode
# step spends its time (kvscope-cli bench's decode_step). Nothing else should run meanwhile.
#
#   BUILD_DIR=$PWD/build benchmarks/speed_round.sh [OUT_DIR]
#
# Needs what run.sh installs (benchmarks/.venv with llama-cpp-python), gemma-3-270m from
# `kvscope-cli pull`, llama-server (LLAMA_SERVER=PATH of one benchmarks/build_llama_server.sh
# built; otherwise that script runs here, ~5 min) and a Python with the `openai` package
# (SERVE_PY; default: the serve peer tests' venv, build-serve-venv).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build-bench}"
OUT="${1:-$HERE/results/speed-round-$(date +%F)}"
CLI="$BUILD_DIR/app/kvscope-cli"
PY="$HERE/.venv/bin/python"
SERVE_PY="${SERVE_PY:-$REPO/build-serve-venv/bin/python}"
GEMMA="${GEMMA:-${KVSCOPE_MODEL_DIR:-$HOME/.cache/kvscope/models}/gemma-3-270m-q4_k_m.gguf}"
MOE="$HERE/work/qwen3moe-1b-q8_0.gguf"
mkdir -p "$OUT"
git -C "$REPO" rev-parse HEAD >"$OUT/git-head.txt"
log() { printf '\n[speed_round] %s\n' "$*" >&2; }

log "decode and prefill vs llama.cpp (run.sh)"
BUILD_DIR="$BUILD_DIR" "$HERE/run.sh" --reps 3 --no-old-path --out "$OUT/compare-llamacpp.json"

log "8K-token prefill on gemma-3-270m"
"$PY" "$HERE/compare_llamacpp.py" --kvscope-cli "$CLI" --threads 2 --prompt-len 8192 --gen 16 --reps 3 \
  --check-tokens 0 --no-old-path --model "$GEMMA" --out "$OUT/prefill-8k.json"

[ -s "$MOE" ] || "$CLI" make-model --out "$MOE" --preset-moe-1b --dtype q8_0
log "MoE decode on $(basename "$MOE")"
"$PY" "$HERE/compare_llamacpp.py" --kvscope-cli "$CLI" --threads 2 --prompt-len 128 --gen 64 --reps 3 \
  --no-old-path --gemm-bench "$BUILD_DIR/benchmarks/gemm_bench" --model "$MOE" --out "$OUT/moe-decode.json"

log "a 16-sequence decode step on gemma-3-270m (600-token prompts)"
"$CLI" bench --model "$GEMMA" --no-single --no-paging --batches 1,16 --batch-prompt-len 600 --gen 32 \
  --threads 2 --max-model-len 1024 >"$OUT/decode-step-profile.json"

log "serving: kvscope-cli serve vs llama-server"
LLAMA_SERVER="${LLAMA_SERVER:-$("$HERE/build_llama_server.sh")}"
"$SERVE_PY" "$HERE/serve_vs_llama_server.py" --cli "$CLI" --llama-server "$LLAMA_SERVER" --model "$GEMMA" \
  --clients 1,4,16 --reps 2 --waves 2 --out "$OUT/serve-vs-llama-server.json"
log "wrote $OUT"
