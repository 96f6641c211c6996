#!/usr/bin/env bash
# Runs the bundle of scripts/gpu-bundle.sh on the GPU machine, from the repo root:
#   bash gpu-carry/run.sh [nobench|profile]
# Logs of each test suite and bench.json go to $OUT (or ./gpu-out). Exit 0 when every suite passed.
# profile: instead, Nsight Compute over the bench's attention kernels (ncu.txt), as docs/cuda.md shows.
set -u
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
t0=$(date +%s)
el() { echo "== $* ($(($(date +%s) - t0)) s)"; }
K=$(mktemp -d)
tar -xJf gpu-carry/bundle.tar.xz -C "$K" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --upgrade --target "$K/site" "$K"/whl/gguf*.whl &&
  PYTHONPATH=$K/site python3 "$K/tools/gen_synthetic.py" "$K/shared/models/stories260K.gguf" \
    "$K/shared/models/synthetic" llama qwen2 qwen3 gemma3 >/dev/null || exit 1
# CUDA's runtime and cuBLAS come from the machine: its toolkit, or the nvidia wheels of its PyTorch.
cuda_dir() {
  local f
  f=$( (ls /usr/local/cuda*/lib*/"$1" /usr/local/cuda*/targets/*/lib/"$1" \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/"$1" 2>/dev/null || true) | head -1)
  [ -n "$f" ] && dirname "$f"
}
LD_LIBRARY_PATH=$K/lib:$(cuda_dir libcublas.so.13):$(cuda_dir libcudart.so.13)
export LD_LIBRARY_PATH
if ldd "$K"/bin/* | grep "not found"; then echo "missing libraries" >&2; exit 1; fi
if [ "${1:-}" = profile ]; then
  ncu=$(command -v ncu)
  for c in /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [ -z "$ncu" ] && [ -x "$c" ] && ncu=$c
  done
  (cd "$K" && timeout 400 "$ncu" --clock-control none -k regex:'attn_(decode|reduce|prefill|packed)' -c 12 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats "$K/bin/kvscope-cuda-bench" --quick --no-e2e \
    --out "$K/b.json") >"$out/ncu.txt" 2>&1
  r=$?
  grep -E "attn_|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Waves Per SM" "$out/ncu.txt" | head -80
  exit $r
fi
export KVSCOPE_SHARED_DIR=$K/shared KVSCOPE_TEST_TMP=$K/tmp KVSCOPE_SOURCE_DIR=$PWD QT_QPA_PLATFORM=offscreen
mkdir -p "$K/tmp"
rc=0
for t in host_math:60 packed_math:60 packed_kv:120 backend:300; do
  n=${t%%:*}
  el "test_cuda_$n"
  timeout "${t##*:}" "$K/bin/test_cuda_$n" >"$out/test_$n.log" 2>&1
  r=$?
  echo "test_cuda_$n rc=$r"
  [ $r -eq 0 ] || rc=1
  grep -E "^(FAIL|SKIP)|Totals" "$out/test_$n.log" | head -40
done
if [ "${1:-}" != nobench ]; then
  el kvscope-cuda-bench
  (cd "$K/tmp" && timeout 240 "$K/bin/kvscope-cuda-bench" --out "$out/bench.json") 2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
el finished
exit $rc
