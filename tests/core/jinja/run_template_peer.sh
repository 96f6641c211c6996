#!/bin/sh
# The chat-template peer test: every template of llama.cpp's models/templates/ rendered by
# Python's jinja2 (in the serve peer tests' venv) and by `kvscope-cli chat-template`.
# The templates come from the llama-cpp-python 0.3.36 sdist on PyPI (77 MB, downloaded once;
# only models/templates/ is kept, beside the venv: VENV_DIR-llama-cpp-0.3.36-templates). KVSCOPE_TEMPLATES_DIR names a folder to
# use instead. Exit 77 (ctest: skipped) with the reason when PyPI cannot be reached.
# usage: run_template_peer.sh VENV_DIR KVSCOPE_CLI SCRIPT
set -u
venv=$1 cli=$2 script=$3
pkgs="jinja2==3.1.6"
templates=${KVSCOPE_TEMPLATES_DIR:-$venv-llama-cpp-0.3.36-templates}
mkdir -p "$(dirname "$venv")"
# ctest -j may start several peer tests at once: one sets the venv up, the others wait.
(
  flock 9
  if [ ! -f "$venv/.installed-$pkgs" ]; then
    if [ ! -x "$venv/bin/python" ]; then
      python3 -m venv "$venv" || { echo "SKIPPED: python3 -m venv failed (Debian: python3-venv)"; exit 77; }
    fi
    if ! "$venv/bin/pip" install -q --disable-pip-version-check "$pkgs" >"$venv/pip.log" 2>&1; then
      echo "SKIPPED: pip could not install $pkgs (no PyPI access?):"
      tail -3 "$venv/pip.log"
      exit 77
    fi
    touch "$venv/.installed-$pkgs"
  fi
  if [ ! -d "$templates" ]; then
    work=$(mktemp -d)
    if ! "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
        llama-cpp-python==0.3.36 -d "$work" >"$work/pip.log" 2>&1; then
      echo "SKIPPED: pip could not download the llama-cpp-python 0.3.36 sdist (no PyPI access?):"
      tail -3 "$work/pip.log"
      rm -rf "$work"
      exit 77
    fi
    tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work" --wildcards '*/vendor/llama.cpp/models/templates/*' &&
      mv "$work"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates "$templates.tmp" &&
      mv "$templates.tmp" "$templates"
    rm -rf "$work"
    [ -d "$templates" ] || { echo "FAIL: the sdist has no vendor/llama.cpp/models/templates/"; exit 1; }
  fi
) 9>"$venv.lock" || exit $?
exec "$venv/bin/python" "$script" "$cli" "$templates"
