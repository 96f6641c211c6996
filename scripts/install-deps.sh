#!/usr/bin/env bash
# Installs what kvscope needs to build, test and run, from Debian's packages (run as root).
# The CUDA toolkit is optional and not installed here: with nvcc on PATH the CUDA backend builds too.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config ccache
      qt6-base-dev libqcustomplot-dev libqcustomplot2.1-qt6 nlohmann-json3-dev
      libgl-dev xvfb xauth
      libcpp-httplib-dev libzmq3-dev cppzmq-dev libmsgpack-cxx-dev python3-venv)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kvscope: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
