#!/usr/bin/env bash
# Sanitizer builds of kvscope and their test runs.
#
#   scripts/sanitizers.sh [address|thread|all]     (default all)
#
# address: build-asan/, -DKVSCOPE_SANITIZE=address (ASan + UBSan, UB is fatal), RelWithDebInfo,
#          no GUI, no CUDA; runs the WHOLE ctest suite (GPU suites skip themselves: no CUDA).
# thread:  build-tsan/, -DKVSCOPE_SANITIZE=thread; runs the suites where threads meet: the
#          ThreadPool users (paged_attention, engine, soak, golden, sinks, kv_quant, dtypes,
#          prompt_edges) and, when the Qt GUI can be
#          built (KVSCOPE_TSAN_GUI=ON, the default when Qt Widgets is installed), the GUI worker
#          tests in tests/gui. tests/tsan.supp lists the (justified) suppressions.
#
# Environment: KVSCOPE_SHARED_DIR (../shared), KVSCOPE_SAN_JOBS (build/ctest parallelism, 2),
# KVSCOPE_TSAN_TESTS (space-separated suite names for the thread tree), KVSCOPE_TSAN_GUI (AUTO|ON|OFF).
# Exit status: non-zero if any build or test fails; a summary with timings is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
what=${1:-all}
shared=${KVSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}
jobs=${KVSCOPE_SAN_JOBS:-2}
summary=()
status=0

# Sanitizer runtime options: fail loudly, with stacks, and never let a report scroll by.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# ignore_noninstrumented_modules: Qt and GLib come from Debian without -fsanitize=thread; their
# internal accesses and locks are invisible to TSan anyway, and without this flag every Qt-internal
# hand-off shows up as a race. Our own code (core/, ui/, tests/) is still fully checked.
export TSAN_OPTIONS=${TSAN_OPTIONS:-ignore_noninstrumented_modules=1:halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$root/tests/tsan.supp}

run_tree() {  # name build-dir sanitizer ctest-args... ($extra_cmake: cmake args, $build_targets: "" = all)
  local name=$1 dir=$2 san=$3
  shift 3
  local t0 t1 t2 rc=0
  t0=$(date +%s)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSCOPE_SANITIZE="$san" -DKVSCOPE_CUDA=OFF \
    -DKVSCOPE_SHARED_DIR="$shared" $extra_cmake > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j"$jobs" $build_targets || rc=$?
  t1=$(date +%s)
  if [ $rc -eq 0 ]; then
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 1800 "$@" || rc=$?
  fi
  t2=$(date +%s)
  summary+=("$name: build $((t1 - t0)) s, tests $((t2 - t1)) s, $([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc $rc)")")
  return $rc
}

if [ "$what" = address ] || [ "$what" = all ]; then
  mkdir -p build-asan
  extra_cmake="-DKVSCOPE_GUI=OFF"
  build_targets=""  # everything (the app too), as CI builds it
  run_tree "ASan+UBSan (whole suite)" build-asan address || status=1
fi

if [ "$what" = thread ] || [ "$what" = all ]; then
  mkdir -p build-tsan
  gui=${KVSCOPE_TSAN_GUI:-AUTO}
  if [ "$gui" = AUTO ]; then
    # The GUI tests need Qt Widgets and QCustomPlot; without them the core threading tests still run.
    gui=OFF
    for d in /usr/lib/*/cmake /usr/lib/cmake /usr/local/lib/cmake; do
      if [ -d "$d/Qt6Widgets" ] && [ -d "$d/QCustomPlotQt6" ]; then gui=ON; fi
    done
  fi
  extra_cmake="-DKVSCOPE_GUI=$gui"
  suites=${KVSCOPE_TSAN_TESTS:-paged_attention engine soak golden sinks kv_quant dtypes prompt_edges}
  [ "$gui" = ON ] && suites="$suites workbench"
  regex="^($(echo $suites | tr ' ' '|'))\$"
  # Only those suites: a TSan build of everything would double the time.
  build_targets="--target $(for t in $suites; do printf 'test_%s ' "$t"; done)"
  # QT_QPA_PLATFORM=offscreen is set by tests/CMakeLists.txt for every test.
  run_tree "TSan (threading suites, GUI=$gui)" build-tsan thread -R "$regex" || status=1
fi

echo
echo "=== sanitizers summary ==="
for s in "${summary[@]}"; do echo "  $s"; done
exit $status
