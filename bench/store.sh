#!/usr/bin/env bash
# The allocator on its two stores, side by side (issue 16): bench/allocator.sh on a fresh SQLite file and on
# a fresh three-member etcd cluster on loopback, alternating, RUNS times each.
# usage: bench/store.sh [BUILD_DIR] [RUNS] [extra gpool_bench_allocator flags]
# (--threads 32 keeps 1,000 requests a second going on etcd, whose answers take milliseconds: each client
# thread waits for its answers.)
set -u
build=$(cd "${1:-$(dirname "$0")/../build}" && pwd); shift || true
runs=${1:-2}; shift || true
here=$(cd "$(dirname "$0")" && pwd)
command -v etcd >/dev/null || { echo "etcd is not installed: apt-get install etcd-server"; exit 2; }
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cluster=""; clients=""
for m in 0 1 2; do c[$m]=$(port); p[$m]=$(port); cluster+="${cluster:+,}m$m=http://127.0.0.1:${p[$m]}"; clients+="${clients:+,}127.0.0.1:${c[$m]}"; done
for m in 0 1 2; do
  etcd --name m$m --data-dir "$dir/m$m" --listen-client-urls http://127.0.0.1:${c[$m]} --advertise-client-urls http://127.0.0.1:${c[$m]} \
    --listen-peer-urls http://127.0.0.1:${p[$m]} --initial-advertise-peer-urls http://127.0.0.1:${p[$m]} \
    --initial-cluster "$cluster" --initial-cluster-state new --max-txn-ops 10000 --log-level error 2>"$dir/m$m.log" &
  pids+=($!)
done
for _ in $(seq 100); do curl -sf -X POST "http://127.0.0.1:${c[0]}/v3/maintenance/status" -d '{}' | grep -q leader && break; sleep 0.1; done
for run in $(seq "$runs"); do
  for store in sqlite etcd; do
    echo "== run $run: $store"
    if [ $store = etcd ]; then
      curl -sf -X POST "http://127.0.0.1:${c[0]}/v3/kv/deleterange" -d '{"key":"L2dwb29sLw==","range_end":"L2dwb29sMA=="}' >/dev/null  # /gpool/ .. /gpool0: a fresh store
      GPOOL_BENCH_STORE="etcd://$clients" "$here/allocator.sh" "$build" "$@"
    else
      "$here/allocator.sh" "$build" "$@"
    fi | grep -E "request_rate|lease_ops|granted|request_latency|quantile=\"0.(5|99|999)\"|^gpool_store_"
  done
done
