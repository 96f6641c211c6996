#!/usr/bin/env bash
# Where a long prompt's prefill time goes: attention vs the weight matmuls vs the rest
# (CpuBackend::PhaseTimes, via `kvscope-cli bench`), at 512, 2048 and 8192 prompt tokens, each
# prompt computed in one step, 2 threads. Shares are medians over --reps; tokens/s too.
#   benchmarks/prefill_profile.sh [MODEL] [BUILD_DIR] [REPS]
# Writes benchmarks/results/prefill-profile-<date>-<model>.json and prints a Markdown table.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/models/gemma-3-270m-q4_k_m.gguf}"
build="${2:-$root/build}"
reps="${3:-3}"
cli="$build/app/kvscope-cli"
[[ -x "$cli" ]] || { echo "no $cli: build the kvscope-cli target first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for n in 512 2048 8192; do
  "$cli" bench --model "$model" --threads 2 --no-batch --no-paging --gen 2 --reps "$reps" --prompt-len "$n" \
    --max-batched-tokens "$n" --max-model-len $((n + 64)) --kv-memory 1024 > "$work/$n.json" 2>/dev/null
done
out="$root/benchmarks/results/prefill-profile-$(date +%Y-%m-%d)-$(basename "$model" .gguf).json"
python3 - "$work" "$out" "$model" <<'PY'
import json, os, sys
work, out, model = sys.argv[1:]
rows = []
for n in (512, 2048, 8192):
    j = json.load(open(os.path.join(work, f"{n}.json")))
    s = j["single"]
    rows.append({"prompt_len": n, "prefill_tokens_per_s": s["prefill_tokens_per_s"], **s.get("prefill_time_share", {}),
                 "backend": j["backend"], "load_average": os.getloadavg()[0]})
json.dump({"model": model, "rows": rows}, open(out, "w"), indent=2)
print(f"| prompt tokens | prefill tok/s | attention | matmul | other |\n|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['prompt_len']} | {r['prefill_tokens_per_s']:.0f} | {r.get('attention', 0):.0%} | {r.get('matmul', 0):.0%} | {r.get('other', 0):.0%} |")
print(f"written {out}")
PY
