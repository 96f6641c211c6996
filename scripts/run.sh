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
if [ -x "$build/app/kvscope" ]; then
  if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ] && [ -z "${QT_QPA_PLATFORM:-}" ]; then
    echo "kvscope: no display found; running under Xvfb (set DISPLAY to see the window)"
    exec xvfb-run -a -s "-screen 0 1280x800x24" "$build/app/kvscope" "$@"
  fi
  exec "$build/app/kvscope" "$@"
fi
exec "$build/app/kvscope-cli" generate "$@"
