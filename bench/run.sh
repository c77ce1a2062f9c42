#!/usr/bin/env bash
# Runs the call-cost benchmark natively (when a GPU is present) and through gpool over each transport
# (loopback TCP, shared memory, and UCX where it loads: with no RDMA device, over UCX's own shared
# memory or TCP), plus the loopback TCP limit, in one run, and prints a table with the ratios the issues
# set targets for.
# usage: bench/run.sh [BUILD_DIR]   (BUILD_DIR defaults to ./build; GPOOL_BENCH_TRANSPORTS="tcp shm" leaves out UCX)
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The loopback TCP limit as a program with blocking sockets sees it, and gpool's transport, which polls
# before it blocks (GPOOL_SPIN_US).
GPOOL_SPIN_US=0 "$build/bench/gpool_bench_tcp_loopback" > "$out/tcp_limit" || { echo "the loopback TCP benchmark failed"; exit 1; }
"$build/bench/gpool_bench_tcp_loopback" > "$out/tcp_polled" || { echo "the loopback TCP benchmark failed"; exit 1; }
if nvidia-smi >/dev/null 2>&1; then
  backend=cuda
  "$build/bench/gpool_bench_call_costs" > "$out/native" 2>&1 || { echo "the benchmark failed natively:"; cat "$out/native"; exit 1; }
else
  backend=sim
  : > "$out/native"
fi
# Through gpool over each transport, one after the other in this run (shm: the worker on this host).
for t in ${GPOOL_BENCH_TRANSPORTS:-tcp shm rdma}; do
  GPOOL_TRANSPORT=$t "$here/../tests/cuda_programs/run_through_gpool.sh" "$build" "$backend" "$build/bench/gpool_bench_call_costs" > "$out/$t" 2>&1 ||
    { echo "the benchmark failed through gpool over $t:"; cat "$out/$t"; exit 1; }
done
[ -f "$out/rdma" ] && grep -q "moved to RDMA" "$out/rdma" || : > "$out/rdma"  # no UCX here: no column
get() { [ -f "$out/$1" ] && awk -v k="$2" '$1==k {print $2}' "$out/$1"; }  # (a transport left out has no file)
tcp=$(get tcp_limit tcp_stream)
echo "gpool call costs — backend: $backend$( [ $backend = sim ] && echo ' (no GPU: through-gpool overheads only, no native column)')"
echo "loopback TCP: $(get tcp_limit tcp_stream) GB/s one stream, $(get tcp_limit tcp_roundtrip_8B) us 8-byte round trip ($(get tcp_polled tcp_roundtrip_8B) us polling first, as gpool's transport does)"
printf '%-22s %12s %12s %12s %12s %9s %9s %9s %9s  %s\n' metric native "gpool tcp" "gpool shm" "gpool rdma" "tcp/nat" "shm/nat" "shm/tcp" "rdma/tcp" target
row() {  # name unit target-description
  local n t m r
  n=$(get native "$1"); t=$(get tcp "$1"); m=$(get shm "$1"); r=$(get rdma "$1")
  ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx", a/b}'; else echo -; fi; }
  printf '%-22s %12s %12s %12s %12s %9s %9s %9s %9s  %s\n' "$1" "${n:--} $2" "${t:--} $2" "${m:--} $2" "${r:--} $2" \
    "$(ratio "$t" "$n")" "$(ratio "$m" "$n")" "$(ratio "$m" "$t")" "$(ratio "$r" "$t")" "$3"
}
# Targets: issue 2 (tcp), issue 13 on sim (shm against tcp) and on a GPU (shm against native).
row async_launch us "tcp <= 1.5x native"
row launch_sync us "tcp <= 30 us; shm <= 1/5 of tcp (0.20x); GPU: shm <= 15 us"
row occupancy_repeat us "gpool answers a repeated question itself"
row occupancy_new us ""
row dtoh_4B us "GPU: shm <= 15 us"
row malloc_free_1MiB us "a cudaMalloc + cudaFree pair: a round trip each through gpool"
row graph_dtoh_4B us "a captured copy's replay + wait: one more round trip than dtoh_4B over tcp"
row host_func us "a host function + wait: the worker's word to the client and back"
for k in htod_256MiB_pageable dtoh_256MiB_pageable; do
  row $k GB/s "tcp >= 80% of TCP: $(awk -v a="$(get tcp $k)" -v b="$tcp" 'BEGIN{printf "%.0f%%", 100*a/b}'); shm >= 2x tcp; GPU: shm >= native"
done
row htod_256MiB_pinned GB/s "GPU: shm >= 90% of native (0.90x)"
row dtoh_256MiB_pinned GB/s "GPU: shm >= 90% of native (0.90x)"
