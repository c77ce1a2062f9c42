#!/usr/bin/env bash
# Copies between two devices (bench/peer_copy.cu) natively, when a GPU is present, and through gpool with
# two shares of one gpool-server's device 0 (each its own worker, as `gpool run -n 2 -p 0.5` gives on one
# GPU), side by side in one run.
# usage: bench/peer.sh [BUILD_DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
log=$(mktemp)
backend=sim; nvidia-smi >/dev/null 2>&1 && backend=cuda
args=(--listen 127.0.0.1:0 --backend "$backend" --module-cache none)
[ $backend = sim ] && args+=(--sim-memory $((4 << 30)))
LD_LIBRARY_PATH="$build/server" "$build/server/gpool-server" "${args[@]}" 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do
  port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$'); [ -n "$port" ] && break; sleep 0.05
done
[ -n "${port:-}" ] || { echo "gpool-server did not start:"; cat "$log"; exit 2; }
echo "copies between two devices — backend: $backend"
if [ $backend = cuda ]; then
  echo "--- native (one GPU: the peer copies are within device 0)"
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$build/bench/gpool_bench_peer_copy" || exit 1
fi
echo "--- through gpool: two shares of device 0"
GPOOL_SHARES="127.0.0.1:$port 0 -,127.0.0.1:$port 0 -" LD_LIBRARY_PATH="$build/lib/gpool:/usr/local/cuda/lib64" \
  "$build/bench/gpool_bench_peer_copy" || exit 1
