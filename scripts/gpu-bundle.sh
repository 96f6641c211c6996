#!/usr/bin/env bash
# Packs the GPU checks for a lent GPU machine that has the CUDA toolkit but none of our build
# dependencies (Qt, nlohmann_json) and no network -- the `device` machines of this workplace.
# Builds here (nvcc for the device's architecture only), then writes gpu-carry/: bundle.tar.xz
# (the gpu tests and kvscope-cuda-bench, the Qt libraries they load, the small shared models and
# gguf-py to regenerate the f32 synthetic ones there, which keeps the bundle under the transfer
# limit) and run.sh, which runs everything and writes its logs and bench.json under $OUT.
#
#   scripts/gpu-bundle.sh            # then on the device, from the repo root: bash gpu-carry/run.sh
# Environment: KVSCOPE_BUILD_DIR (build-gpu), KVSCOPE_SHARED_DIR (../shared), KVSCOPE_CUDA_ARCHS (90).
# scripts/gpu-check.sh is the one-command check for a GPU machine that can build the project itself.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KVSCOPE_BUILD_DIR:-build-gpu}
shared=${KVSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}
grep -qx '/gpu-carry/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info && echo /gpu-carry/ >>.git/info/exclude; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_GUI=OFF -DKVSCOPE_CUDA=ON \
  -DKVSCOPE_CUDA_ARCHS="${KVSCOPE_CUDA_ARCHS:-90}" -DKVSCOPE_SHARED_DIR="$shared" >/dev/null
tests="test_cuda_backend test_cuda_packed_kv test_cuda_host_math test_cuda_packed_math"
# shellcheck disable=SC2086
cmake --build "$build" --target $tests kvscope-cuda-bench
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib,whl,tools} "$stage/shared/models/synthetic"
for t in $tests; do cp "$build/tests/$t" "$stage/bin/"; done
cp "$build/cuda/kvscope-cuda-bench" "$stage/bin/"
strip "$stage"/bin/*
# Every library they load beyond CUDA's, glibc's and the C++ runtime (the device has newer ones).
ldd "$stage"/bin/* | awk '/=> \//{print $3}' | sort -u | grep -vE 'libcu|/libc\.so|/libm\.so|/libdl\.|/libpthread\.|/librt\.|ld-linux|libstdc|libgcc_s|/libz\.so' |
  while read -r l; do cp -L "$l" "$stage/lib/"; done
cp "$shared/models/stories260K.gguf" "$stage/shared/models/"
find "$shared/models/synthetic" -name '*.gguf' ! -name '*-f32.gguf' -exec cp {} "$stage/shared/models/synthetic/" \;
cp "$shared/golden/tools/gen_synthetic.py" "$stage/tools/"
python3 -m pip download -q --no-deps -d "$stage/whl" gguf
mkdir -p gpu-carry
tar -cf - -C "$stage" . | xz -T0 -6 >gpu-carry/bundle.tar.xz
cp scripts/gpu-bundle-run.sh gpu-carry/run.sh
echo "gpu-carry/bundle.tar.xz: $(du -h gpu-carry/bundle.tar.xz | cut -f1)  (run: bash gpu-carry/run.sh [nobench])"
