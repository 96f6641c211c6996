#!/usr/bin/env bash
# ctest include_layers: core's include graph has no upward include (scripts/check_layers.py),
# and the checker itself fails on a tree that has one (so this test can fail).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python3 "$root/scripts/check_layers.py" "$root"
bad=$(mktemp -d)
trap 'rm -rf "$bad"' EXIT
mkdir -p "$bad/core/kv" "$bad/core/engine"
echo '#include "engine/engine.h"' > "$bad/core/kv/upward.h"
echo '#include <QString>' > "$bad/core/engine/qt.h"
if out=$(python3 "$root/scripts/check_layers.py" "$bad"); then
  echo "FAIL: the checker accepted an upward include"; exit 1
fi
grep -q "core/kv/upward.h: includes engine/engine.h" <<< "$out"
grep -q "core/engine/qt.h: includes <QString>" <<< "$out"
echo "checker rejects upward and Qt includes: ok"
