#!/usr/bin/env bash
# ctest include_layers: no upward include between the floors (scripts/check_layers.py), and the
# checker itself fails on a tree that has one (so this test can fail).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python3 "$root/scripts/check_layers.py" "$root"
bad=$(mktemp -d)
trap 'rm -rf "$bad"' EXIT
mkdir -p "$bad/core/kv" "$bad/core/engine" "$bad/cpu" "$bad/run"
echo '#include "engine/engine.h"' > "$bad/core/kv/upward.h"
echo '#include <QString>' > "$bad/core/engine/qt.h"
echo '#include "run/perplexity.h"' > "$bad/core/engine/run.h"
echo '#include "backend_factory.h"' > "$bad/cpu/factory.cpp"
echo '#include <cuda_runtime.h>' > "$bad/run/cuda.cpp"
if out=$(python3 "$root/scripts/check_layers.py" "$bad"); then
  echo "FAIL: the checker accepted an upward include"; exit 1
fi
grep -q "core/kv/upward.h: includes engine/engine.h" <<< "$out"
grep -q "core/engine/qt.h: includes <QString>" <<< "$out"
grep -q "core/engine/run.h: includes run/perplexity.h: run/ is above core" <<< "$out"
grep -q "cpu/factory.cpp: includes backend_factory.h: cpu/ may not use backend_factory.h" <<< "$out"
grep -q "run/cuda.cpp: includes <cuda_runtime.h>: only cuda/ and backends/ name CUDA" <<< "$out"
echo "checker rejects upward, Qt and CUDA includes: ok"
