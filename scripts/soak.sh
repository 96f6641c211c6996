#!/usr/bin/env bash
# The long engine soak: tests/core/engine/test_soak.cpp's seeded workload with bigger numbers, and a JSON
# report (requests, steps, validations, preemptions, evictions, RSS per cycle, violations).
#
#   scripts/soak.sh [CYCLES] [RUNS_PER_CYCLE] [REQUESTS_PER_RUN]    default 5 12 400
#
# Environment: KVSCOPE_SOAK_SEED (1), KVSCOPE_BUILD_DIR (build-rel), KVSCOPE_SHARED_DIR
# (../shared), KVSCOPE_SOAK_REPORT (where the JSON goes; <build>/soak-report.json).
# Exit status: the test's (non-zero on any invariant violation, lost request or RSS growth).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${KVSCOPE_BUILD_DIR:-build-rel}
shared=${KVSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}
export KVSCOPE_SOAK_CYCLES=${1:-5}
export KVSCOPE_SOAK_RUNS=${2:-12}
export KVSCOPE_SOAK_REQUESTS=${3:-400}
export KVSCOPE_SOAK_SEED=${KVSCOPE_SOAK_SEED:-1}
export KVSCOPE_SOAK_REPORT=${KVSCOPE_SOAK_REPORT:-$(pwd)/$build/soak-report.json}
export KVSCOPE_SHARED_DIR=$shared
export KVSCOPE_TEST_TMP=$(pwd)/$build/test-tmp

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_GUI=OFF -DKVSCOPE_SHARED_DIR="$shared"
fi
cmake --build "$build" --target test_soak -j"${KVSCOPE_JOBS:-2}"
echo "soak: seed $KVSCOPE_SOAK_SEED, $KVSCOPE_SOAK_CYCLES cycles x $KVSCOPE_SOAK_RUNS runs x $KVSCOPE_SOAK_REQUESTS requests"
t0=$(date +%s)
rc=0
"$build/tests/test_soak" -maxwarnings 100 || rc=$?
echo "soak: $(( $(date +%s) - t0 )) s, exit $rc, report $KVSCOPE_SOAK_REPORT"
[ -f "$KVSCOPE_SOAK_REPORT" ] && cat "$KVSCOPE_SOAK_REPORT"
exit $rc
