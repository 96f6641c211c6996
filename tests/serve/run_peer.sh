#!/bin/sh
# Runs one Python peer test of `kvscope-cli serve` in a venv under the build folder, with the
# PyPI packages it needs (the peers are other people's software: openai, prometheus-client).
# usage: run_peer.sh VENV_DIR KVSCOPE_CLI MODEL SCRIPT [packages...]
# Exit 77 (ctest: skipped) with the reason when the model or the packages cannot be had.
set -u
venv=$1 cli=$2 model=$3 script=$4
shift 4
if [ ! -f "$model" ]; then
  echo "SKIPPED: model $model not found (set KVSCOPE_SHARED_DIR)"
  exit 77
fi
mkdir -p "$(dirname "$venv")"
# ctest -j may start several of these at once: one creates the venv, the others wait.
(
  flock 9
  if [ ! -f "$venv/.installed-$(echo "$*" | tr ' ' '_')" ]; then
    if [ ! -x "$venv/bin/python" ]; then
      python3 -m venv "$venv" || { echo "SKIPPED: python3 -m venv failed (Debian: python3-venv)"; exit 77; }
    fi
    if ! "$venv/bin/pip" install -q --disable-pip-version-check "$@" >"$venv/pip.log" 2>&1; then
      echo "SKIPPED: pip could not install $* (no PyPI access?):"
      tail -3 "$venv/pip.log"
      exit 77
    fi
    touch "$venv/.installed-$(echo "$*" | tr ' ' '_')"
  fi
) 9>"$venv.lock" || exit $?
# Loopback only: a proxy from the environment must not see the test's requests.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
exec "$venv/bin/python" "$script" "$cli" "$model"
