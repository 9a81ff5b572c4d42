#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: set up, build, run the demo config.
#   bash scripts/run.sh [minfer-app arguments]   (default: --config configs/demo.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
bash scripts/setup.sh minfer-app minfer_plugin_cpu
# The CUDA plugin exists when configure found a toolkit; build it too so configs can use it.
if ninja -C "$build" -t targets all 2>/dev/null | grep -q '^minfer_plugin_cuda:'; then
  cmake --build "$build" --target minfer_plugin_cuda
fi
if [ $# -eq 0 ]; then set -- --config configs/demo.yaml; fi
exec "$build/bin/minfer-app" "$@"
