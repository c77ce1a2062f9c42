#!/usr/bin/env bash
# Builds gpool and runs every test (no GPU needed: CUDA programs run through gpool on the sim backend).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
ctest --test-dir build --output-on-failure --timeout 300 -j2
