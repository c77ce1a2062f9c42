#!/usr/bin/env bash
# Copies between two devices (bench/peer_copy.cu) natively, when a GPU is present, and through gpool, side
# by side in one run:
# - two shares of one gpool-server's device 0 (each its own worker, as `gpool run -n 2 -p 0.5` gives on one
#   GPU): copies go between the workers through CUDA IPC;
# - on sim, two gpool-servers that stand for two hosts (--sim-separate-host): copies go from one server's
#   worker straight to the other's over a peer link, and, with --no-peer-links, through the client.
# usage: bench/peer.sh [BUILD_DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
logs=$(mktemp -d)
servers=()
trap 'kill "${servers[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$logs"' EXIT
backend=sim; nvidia-smi >/dev/null 2>&1 && backend=cuda

# Starts a gpool-server with extra arguments; sets $port.
start_server() {
  local log="$logs/server${#servers[@]}.log" args=(--listen 127.0.0.1:0 --backend "$backend" --module-cache none "$@")
  [ $backend = sim ] && args+=(--sim-memory $((4 << 30)))
  LD_LIBRARY_PATH="$build/server" "$build/server/gpool-server" "${args[@]}" 2>"$log" &
  servers+=($!)
  port=
  for _ in $(seq 100); do
    port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$'); [ -n "$port" ] && return; sleep 0.05
  done
  echo "gpool-server did not start:"; cat "$log"; exit 2
}

# Runs the benchmark through gpool on the given GPOOL_SHARES.
through_gpool() {
  GPOOL_SHARES="$1" LD_LIBRARY_PATH="$build/lib/gpool:/usr/local/cuda/lib64" "$build/bench/gpool_bench_peer_copy" || exit 1
}

echo "copies between two devices — backend: $backend"
if [ $backend = cuda ]; then
  echo "--- native (one GPU: the peer copies are within device 0)"
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$build/bench/gpool_bench_peer_copy" || exit 1
fi
start_server
echo "--- through gpool: two shares of device 0 of one server (CUDA IPC between the workers)"
through_gpool "127.0.0.1:$port 0 -,127.0.0.1:$port 0 -"
[ $backend = sim ] || exit 0
start_server --sim-separate-host; a=$port
start_server --sim-separate-host; b=$port
echo "--- through gpool: two servers standing for two hosts (the workers' peer link)"
through_gpool "127.0.0.1:$a 0 -,127.0.0.1:$b 0 -"
start_server --sim-separate-host --no-peer-links; a=$port
start_server --sim-separate-host --no-peer-links; b=$port
echo "--- through gpool: two servers standing for two hosts, without peer links (relayed by the client)"
through_gpool "127.0.0.1:$a 0 -,127.0.0.1:$b 0 -"
