#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: configure with CUDA, build the CUDA backend, its
# tests and the benchmark, run the `gpu`-labelled tests (cuda_backend: every KV dtype incl. the
# packed int4/rot4/kivi4/kivi2 against the CPU backend; cuda_packed_kv: packed store/read-back
# and device codecs against the CPU codecs) + the host math tests, run
# kvscope-cuda-bench, and write one JSON report. Budget: under 8 minutes on one H100/H200
# (build ~2-3 min on 16 cores for the local GPU's architecture only, tests ~1 min, bench ~2 min).
#
#   scripts/gpu-check.sh [report.json]
# Environment: KVSCOPE_BUILD_DIR (build-gpu), KVSCOPE_SHARED_DIR (../shared),
#   KVSCOPE_CUDA_ARCHS (native: only the GPU present; CI uses "80;90"), JOBS (nproc),
#   KVSCOPE_BENCH_ARGS (extra kvscope-cuda-bench arguments, e.g. --quick or --no-e2e),
#   KVSCOPE_INSTALL_DEPS=1 (run scripts/install-deps.sh first; needs apt and root).
# Needs: CUDA toolkit (nvcc, cuBLAS) and the usual build deps (Qt6 Core/Test, nlohmann_json).
# Exit status: 0 when the tests passed and the benchmark ran; 1 otherwise (the report says which).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
[ "${KVSCOPE_INSTALL_DEPS:-0}" = 1 ] && bash scripts/install-deps.sh
build=${KVSCOPE_BUILD_DIR:-build-gpu}
shared=${KVSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}
archs=${KVSCOPE_CUDA_ARCHS:-native}
jobs=${JOBS:-$(nproc)}
report=${1:-$build/gpu-check.json}
mkdir -p "$build"
t0=$(date +%s)
log="$build/gpu-check.log"
: >"$log"

stage() { echo "== $* ($(($(date +%s) - t0)) s)" | tee -a "$log"; }

stage configure
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_GUI=OFF -DKVSCOPE_CUDA=ON \
  -DKVSCOPE_CUDA_ARCHS="$archs" -DKVSCOPE_SHARED_DIR="$shared" >>"$log" 2>&1
configure_rc=$?
build_rc=1
if [ $configure_rc -eq 0 ]; then
  stage build
  cmake --build "$build" -j"$jobs" --target kvscope_cuda test_cuda_backend test_cuda_packed_kv test_cuda_host_math \
    test_cuda_packed_math kvscope-cuda-bench \
    >>"$log" 2>&1
  build_rc=$?
fi
t_build=$(($(date +%s) - t0))

tests_rc=1
skipped=false
if [ $build_rc -eq 0 ]; then
  stage "tests (ctest -L gpu, cuda_host_math, cuda_packed_math)"
  timeout 300 ctest --test-dir "$build" -L gpu --output-on-failure -V >"$build/gpu-tests.log" 2>&1
  tests_rc=$?
  if grep -q "^SKIP:" "$build/gpu-tests.log" || grep -q "Not Run\|\*\*\*Skipped" "$build/gpu-tests.log"; then
    skipped=true
    tests_rc=1  # on a GPU machine a skipped GPU test is a failure
  fi
  timeout 120 ctest --test-dir "$build" -R "cuda_host_math|cuda_packed_math" --output-on-failure >>"$build/gpu-tests.log" 2>&1 || tests_rc=1
  cat "$build/gpu-tests.log" >>"$log"
  grep -E "max \|dlogit\||greedy|differs|SKIP|PASS|FAIL|tests passed" "$build/gpu-tests.log" | tail -80
fi
t_tests=$(($(date +%s) - t0 - t_build))

bench_rc=1
if [ $build_rc -eq 0 ]; then
  stage benchmark
  # shellcheck disable=SC2086
  timeout 300 "$build/cuda/kvscope-cuda-bench" --out "$build/bench.json" ${KVSCOPE_BENCH_ARGS:-} 2>&1 | tee -a "$log"
  bench_rc=${PIPESTATUS[0]}
fi
t_total=$(($(date +%s) - t0))

bench_json="null"
[ -s "$build/bench.json" ] && bench_json=$(cat "$build/bench.json")
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || true)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain 2>/dev/null | grep -c . || true)
cat >"$report" <<EOF
{
  "kind": "kvscope gpu-check",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "commit": "$commit",
  "dirty_files": $dirty,
  "nvidia_smi": "$gpu",
  "cuda_archs": "$archs",
  "configure_rc": $configure_rc,
  "build_rc": $build_rc,
  "tests_rc": $tests_rc,
  "tests_skipped": $skipped,
  "bench_rc": $bench_rc,
  "seconds": {"build": $t_build, "tests": $t_tests, "total": $t_total},
  "logs": {"all": "$log", "tests": "$build/gpu-tests.log"},
  "bench": $bench_json
}
EOF
stage "done: report $report"
if [ $configure_rc -ne 0 ] || [ $build_rc -ne 0 ]; then
  echo "build failed: see $log" >&2
  tail -40 "$log" >&2
  exit 1
fi
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
