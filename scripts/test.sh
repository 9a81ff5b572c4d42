#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine: set up, build everything, run ctest.
# On a machine without a GPU the CUDA tests skip, each with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" "$@"
