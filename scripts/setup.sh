#!/usr/bin/env bash
# Installs what minfer builds with (Debian 12 packages), configures and builds.
#   bash scripts/setup.sh [TARGET...]     (default: everything)
# Safe to re-run: apt runs only when a package is missing; the build is incremental.
# BUILD_DIR (default build) and MINFER_CUDA (AUTO|ON|OFF) may be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config ccache file python3 chromium libboost-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libgtest-dev nlohmann-json3-dev libcpp-httplib-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

build=${BUILD_DIR:-build}
# The CUDA toolkit lives in /usr/local/cuda on these machines; CMake finds nvcc there itself.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_CUDA="${MINFER_CUDA:-AUTO}"
fi
if [ $# -gt 0 ]; then
  cmake --build "$build" --target "$@"
else
  cmake --build "$build"
fi
