#!/usr/bin/env bash
# Sets gpool up and runs the main job: builds and installs it under ./install, starts gpool-allocator and
# one gpool-server registered with it (cuda backend when a GPU is present, otherwise sim), and runs an
# unmodified CUDA program on half a GPU with `gpool run`.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$PWD/install
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build build
cmake --install build >/dev/null
state=$(mktemp -d)
aport=${GPOOL_DEMO_ALLOCATOR_PORT:-7430}
port=${GPOOL_DEMO_PORT:-7420}
"$prefix/bin/gpool-allocator" --listen 127.0.0.1:$aport --db "$state/allocator.db" --socket "$state/allocator.sock" &
allocator=$!
trap 'kill $server $allocator 2>/dev/null; wait $server $allocator 2>/dev/null; rm -rf "$state"' EXIT
for _ in $(seq 100); do [ -f "$state/allocator.db.token.pub" ] && break; sleep 0.05; done
# The GPU host gets the public key that verifies lease tokens, and makes a key of its own, which the admin
# enrolls (with the allocator's admin key).
"$prefix/bin/gpool-server" --listen 127.0.0.1:$port --backend auto --name demo-gpu \
  --allocator http://127.0.0.1:$aport --token-key "$state/allocator.db.token.pub" --server-key "$state/server.pem" \
  --sim-kernels "$PWD/build/tests/libgpool_test_sim_kernels.so" &
server=$!
for _ in $(seq 100); do [ -f "$state/server.pub" ] && break; sleep 0.05; done
GPOOL_ALLOCATOR=unix:$state/allocator.sock "$prefix/bin/gpool" admin --key-file "$state/allocator.db.key" \
  server enroll demo-gpu "$state/server.pub"
# Users on the allocator's host reach it on its local socket: the kernel tells it who they are (no MUNGE needed).
export GPOOL_ALLOCATOR=unix:$state/allocator.sock
for _ in $(seq 100); do "$prefix/bin/gpool" status 2>/dev/null | grep -q demo-gpu && break; sleep 0.1; done
"$prefix/bin/gpool" status
echo "--- gpool run -p 0.5 -- tests/cuda_programs/basic.cu (built by nvcc, unmodified) ---"
"$prefix/bin/gpool" run -p 0.5 -- ./build/tests/cuda_basic_static
