#!/bin/sh
# `kvscope-cli eval --sweep` end to end on stories260K: the JSON has every documented field per
# point, the f32 full point has KL 0 and top-1 1, a frontier is marked, --nll gives one NLL per
# prediction, --recompute-window its rows; bad axes are usage errors (exit 2) naming the word;
# benchmarks/plot_sweep.py's table reads the file; eval --kivi-residual lists and refusals. Usage: cli_eval_sweep.sh KVSCOPE_CLI SHARED_DIR SOURCE_DIR
set -u
cli="$1"
model="$2/models/stories260K.gguf"
src="$3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/err" ] && { echo "----- stderr -----"; cat "$tmp/err"; }; exit 1; }
[ -f "$model" ] || { echo "SKIP: no $model"; exit 77; }

"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 160 --threads 2 \
  --sweep dtype=f32,int8 window=0,32 sinks=0,4 --nll --recompute-window 32 --recompute-rows 5 --out "$tmp/s.json" 2>"$tmp/err" ||
  fail "sweep exit code $?"
grep -q 'int8 window 32 sinks 4' "$tmp/err" || fail "no table row for int8 window 32 sinks 4"
python3 - "$tmp/s.json" <<'PY' || fail "sweep JSON checks"
import json, sys
j = json.load(open(sys.argv[1]))
pts = j["points"]
assert len(pts) == 6, len(pts)
need = ["label", "kv_dtype", "window", "sinks", "sinks_layers", "perplexity", "nll_mean", "kl_mean", "kl_p99", "kl_max",
        "top1_agreement", "kv_bytes_per_token", "peak_kv_bytes", "peak_residual_bytes", "peak_blocks_used", "pareto", "nll"]
for p in pts:
    missing = [k for k in need if k not in p]
    assert not missing, (p["label"], missing)
    assert len(p["nll"]) == 159, len(p["nll"])
f32 = [p for p in pts if p["kv_dtype"] == "f32" and p["window"] == 0][0]
assert f32["kl_mean"] == 0 and f32["top1_agreement"] == 1 and f32["pareto"], f32
assert any(p["pareto"] for p in pts if p["kv_dtype"] == "int8")
assert j["n_tokens"] == 160 and j["text_tokens"] > 2000 and j["frontier_metric"] == "kl_mean"
r = j["recompute_window"][0]
assert r["window"] == 32 and r["rows"] == [31, 62, 94, 126, 158], r["rows"]
PY
python3 "$src/benchmarks/plot_sweep.py" table "$tmp/s.json" >"$tmp/table" || fail "plot_sweep.py table"
grep -q '^| W = 32 |' "$tmp/table" || fail "no W = 32 row in the table"

# The eviction axis: off / h2o / snapkv points (snapkv choosing at --snapkv-at 80), each with
# its spec in the label and the JSON, eviction counts, window 0 only.
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 160 --threads 2 \
  --sweep window=0,32 'evict=off,h2o:20%,snapkv:20%' --snapkv-at 80 --nll --out "$tmp/e.json" 2>"$tmp/err" ||
  fail "evict sweep exit code $?"
grep -q 'f32 full h2o:20%' "$tmp/err" || fail "no table row for f32 full h2o:20%"
python3 - "$tmp/e.json" <<'PY' || fail "evict sweep JSON checks"
import json, sys
j = json.load(open(sys.argv[1]))
pts = {p["label"]: p for p in j["points"]}
assert sorted(pts) == ["f32 full", "f32 full h2o:20%", "f32 full snapkv:20%", "f32 window 32"], sorted(pts)
for p in pts.values():
    for k in ["evict", "tokens_evicted", "peak_kept_tokens", "compactions", "compaction_bytes_copied"]:
        assert k in p, (p["label"], k)
