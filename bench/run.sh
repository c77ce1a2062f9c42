#!/usr/bin/env bash
# Runs the call-cost benchmark natively (when a GPU is present) and through gpool over loopback TCP, plus
# the loopback TCP limit, in one run, and prints a table with the ratios the issue sets targets for.
# usage: bench/run.sh [BUILD_DIR]   (BUILD_DIR defaults to ./build)
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$build/bench/gpool_bench_tcp_loopback" > "$out/tcp" || exit 1
if nvidia-smi >/dev/null 2>&1; then
  backend=cuda
  "$build/bench/gpool_bench_call_costs" > "$out/native" || exit 1
else
  backend=sim
  : > "$out/native"
fi
"$here/../tests/cuda_programs/run_through_gpool.sh" "$build" "$backend" "$build/bench/gpool_bench_call_costs" > "$out/gpool" || exit 1
get() { awk -v k="$2" '$1==k {print $2}' "$out/$1"; }
tcp=$(get tcp tcp_stream)
echo "gpool call costs — backend: $backend$( [ $backend = sim ] && echo ' (no GPU: through-gpool overheads only, no native column)')"
echo "loopback TCP: $(get tcp tcp_stream) GB/s one stream, $(get tcp tcp_roundtrip_8B) us 8-byte round trip"
printf '%-22s %12s %12s %10s  %s\n' metric native gpool ratio target
row() {  # name unit target-description ratio-kind
  local n g r
  n=$(get native "$1"); g=$(get gpool "$1")
  if [ -n "$n" ] && [ -n "$g" ]; then r=$(awk -v a="$g" -v b="$n" 'BEGIN{printf "%.2fx", a/b}'); else r=-; fi
  printf '%-22s %12s %12s %10s  %s\n' "$1" "${n:--} $2" "${g:--} $2" "$r" "$3"
}
row async_launch us "gpool <= 1.5x native"
row launch_sync us "gpool <= 30 us"
row dtoh_4B us ""
for k in htod_256MiB_pageable dtoh_256MiB_pageable; do
  g=$(get gpool $k)
  row $k GB/s "gpool >= 80% of TCP: $(awk -v a="$g" -v b="$tcp" 'BEGIN{printf "%.0f%%", 100*a/b}')"
done
row htod_256MiB_pinned GB/s ""
row dtoh_256MiB_pinned GB/s ""
