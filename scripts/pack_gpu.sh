#!/usr/bin/env bash
# Copies what the GPU check needs from a build tree into .gpu/ (same layout, a few MiB), to carry to a
# GPU machine that has no -dev packages: run scripts/gpu_check.sh .gpu there (the scripts and
# tests/gpu/workloads.py travel with the working tree).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf .gpu && mkdir -p .gpu/server .gpu/lib .gpu/tests .gpu/bench
cp "$build"/server/gpool-server "$build"/server/gpool-worker .gpu/server/
cp -a "$build"/lib/gpool .gpu/lib/
cp "$build"/tests/cuda_basic_static "$build"/tests/cuda_basic_shared "$build"/tests/cuda_libraries "$build"/tests/nvml_query \
   "$build"/tests/libgpool_test_sim_kernels.so .gpu/tests/
cp "$build"/bench/gpool_bench_call_costs "$build"/bench/gpool_bench_tcp_loopback .gpu/bench/
find .gpu -type f -exec strip --strip-debug {} +
du -sh .gpu
