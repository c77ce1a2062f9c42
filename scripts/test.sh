#!/usr/bin/env bash
# Builds gpool and runs every test (no GPU needed: CUDA programs run through gpool on the sim backend).
# Then builds it once more with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/) and runs the
# suite again there: every daemon, tool and library the tests start is instrumented, and any report fails
# its test. That second pass leaves out what needs nvcc-built programs or NVIDIA's runtime (neither is
# instrumented) and the fuzz targets (already sanitized, run in the first pass). Before it, the CUDA programs
# that use threads run through gpool once more with its client library, server and workers built with
# ThreadSanitizer (build-tsan/), and after it the CUDA programs through the AddressSanitizer build's server,
# workers and (for the chain to the cuda backend) client library (tests/cuda_programs/sanitized_programs.sh).
# usage: scripts/test.sh [--no-sanitizers]   (--no-sanitizers: the first pass only, for quick iteration)
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=1
[ "${1:-}" = "--no-sanitizers" ] && sanitizers=0
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
ctest --test-dir build --output-on-failure --timeout 300 -j2
[ $sanitizers = 1 ] || exit 0

echo "=== threads: the CUDA programs through a client library, gpool-server and workers built with ThreadSanitizer (build-tsan/)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1" -DGPOOL_SANITIZE=thread \
  -DGPOOL_BUILD_CUDA_PROGRAMS=OFF >/dev/null
cmake --build build-tsan --target gpool_cuda gpool-server gpool-worker
tests/cuda_programs/sanitized_programs.sh thread build build-tsan

echo "=== the test suite again, under AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/)"
# -O1 -g1: quicker to build than -O2 -g (the whole pass must fit in CI), and reports still name file and line.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g1" \
  -DGPOOL_SANITIZE=address,undefined -DGPOOL_BUILD_CUDA_PROGRAMS=OFF >/dev/null
cmake --build build-asan
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export GPOOL_SANITIZED=1  # tests that measure latency skip themselves: the first pass ran them
ctest --test-dir build-asan --output-on-failure --timeout 600 -j2 -E '^fuzz\.'
echo "=== the CUDA programs through gpool-server and workers built with AddressSanitizer and UndefinedBehaviorSanitizer"
tests/cuda_programs/sanitized_programs.sh address build build-asan
