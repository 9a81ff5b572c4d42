#!/usr/bin/env bash
# Installs what minfer builds with (Debian 12 packages), configures and builds.
#   bash scripts/setup.sh [TARGET...]     (default: everything)
#   bash scripts/setup.sh --packages      (the packages only: for builds configured elsewhere)
# Safe to re-run: apt runs only when a package is missing; the build is incremental.
# BUILD_DIR (default build) and MINFER_CUDA (AUTO|ON|OFF) may be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config ccache file python3 python3-jinja2 chromium libboost-dev libyaml-cpp-dev libspdlog-dev libfmt-dev libgtest-dev nlohmann-json3-dev libcpp-httplib-dev)
# Node.js and npm for the tests' real clients (tests/node): whatever node the machine has, else Debian's.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
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

[ "${1:-}" = "--packages" ] && exit 0

build=${BUILD_DIR:-build}
# The CUDA toolkit lives in /usr/local/cuda on these machines; CMake finds nvcc there itself.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_CUDA="${MINFER_CUDA:-AUTO}"
fi
# The npm packages of tests/node (OpenAI's and Anthropic's Node clients, playwright-core) into the build
# directory, again only when the lock file changed. No network: the tests that need them skip.
node_dir="$build/node-tests"
if ! cmp -s tests/node/package-lock.json "$node_dir/package-lock.json" 2>/dev/null || [ ! -d "$node_dir/node_modules" ]; then
  mkdir -p "$node_dir"
  cp tests/node/package.json tests/node/package-lock.json "$node_dir/"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    { echo "setup: npm ci in $node_dir failed (no registry?): the server_clients test will skip"; rm -f "$node_dir/package-lock.json"; }
fi
if [ $# -gt 0 ]; then
  cmake --build "$build" --target "$@"
else
  cmake --build "$build"
fi
