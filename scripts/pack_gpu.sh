#!/usr/bin/env bash
# Copies what the GPU check needs from a build tree into .gpu/ (same layout, a few MiB), to carry to a
# GPU machine that has no -dev packages: run scripts/gpu_check.sh .gpu there (the scripts and
# tests/gpu/workloads.py travel with the working tree). Also packs .gpu, and .samples where built, into
# .carry/ (compressed: the device tool carries 64 MiB at most).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rm -rf .gpu && mkdir -p .gpu/server .gpu/lib .gpu/tests .gpu/bench .gpu/allocator
cp "$build"/server/gpool-server "$build"/server/gpool-worker .gpu/server/
# gpool-server links Debian's cpp-httplib (for --allocator); the GPU machine has no such package. It finds
# the copy beside it (RUNPATH $ORIGIN); the scripts add .gpu/server to LD_LIBRARY_PATH for brotli, and for
# libseccomp, which gpool-worker links (a minimal image may lack it).
for lib in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1 libseccomp.so.2; do
  cp -L "/usr/lib/x86_64-linux-gnu/$lib" .gpu/server/
done
cp -a "$build"/lib/gpool .gpu/lib/
# Every nvcc-built test program (whatever gpu_check.sh runs, now or after a change, is among them), the
# NVML probe and the sim kernels (bench/run.sh's sim runs).
find "$build"/tests -maxdepth 1 -type f -name 'cuda_*' -perm -u+x -exec cp {} .gpu/tests/ \;
cp "$build"/tests/nvml_query "$build"/tests/memcap_probe "$build"/tests/sandboxed_as_worker "$build"/tests/libgpool_test_sim_kernels.so .gpu/tests/
# The allocator, for the checks that need leases (gpu_check.sh's audit), with the libraries of ours a GPU
# machine lacks (all ldd names but the C and C++ runtimes and OpenSSL, which gpool-server needs there too).
mkdir -p .gpu/allocator/lib
cp "$build"/allocator/gpool-allocator .gpu/allocator/
ldd "$build"/allocator/gpool-allocator | awk '/=> \// {print $3}' \
  | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libssl|libcrypto|libz)\.so' | xargs -r cp -L -t .gpu/allocator/lib/
cp "$build"/bench/gpool_bench_call_costs "$build"/bench/gpool_bench_tcp_loopback "$build"/bench/gpool_bench_peer_copy .gpu/bench/
# The driver-call tracer of ../shared/tools/trace, where this checkout has it: gpu_run_all.sh lists what
# JAX asks of NVIDIA's driver natively with it.
trace=../shared/tools/trace
if [ -f "$trace/trace.c" ]; then
  mkdir -p .gpu/trace && gcc -O2 -shared -fPIC -o .gpu/trace/libtrace.so "$trace/trace.c" "$trace/tramp.S" -ldl -lpthread
fi
find .gpu -type f -exec strip --strip-debug {} +
du -sh .gpu
# What the device tool carries (64 MiB at most): .gpu and, where built (scripts/cuda_samples.py build SRC
# .samples), NVIDIA's samples, compressed into .carry/. On the device: tar xJf .carry/gpu.tar.xz;
# mkdir -p .samples && tar xJf .carry/samples.tar.xz -C .samples
mkdir -p .carry
tar cf - .gpu | xz -T0 -6 > .carry/gpu.tar.xz
if [ -d .samples/bin ]; then tar cf - -C .samples bin test_args.json | xz -T0 -6 > .carry/samples.tar.xz; else rm -f .carry/samples.tar.xz; fi
du -sh .carry
