#!/bin/sh
# `kvscope-cli replay` end to end through a pipe: a hand-built Mooncake trace whose hit tokens
# are known, its JSON checked with python3; a malformed line exits 2 naming the line; --skip-bad
# counts it instead. Usage: cli_replay.sh KVSCOPE_CLI
set -u
cli="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/out" ] && { echo "----- output -----"; cat "$tmp/out"; }; exit 1; }

# Two prompts sharing 2 of 3 full blocks (1024 hit tokens at block size 512 and 16), then the
# first again with one token more (all 1536 hit while the cache holds them).
cat >"$tmp/trace.jsonl" <<'T'
{"timestamp": 0, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 5, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 4]}
{"timestamp": 9, "input_length": 1537, "output_length": 10, "hash_ids": [1, 2, 3, 5]}
T

cat "$tmp/trace.jsonl" | "$cli" replay --trace - --block-size 512 --capacity-tokens 0,1536,2048 \
  --json-out "$tmp/r.json" >"$tmp/out" 2>&1 || fail "replay exit code $?"
python3 - "$tmp/r.json" <<'PY' || fail "replay JSON checks"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["requests"] == 3 and j["skipped_lines"] == 0 and j["block_size"] == 512, j
c = j["curve"]
assert [p["capacity_tokens"] for p in c] == [0, 1536, 2048], c
for p in c:
    for k in ("capacity_tokens", "hit_ratio", "hit_tokens", "prompt_tokens", "evictions"):
        assert k in p, (k, p)
    assert p["prompt_tokens"] == 4609, p
    assert abs(p["hit_ratio"] - p["hit_tokens"] / 4609) < 1e-12, p
assert c[0]["hit_tokens"] == 1024 + 1536 and c[0]["evictions"] == 0, c[0]
# 3 blocks: the second request evicts the first's third block (LRU, tail first) to hold its own.
assert c[1]["hit_tokens"] < c[0]["hit_tokens"] and c[1]["evictions"] > 0, c[1]
PY

# /dev/stdin works like -, and block size 16 gives the same hits on whole 512-token identities.
"$cli" replay --trace /dev/stdin --block-size 16 --json-out "$tmp/r16.json" <"$tmp/trace.jsonl" >"$tmp/out" 2>&1 ||
  fail "replay --block-size 16 exit code $?"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["curve"]; assert c[0]["hit_tokens"] == 2560, c' \
  "$tmp/r16.json" || fail "block size 16 hits"

# A malformed second line: exit 2, the line number on stderr.
printf '%s\n%s\n' '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}' '{"timestamp": 1, ' |
  "$cli" replay --trace - >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 2 ] || fail "malformed line: exit $rc, not 2"
grep -q 'replay: line 2: ' "$tmp/err" || { cat "$tmp/err"; fail "no 'replay: line 2:' on stderr"; }

# --skip-bad: the same input runs, and the JSON counts the line.
printf '%s\n%s\n' '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}' '{"timestamp": 1, ' |
  "$cli" replay --trace - --skip-bad --json-out "$tmp/s.json" >"$tmp/out" 2>&1 || fail "--skip-bad exit code $?"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["skipped_lines"] == 1 and j["requests"] == 1, j' \
  "$tmp/s.json" || fail "--skip-bad JSON"

# A block size that does not divide 512 is refused with exit 2.
"$cli" replay --trace "$tmp/trace.jsonl" --block-size 48 >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "--block-size 48 not refused with exit 2"
# Fleets, tiers and timed mode: the JSON's sections, and bad options refused with exit 2.
"$cli" replay --trace "$tmp/trace.jsonl" --instances 2 --router prefix-aware --tiers gpu=2048,cpu=4096 \
  --json-out "$tmp/f.json" >"$tmp/out" 2>&1 || fail "fleet replay exit code $?"
"$cli" replay --trace "$tmp/trace.jsonl" --timed --preset Llama-3-70B --hardware H200 --tp 4 --capacity-tokens 4096 \
  --json-out "$tmp/t.json" >"$tmp/out" 2>&1 || fail "timed replay exit code $?"
python3 - "$tmp/f.json" "$tmp/t.json" <<'PY' || fail "fleet/timed JSON checks"
import json, sys
f = json.load(open(sys.argv[1]))
assert f["fleet"]["instances"] == 2 and f["fleet"]["router"] == "prefix-aware", f["fleet"]
assert len(f["fleet"]["per_instance"]) == 2 and f["fleet"]["total"]["requests"] == 3, f["fleet"]
assert f["pooled"]["gpu_tokens"] == 4096 and "single_tier" in f, f.keys()
t = json.load(open(sys.argv[2]))["timed"]
assert t["finished"] == 3 and t["rejected"] == 0 and t["hardware"] == "H200" and t["tensor_parallel"] == 4, t
for k in ("ttft_s", "queue_s", "tpot_s", "e2e_s"):
    assert t[k]["p50"] <= t[k]["p99"] <= t[k]["max"], (k, t[k])
assert t["ttft_s"]["mean"] > 0 and t["pool_use"], t
PY
for bad in "--tiers gpu=1M,disk=2M" "--instances 0" "--router random --instances 2" "--timed" \
  "--timed --preset NoSuchModel" "--timed --preset Llama-3-70B --hardware TPU" "--timed --preset Llama-3-70B --mfu 2" \
  "--instances 2 --capacity-tokens 1M,2M"; do
  # shellcheck disable=SC2086
  "$cli" replay --trace "$tmp/trace.jsonl" $bad >"$tmp/out" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || fail "'$bad': exit $rc, not 2"
done
echo "cli_replay: ok"
