#!/bin/sh
# `kvscope-cli eval --sweep` end to end on stories260K: the JSON has every documented field per
# point, the f32 full point has KL 0 and top-1 1, a frontier is marked, --nll gives one NLL per
# prediction, --recompute-window its rows; bad axes are usage errors (exit 2) naming the word;
# benchmarks/plot_sweep.py's table reads the file. Usage: cli_eval_sweep.sh KVSCOPE_CLI SHARED_DIR SOURCE_DIR
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

for bad in "budget=4" "window=-1" "dtype=q3" "window=4 window=8"; do
  # shellcheck disable=SC2086
  "$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 --sweep $bad >/dev/null 2>"$tmp/err"
  rc=$?
  [ "$rc" = 2 ] || fail "--sweep $bad: exit code $rc, wanted 2 (usage error)"
done
grep -q "given twice" "$tmp/err" || fail "repeated axis not named"
"$cli" eval --model "$model" --text "$src/resources/texts/long-story.txt" --max-tokens 40 window=4 >/dev/null 2>"$tmp/err"
[ "$?" = 2 ] || fail "axes without --sweep must be a usage error"
echo "cli_eval_sweep: ok"
