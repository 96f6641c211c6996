#!/usr/bin/env bash
# ctest function_length: no function over 80 lines without its reason in the engine's floors
# (scripts/check_function_length.py), and the checker itself sees what it must: a long function
# with a multi-line signature in a .cu file fails, the same one excused passes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
python3 scripts/check_function_length.py core cpu cuda run backends kv_events serve attach
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
{
  echo 'template <int N>'
  echo '__global__ void long_kernel(const float* in,'
  echo '                            float* out) {'
  for i in $(seq 1 90); do echo "  out[$i] = in[$i];"; done
  echo '}'
} > "$probe/kernel.cu"
if python3 scripts/check_function_length.py "$probe" > "$probe/out.txt"; then
  echo "FAIL: the checker accepted a 94-line kernel"; cat "$probe/out.txt"; exit 1
fi
grep -q "94 LONG .*kernel.cu:1: template <int N> __global__ void long_kernel" "$probe/out.txt"
sed -i '1i // long-function: a probe' "$probe/kernel.cu"
python3 scripts/check_function_length.py "$probe" > "$probe/out.txt"
grep -q "94 excused" "$probe/out.txt"
echo "checker finds multi-line signatures in .cu files and honours excuses: ok"
