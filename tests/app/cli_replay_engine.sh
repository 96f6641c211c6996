#!/bin/sh
# Replay's hit tokens equal the live engine's on the same requests: a hand-built kvscope-format
# trace is replayed at block size 16 and written as a workload (--workload-out: the synthesized
# prompt ids, below stories260K's 512-token vocabulary, one request at a time, max_tokens 1);
# `kvscope-cli run` computes it for real with the same block size and pool, and its prefix-cache
# hit tokens must equal replay's, unbounded and with LRU evictions. With a pool smaller than two
# prompts the two differ as documented: the engine rejects them, replay keeps their head.
# Usage: cli_replay_engine.sh KVSCOPE_CLI SHARED_DIR  (exit 77: no model)
set -u
cli="$1"
model="$2/models/stories260K.gguf"
[ -f "$model" ] || { echo "no $model: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/out" ] && { echo "----- output -----"; cat "$tmp/out"; }; exit 1; }

# Shared prefixes of several lengths, a prompt ending on a block boundary (its last block is
# recomputed into a second copy), partial trace blocks, two long unrelated prompts.
cat >"$tmp/trace.jsonl" <<'T'
{"timestamp_ms": 0, "input_length": 100, "output_length": 1, "hash_ids": [1, 2, 3, 4], "block_size": 32, "session_id": "a"}
{"timestamp_ms": 1, "input_length": 100, "output_length": 1, "hash_ids": [1, 2, 3, 5], "block_size": 32, "session_id": "b"}
{"timestamp_ms": 2, "input_length": 70, "output_length": 1, "hash_ids": [1, 2, 6], "block_size": 32, "session_id": "c"}
{"timestamp_ms": 3, "input_length": 200, "output_length": 1, "hash_ids": [7, 8, 9, 10, 11, 12, 13], "block_size": 32}
{"timestamp_ms": 4, "input_length": 64, "output_length": 1, "hash_ids": [1, 2], "block_size": 32}
{"timestamp_ms": 5, "input_length": 129, "output_length": 1, "hash_ids": [1, 2, 3, 4, 9], "block_size": 32}
{"timestamp_ms": 6, "input_length": 210, "output_length": 1, "hash_ids": [7, 8, 9, 10, 11, 12, 14], "block_size": 32}
T

"$cli" replay --trace "$tmp/trace.jsonl" --format kvscope --block-size 16 --vocab-size 512 \
  --capacity-tokens 0,320,160 --workload-out "$tmp/w.json" --json-out "$tmp/r.json" >"$tmp/out" 2>&1 ||
  fail "replay exit code $?"
pool=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["curve"][0]["pool_blocks"])' "$tmp/r.json")
for kb in "$pool" 20 10; do
  "$cli" run --model "$model" --workload "$tmp/w.json" --block-size 16 --kv-blocks "$kb" --prefix-caching on \
    --threads 1 --json-out "$tmp/e$kb.json" >"$tmp/out" 2>&1 || fail "run --kv-blocks $kb exit code $?"
done

python3 - "$tmp/r.json" "$tmp/e$pool.json" "$tmp/e20.json" "$tmp/e10.json" <<'PY' || fail "replay vs engine"
import json, sys
curve = json.load(open(sys.argv[1]))["curve"]
runs = [json.load(open(f))["paged"] for f in sys.argv[2:]]
for point, run in zip(curve[:2], runs[:2]):
    cached = [r["cached_prompt_tokens"] for r in run["requests"]]
    print("capacity", point["capacity_tokens"], "replay", point["hit_tokens"], "engine", cached)
    assert all(r["state"] == "finished" for r in run["requests"]), run["requests"]
    assert sum(cached) == run["prefix_cache_hits_tokens"] == point["hit_tokens"], (point, cached)
    assert point["truncated_requests"] == 0, point
assert curve[0]["evictions"] == 0 and curve[1]["evictions"] > 0, curve
assert curve[1]["hit_tokens"] < curve[0]["hit_tokens"], curve
# 10 blocks hold neither 200-token prompt: the engine rejects both, replay keeps their head.
states = [r["state"] for r in runs[2]["requests"]]
assert states.count("rejected") == 2, states
assert curve[2]["truncated_requests"] == 2, curve[2]
PY
echo "cli_replay_engine: ok"
