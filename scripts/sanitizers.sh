#!/usr/bin/env bash
# Sanitizer builds of kvscope and their test runs.
#
#   scripts/sanitizers.sh [address|thread|all]     (default all)
#
# address: build-asan/, -DKVSCOPE_SANITIZE=address (ASan + UBSan, UB is fatal), RelWithDebInfo,
#          no GUI, no CUDA; runs the WHOLE ctest suite (GPU suites skip themselves: no CUDA).
# thread:  build-tsan/, -DKVSCOPE_SANITIZE=thread (-O2 -g1: line tables are all a report needs);
#          builds only the test executables below and runs the test functions where threads
#          meet (TSAN_PLAN): the ThreadPool directly (dtypes), the CPU backend's 2-thread pool
#          under the engine (engine, paged_attention) and under a short soak with engine rebuilds
#          (soak), the server's engine worker and its submitting threads (serve_units), attach's /metrics and ZeroMQ threads (attach_units), and, when the Qt GUI can be built (KVSCOPE_TSAN_GUI=ON, the default when Qt
#          Widgets is installed), the EngineThreadWorker thread behind the window (gui workbench and
#          lifecycle). Functions that only add compute (long workloads, real-model goldens) are
#          left out to keep the tree CI-sized; KVSCOPE_TSAN_FULL=1 runs the whole suites instead.
#          tests/tsan.supp lists the (justified) suppressions: none in kvscope's own code.
#
# Environment: KVSCOPE_SHARED_DIR (../shared), KVSCOPE_SAN_JOBS (build/ctest parallelism, 2),
# KVSCOPE_TSAN_GUI (AUTO|ON|OFF), KVSCOPE_TSAN_FULL (0|1).
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
# history_size=7 (the most, 2M accesses per thread): a suppression can only match a report whose
# earlier access still has its stack. At 4 the engine thread's traffic sometimes overwrote it
# ("[failed to restore the stack]"), and Qt's queued-signal copy of a snapshot, which
# tests/tsan.supp already covers, was reported in test_lifecycle (2 of 3 runs on 2026-12-02).
export TSAN_OPTIONS=${TSAN_OPTIONS:-ignore_noninstrumented_modules=1:halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$root/tests/tsan.supp}

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

# The thread tree's plan: "<test executable> [test functions...]" per line (none = all of it).
# Left out of test_workbench: compareRunsTwoEngines (two more engine threads, but its 30 s
# timeout is too short under TSan on a 2-core machine) and the long-workload functions.
TSAN_PLAN_CORE="
test_dtypes matmul_matches_naive
test_paged_attention matches_reference mixed_batch_matches_reference
test_engine published_after_every_step_to_any_thread preempted_sequences_resume_identically cancel_returns_blocks_at_once parallel_samples_share_prompt_blocks snapshot_reports_blocks_and_events window_drops_are_events parallel_sample_ids_are_reserved
test_soak
test_serve_units
test_attach_units metrics_endpoint_that_hangs metrics_endpoint_that_returns_html publisher_vanishes_and_comes_back
"
TSAN_PLAN_GUI="
test_lifecycle
test_workbench loadsModelAndStreamsChat concurrentChatsAndStop blockMapMatchesSnapshot corruptModelIsReported startsWithoutAModel closesMidRunWithoutHanging
test_attach_window window_has_the_honest_header_and_survives_a_silent_endpoint
test_capacity_panel study_shows_what_replay_computes cancel_stops_a_long_study
"

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
  plan=$TSAN_PLAN_CORE
  [ "$gui" = ON ] && plan="$plan$TSAN_PLAN_GUI"
  executables=$(echo "$plan" | awk 'NF {print $1}')
  t0=$(date +%s)
  rc=0
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    -DKVSCOPE_SANITIZE=thread -DKVSCOPE_CUDA=OFF -DKVSCOPE_GUI=$gui -DKVSCOPE_SHARED_DIR="$shared" \
    > build-tsan.configure.log 2>&1 || { cat build-tsan.configure.log; exit 1; }
  # Only those executables (and the libraries they link): a TSan build of everything would double the time.
  cmake --build build-tsan -j"$jobs" --target $executables || rc=$?
  t1=$(date +%s)
  if [ $rc -eq 0 ] && [ "${KVSCOPE_TSAN_FULL:-0}" = 1 ]; then
    regex="^($(echo $executables | sed 's/test_//g' | tr ' ' '|'))\$"
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" --timeout 3600 -R "$regex" || rc=$?
  elif [ $rc -eq 0 ]; then
    # As tests/CMakeLists.txt sets for ctest; a short soak (the CI suite's size is for ASan).
    export KVSCOPE_SHARED_DIR="$shared" KVSCOPE_TEST_TMP="$root/build-tsan/test-tmp" QT_QPA_PLATFORM=offscreen
    export KVSCOPE_SOAK_CYCLES=${KVSCOPE_SOAK_CYCLES:-2} KVSCOPE_SOAK_RUNS=${KVSCOPE_SOAK_RUNS:-2}
    mkdir -p "$KVSCOPE_TEST_TMP"
    while read -r exe functions; do
      [ -n "$exe" ] || continue
      s0=$(date +%s)
      # -maxwarnings 0: never truncate; functions run in the order listed.
      if "build-tsan/tests/$exe" -maxwarnings 0 $functions > "build-tsan/$exe.tsan.log" 2>&1; then
        echo "  TSan $exe: PASS ($(( $(date +%s) - s0 )) s)"
      else
        rc=1
        echo "  TSan $exe: FAIL ($(( $(date +%s) - s0 )) s); log follows"
        cat "build-tsan/$exe.tsan.log"
      fi
      if grep -q "WARNING: ThreadSanitizer" "build-tsan/$exe.tsan.log"; then
        rc=1
        echo "  TSan $exe: ThreadSanitizer reports in build-tsan/$exe.tsan.log"
      fi
    done <<< "$plan"
  fi
  t2=$(date +%s)
  summary+=("TSan (threading tests, GUI=$gui): build $((t1 - t0)) s, tests $((t2 - t1)) s, $([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc $rc)")")
  [ $rc -eq 0 ] || status=1
fi

echo
echo "=== sanitizers summary ==="
for s in "${summary[@]}"; do echo "  $s"; done
exit $status
