#!/bin/sh
# The tokenizer peer test: every test vector of llama.cpp's vocabulary files (models/ggml-vocab-*
# with .inp/.out, from the llama-cpp-python 0.3.36 sdist on PyPI, downloaded once; only those files
# are kept, beside the serve peer tests' venv: VENV_DIR-llama-cpp-0.3.36-vocabs) through
# `kvscope-cli tokenize`. KVSCOPE_VOCABS_DIR names a folder to use instead. Exit 77 (ctest:
# skipped) with the reason when PyPI cannot be reached.
# usage: run_vocab_peer.sh VENV_DIR KVSCOPE_CLI SCRIPT
set -u
venv=$1 cli=$2 script=$3
vocabs=${KVSCOPE_VOCABS_DIR:-$venv-llama-cpp-0.3.36-vocabs}
mkdir -p "$(dirname "$venv")"
(
  flock 9
  if [ ! -d "$vocabs" ]; then
    work=$(mktemp -d)
    if ! python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
        llama-cpp-python==0.3.36 -d "$work" >"$work/pip.log" 2>&1; then
      echo "SKIPPED: pip could not download the llama-cpp-python 0.3.36 sdist (no PyPI access?):"
      tail -3 "$work/pip.log"
      rm -rf "$work"
      exit 77
    fi
    tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*' &&
      mv "$work"/llama_cpp_python-0.3.36/vendor/llama.cpp/models "$vocabs.tmp" &&
      mv "$vocabs.tmp" "$vocabs"
    rm -rf "$work"
    [ -d "$vocabs" ] || { echo "FAIL: the sdist has no vendor/llama.cpp/models/ggml-vocab-* files"; exit 1; }
  fi
) 9>"$venv.vocabs.lock" || exit $?
exec python3 "$script" "$cli" "$vocabs"
