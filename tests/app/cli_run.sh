#!/bin/sh
# `kvscope-cli run --baseline` and `kvscope-cli bench` end to end on stories260K: the run's
# JSON has both allocators with every documented field, paging wastes less and runs more at
# once, every request has the same tokens on both; the bench's JSON has its throughput and
# paging-ratio keys. Usage: cli_run.sh KVSCOPE_CLI SHARED_DIR SOURCE_DIR
set -u
cli="$1"
model="$2/models/stories260K.gguf"
src="$3"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/out" ] && { echo "----- output -----"; cat "$tmp/out"; }; exit 1; }

"$cli" run --model "$model" --workload "$src/resources/scenarios/many-short-chats.json" --baseline \
  --kv-memory 10 --block-size 16 --max-model-len 2048 --threads 2 --json-out "$tmp/run.json" >"$tmp/out" 2>&1 ||
  fail "run exit code $?"
grep -q '^blocked admission steps' "$tmp/out" || fail "the table has no blocked-admission row"
grep -q '^peak KV blocks used' "$tmp/out" || fail "the table has no peak-blocks row"

python3 - "$tmp/run.json" <<'PY' || fail "run JSON checks"
import json, sys
j = json.load(open(sys.argv[1]))
need = ["waste_pct", "largest_free_run", "total_free_at_peak", "peak_kv_bytes", "peak_blocks_used", "max_concurrent",
        "preemptions", "rejected", "generated_tokens", "tokens_per_s", "slots_reserved", "slots_filled",
        "peak_slots_reserved", "peak_slots_filled", "overflows", "grown_in_place", "relocations", "relocated_slots",
        "blocked_admission_steps", "blocked_by_fragmentation_steps", "failed_reservations", "external_fragmentation"]
for side in ("paged", "baseline"):
    assert side in j and isinstance(j[side], dict), "no %s object" % side
    missing = [k for k in need if k not in j[side]]
    assert not missing, "%s lacks %s" % (side, missing)
    assert j[side]["slots_reserved"] >= j[side]["slots_filled"] > 0, side
p, b = j["paged"], j["baseline"]
assert b["baseline_reserve"] == "max-model-len", b.get("baseline_reserve")
assert p["waste_pct"] < b["waste_pct"], (p["waste_pct"], b["waste_pct"])
assert p["max_concurrent"] > b["max_concurrent"], (p["max_concurrent"], b["max_concurrent"])
assert b["blocked_admission_steps"] > 0
assert len(p["requests"]) == len(b["requests"]) > 0
for rp, rb in zip(p["requests"], b["requests"]):
    for r in (rp, rb):
        assert all(k in r for k in ("id", "state", "tokens")), r.keys()
    assert rp["id"] == rb["id"] and rp["tokens"] == rb["tokens"], rp["id"]
    assert rp["state"] == rb["state"] == "finished", (rp["state"], rb["state"])
print("run: paged waste %.1f%% vs %.1f%%, %d vs %d at once, %d requests with identical tokens"
      % (p["waste_pct"], b["waste_pct"], p["max_concurrent"], b["max_concurrent"], len(p["requests"])))
PY

"$cli" run --model "$model" --workload "$src/resources/scenarios/many-short-chats.json" --baseline \
  --baseline-reserve lots >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "bad --baseline-reserve: exit code $rc, expected 2"
grep -q "baseline-reserve" "$tmp/out" || fail "bad --baseline-reserve message"

"$cli" bench --model "$model" --prompt-len 16 --gen 8 --reps 1 --batches 1,2 --contexts 256 --threads 2 \
  >"$tmp/bench.json" 2>"$tmp/out" || fail "bench exit code $?"
python3 - "$tmp/bench.json" <<'PY' || { cat "$tmp/bench.json"; fail "bench JSON checks"; }
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("prefill_tokens_per_s", "decode_tokens_per_s", "batch", "paging_cost"):
    assert k in j, k
assert [r["batch"] for r in j["batch"]] == [1, 2]
assert all(r["tokens_per_s"] > 0 for r in j["batch"])
# One fixed workload at every batch size: the same requests and tokens, at most `batch` at once.
assert [r["requests"] for r in j["batch"]] == [2, 2]
assert [r["generated_tokens"] for r in j["batch"]] == [16, 16]
assert [r["most_running"] for r in j["batch"]] == [1, 2]
# The full-batch decode steps' profile: some such steps ran, and the five shares of their time
# are each in [0, 1] and add up to the whole step.
for r in j["batch"]:
    d = r["decode_step"]
    assert d["steps"] > 0 and d["mean_ms"] > 0, d
    assert all(0 <= v <= 1 for v in d["share"].values()), d
    assert abs(sum(d["share"].values()) - 1) < 1e-6, d
row = j["paging_cost"][0]
assert row["context"] == 256
for cache in ("hot", "cold"):
    for k in ("paged_us", "contiguous_us", "paged_over_contiguous"):
        assert row[cache][k] > 0, (cache, k)
print("bench: batch tokens/s %s, paging ratio hot %.2f" % ([round(r["tokens_per_s"]) for r in j["batch"]],
                                                          row["hot"]["paged_over_contiguous"]))
PY
echo "cli run/bench: OK"
