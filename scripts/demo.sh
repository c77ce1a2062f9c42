#!/usr/bin/env bash
# Sets gpool up and runs the main job: builds and installs it under ./install, starts gpool-server
# (cuda backend when a GPU is present, otherwise sim), and runs an unmodified CUDA program through it.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$PWD/install
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build build
cmake --install build >/dev/null
port=${GPOOL_DEMO_PORT:-7420}
"$prefix/bin/gpool-server" --listen 127.0.0.1:$port --backend auto \
  --sim-kernels "$PWD/build/tests/libgpool_test_sim_kernels.so" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
sleep 1
echo "--- running tests/cuda_programs/basic.cu (built by nvcc, unmodified) through gpool ---"
GPOOL_SERVER=127.0.0.1:$port LD_LIBRARY_PATH="$prefix/lib/gpool" ./build/tests/cuda_basic_static
