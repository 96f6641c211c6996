#!/usr/bin/env bash
# Screenshots of every workbench panel under a real run, in the light and the dark palette.
#   scripts/screenshots.sh [BUILD_DIR] [OUT_DIR] [extra kvscope args...]
# BUILD_DIR defaults to build (or build-gui when that is the one with the kvscope binary), OUT_DIR to
# screenshots-tmp/ (git-ignored). The model is $KVSCOPE_MODEL, else ../shared/models/stories260K.gguf.
# Runs headless (QT_QPA_PLATFORM=offscreen); each run takes a few seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-}"
if [[ -z "$build" ]]; then
  for b in build build-gui; do [[ -x "$root/$b/app/kvscope" ]] && build="$root/$b" && break; done
fi
[[ -n "$build" && -x "$build/app/kvscope" ]] || { echo "no kvscope binary found; build the 'kvscope' target first" >&2; exit 1; }
out="${2:-$root/screenshots-tmp}"
shift $(( $# > 2 ? 2 : $# ))
model="${KVSCOPE_MODEL:-$root/../shared/models/stories260K.gguf}"
[[ -f "$model" ]] || { echo "model not found: $model (set KVSCOPE_MODEL)" >&2; exit 1; }

export QT_QPA_PLATFORM=offscreen
for theme in light dark; do
  rm -rf "$out/$theme"
  mkdir -p "$out/$theme"
  "$build/app/kvscope" --model "$model" --theme "$theme" --screenshot-dir "$out/$theme" "$@" \
    2> >(grep -v 'This plugin does not support' >&2)
done
# Paged vs the contiguous baseline on many short chats (the compare shots are the point here).
rm -rf "$out/baseline"
mkdir -p "$out/baseline"
"$build/app/kvscope" --model "$model" --theme light --screenshot-dir "$out/baseline" \
  --scenario many-short-chats --compare alloc=contiguous "$@" 2> >(grep -v 'This plugin does not support' >&2)
echo "screenshots in $out/{light,dark,baseline}"