assert pts["f32 full"]["evict"] == "off" and pts["f32 full"]["tokens_evicted"] == 0
h, s = pts["f32 full h2o:20%"], pts["f32 full snapkv:20%"]
# 20% of 160 = 32 kept; 64-token chunks: each chunk's step cuts back to 32 (the last one finishes
# the sequence instead): 32 + 64 evicted.
assert h["evict"] == "h2o:20%" and h["tokens_evicted"] == 32 + 64, h["tokens_evicted"]
# Snapshots come after each step's cut, and the sequence is gone after the last: the peak is the
# budget (it read 19 while freed blocks' stale holes were still counted).
assert h["peak_kept_tokens"] == 32, h["peak_kept_tokens"]
assert s["evict"] == "snapkv:20%" and s["tokens_evicted"] > 0 and s["kl_mean"] > 0, s
assert h["peak_kv_bytes"] < pts["f32 full"]["peak_kv_bytes"]
assert j["reference"]["evict"] == "off"
PY
python3 "$src/benchmarks/plot_sweep.py" table "$tmp/e.json" >"$tmp/table" || fail "plot_sweep.py table with eviction points"
grep -q '^| W = 32 |' "$tmp/table" || fail "no W = 32 row in the eviction sweep's table"

for bad in "budget=4" "window=-1" "dtype=q3" "evict=lru:4" "evict=h2o:101%" "window=4 window=8"; do
  # shellcheck disable=SC2086
  "$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 --sweep $bad >/dev/null 2>"$tmp/err"
  rc=$?
  [ "$rc" = 2 ] || fail "--sweep $bad: exit code $rc, wanted 2 (usage error)"
done
grep -q "given twice" "$tmp/err" || fail "repeated axis not named"
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 --sweep 'evict=h2o:x' >/dev/null 2>"$tmp/err"
[ "$?" = 2 ] || fail "a bad eviction spec must be a usage error"
grep -q "evict=h2o:x" "$tmp/err" || fail "a bad eviction spec's word not named"
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 --evict h2o:8 --sweep window=0 >/dev/null 2>"$tmp/err"
[ "$?" = 2 ] || fail "--evict beside --sweep must be a usage error"
grep -q "as an axis" "$tmp/err" || fail "--evict beside --sweep: no hint to the axis"
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 window=4 >/dev/null 2>"$tmp/err"
[ "$?" = 2 ] || fail "axes without --sweep must be a usage error"
# --kivi-residual: a list runs each KIVI dtype once per R (others once, with 0), the JSON names
# R per run and the residual's bytes grow with it; a bad value is a usage error; an engine
# command refuses R with a non-KIVI dtype and says why.
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 120 --threads 2 \
  --kv-dtype int8,kivi4 --kivi-residual 0,32 --json >"$tmp/r.json" 2>"$tmp/err" || fail "eval --kivi-residual exit code $?"
python3 - "$tmp/r.json" <<'PY' || fail "eval --kivi-residual JSON checks"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert [(r["kv_dtype"], r["kivi_residual"]) for r in runs] == [("int8", 0), ("kivi4", 0), ("kivi4", 32)], runs
assert runs[2]["peak_residual_bytes"] > runs[1]["peak_residual_bytes"] > 0 == runs[0]["peak_residual_bytes"]
assert runs[2]["kl_mean"] < runs[1]["kl_mean"], (runs[1]["kl_mean"], runs[2]["kl_mean"])
PY
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 --kivi-residual=-3 >/dev/null 2>"$tmp/err"
[ "$?" = 2 ] || fail "a negative --kivi-residual must be a usage error"
"$cli" generate --model "$model" --prompt "Once" -n 4 --kv-dtype int8 --kivi-residual 32 >/dev/null 2>"$tmp/err"
[ "$?" != 0 ] || fail "generate accepted --kivi-residual with int8"
grep -q "kivi4, kivi2 or rot4c only" "$tmp/err" || fail "generate --kivi-residual with int8: no reason given"
"$cli" generate --model "$model" --prompt "Once upon a time" -n 40 --kv-dtype kivi4 --kivi-residual 32 --threads 2 >/dev/null 2>"$tmp/err" ||
  fail "generate with kivi4 --kivi-residual 32: exit code $?"
grep -q "KIVI residual 32 tokens in f16" "$tmp/err" || fail "the start-up line does not name the residual"
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 --kivi-residual 16 \
  --sweep dtype=kivi4 residual=0,16 >/dev/null 2>"$tmp/err"
[ "$?" = 2 ] || fail "--kivi-residual beside the residual axis must be a usage error"
echo "cli_eval_sweep: ok"
