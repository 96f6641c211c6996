#!/usr/bin/env bash
# Builds kvscope (GUI, and CUDA when nvcc is present) and runs the whole test suite.
# Real test models come from ../shared (override with KVSCOPE_SHARED_DIR=...).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${KVSCOPE_BUILD_DIR:-build}
shared=${KVSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_SHARED_DIR="$shared" ${KVSCOPE_CMAKE_ARGS:-}
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" ${KVSCOPE_CTEST_ARGS:-}
