#!/usr/bin/env bash
# llama.cpp's llama-server from the llama-cpp-python 0.3.36 sdist (the golden oracle's source), for
# benchmarks/serve_vs_llama_server.py: every ISA feature of this CPU switched on by name except AMX.
# The oracle's own GGML_NATIVE build (../shared/golden/archs/tools/build-oracle.sh) dies with
# SIGILL at thread-pool start on the AMX machines these benchmarks run on (2026-12-05), as
# run.sh's bindings segfaulted in ggml's AMX matmul. ~5 min on 2 cores; prints the binary's path.
# usage: benchmarks/build_llama_server.sh [DIR]   (default ${TMPDIR:-/tmp}/llama-server-noamx)
set -euo pipefail
dir=${1:-${TMPDIR:-/tmp}/llama-server-noamx}; ver=0.3.36
if [ -x "$dir/build/bin/llama-server" ]; then echo "$dir/build/bin/llama-server"; exit 0; fi
mkdir -p "$dir" && cd "$dir"
[ -f llama_cpp_python-$ver.tar.gz ] || python3 -m pip download -q --no-deps --no-binary :all: llama-cpp-python==$ver -d . >&2
[ -d llama_cpp_python-$ver ] || tar xzf llama_cpp_python-$ver.tar.gz
flags="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
for f in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 avx512vbmi:AVX512_VBMI \
         avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  if grep -qw "${f%%:*}" /proc/cpuinfo; then flags="$flags -DGGML_${f#*:}=ON"; else flags="$flags -DGGML_${f#*:}=OFF"; fi
done
# shellcheck disable=SC2086
cmake -S llama_cpp_python-$ver/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release $flags \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2
cmake --build build -j"$(nproc)" --target llama-server >&2
echo "$dir/build/bin/llama-server"
