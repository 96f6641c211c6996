#!/usr/bin/env bash
# kvscope vs llama.cpp, side by side: creates benchmarks/.venv, installs llama.cpp's Python
# bindings from PyPI, builds kvscope-cli and benchmarks/gemm_bench if needed, writes the synthetic
# 100M Q8_0 llama into benchmarks/work/ and runs benchmarks/compare_llamacpp.py on it, on
# gemma-3-270m Q4_K_M if `kvscope-cli pull` installed it, and on stories260K if present:
# prompts of 128 and 512 tokens, decode, batched decode (batch 1 vs 16) on the 100M model, the
# previous vec-dot matmul path alongside (KVSCOPE_GEMM=off), GEMM GOP/s and read bandwidth.
#
#   benchmarks/run.sh                       # llama-cpp-python built for this CPU (GGML_NATIVE, minus AMX)
#   LLAMA=xllamacpp benchmarks/run.sh       # prebuilt xllamacpp wheel instead (AVX2 only; installs in seconds)
#   benchmarks/run.sh --reps 9 --max-load 2.5   # extra arguments go to compare_llamacpp.py
#
# Environment: LLAMA (llama-cpp-python | xllamacpp), JOBS (build parallelism, default 2),
# BUILD_DIR (default build-bench), SHARED_MODELS (default ../shared/models next to the repo),
# GEMMA (default ~/.cache/kvscope/models/gemma-3-270m-q4_k_m.gguf, or $KVSCOPE_MODEL_DIR/...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
LLAMA="${LLAMA:-llama-cpp-python}"
JOBS="${JOBS:-2}"
BUILD_DIR="${BUILD_DIR:-$REPO/build-bench}"
SHARED_MODELS="${SHARED_MODELS:-$REPO/../shared/models}"
VENV="$HERE/.venv"
WORK="$HERE/work"
PY="${PYTHON:-python3}"

log() { printf '\n[run.sh] %s\n' "$*" >&2; }

# llama.cpp for this CPU: GGML_NATIVE, except on CPUs with AMX, where every feature this CPU
# has is switched on by name and AMX left out: ggml's AMX matmul (ggml_backend_amx_mul_mat)
# segfaults on the VMs these benchmarks ran on (2026-12-01), and kvscope uses no AMX either.
llama_cpu_flags() {
  if ! grep -qw amx_int8 /proc/cpuinfo; then echo "-DGGML_NATIVE=ON"; return; fi
  local f="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  local flag opt
  for flag in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 avx512vbmi:AVX512_VBMI \
              avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
    opt=${flag#*:}
    if grep -qw "${flag%%:*}" /proc/cpuinfo; then f="$f -DGGML_$opt=ON"; else f="$f -DGGML_$opt=OFF"; fi
  done
  echo "$f"
}

# 1. venv + llama.cpp bindings
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PY" -m venv "$VENV"
fi
case "$LLAMA" in
  llama-cpp-python)
    if ! "$VENV/bin/python" -c 'import llama_cpp' 2>/dev/null; then
      log "installing llama-cpp-python from its sdist (builds the bundled llama.cpp for this CPU; ~10 min on 2 cores)"
      t0=$(date +%s)
      CMAKE_ARGS="$(llama_cpu_flags) -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" "$VENV/bin/pip" install --no-cache-dir llama-cpp-python
      log "llama-cpp-python installed in $(( $(date +%s) - t0 )) s"
    fi ;;
  xllamacpp)
    if ! "$VENV/bin/python" -c 'import xllamacpp' 2>/dev/null; then
      log "installing xllamacpp (prebuilt CPU wheel)"
      t0=$(date +%s)
      "$VENV/bin/pip" install xllamacpp
      log "xllamacpp installed in $(( $(date +%s) - t0 )) s"
    fi ;;
  *) echo "LLAMA must be llama-cpp-python or xllamacpp" >&2; exit 2 ;;
esac

# 2. kvscope-cli (incremental build, so the numbers are for the current tree)
CLI="$BUILD_DIR/app/kvscope-cli"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S "$REPO" -B "$BUILD_DIR" -DKVSCOPE_GUI=OFF -DKVSCOPE_CUDA=OFF -G Ninja
fi
log "building kvscope-cli in $BUILD_DIR"
if ! cmake --build "$BUILD_DIR" --target kvscope-cli gemm_bench -j"$JOBS"; then
  [ -x "$CLI" ] || { echo "kvscope-cli does not build" >&2; exit 1; }
  log "WARNING: build failed, benchmarking the existing $CLI (older than the tree)"
fi
# The matrix-kernel benchmark, built by the same tree (benchmarks/CMakeLists.txt).
GEMM_BENCH="$BUILD_DIR/benchmarks/gemm_bench"

# 3. the synthetic ~110M-parameter Q8_0 llama (random weights, 32000 vocab)
mkdir -p "$WORK"
M100="$WORK/llama-100m-q8_0.gguf"
if [ ! -s "$M100" ]; then
  log "writing $M100"
  "$CLI" make-model --out "$M100" --preset-100m --dtype q8_0
fi
MODELS=(--model "$M100")
GEMMA="${GEMMA:-${KVSCOPE_MODEL_DIR:-$HOME/.cache/kvscope/models}/gemma-3-270m-q4_k_m.gguf}"
if [ -s "$GEMMA" ]; then
  MODELS+=(--model "$GEMMA")
else
  log "no $GEMMA (run: $CLI pull); benchmarking without gemma-3-270m"
fi
if [ -s "$SHARED_MODELS/stories260K.gguf" ]; then
  MODELS+=(--model "$SHARED_MODELS/stories260K.gguf")
fi

# 4. both engines, same file, same threads, same prompt ids
log "comparing (llama.cpp via $LLAMA)"
exec "$VENV/bin/python" "$HERE/compare_llamacpp.py" --kvscope-cli "$CLI" --llama "$LLAMA" --threads 2 \
  --prompt-len 128,512 --gen 64 --gemm-bench "$GEMM_BENCH" --batch-model 100m "${MODELS[@]}" "$@"
