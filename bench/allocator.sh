#!/usr/bin/env bash
# Starts gpool-allocator on a fresh database and drives it with gpool_bench_allocator: 125 simulated
# servers x 8 GPUs (1,000 GPUs) heartbeating every second, and lease requests at 1,000/s for 20 s.
# usage: bench/allocator.sh [BUILD_DIR] [extra gpool_bench_allocator flags]
# GPOOL_BENCH_LOG=FILE keeps the allocator's log (warnings and errors) in FILE.
# GPOOL_BENCH_STORE=etcd://... keeps the allocator's state there instead of a fresh SQLite file.
# Every simulated host and client comes from 127.0.0.1, one client to the allocator: its share of the
# allocator's CPU (--max-client-cpu) is turned off, or it would hold them all to a quarter of a CPU.
set -u
build=$(cd "${1:-$(dirname "$0")/../build}" && pwd); shift || true
dir=$(mktemp -d)
trap 'kill $alloc 2>/dev/null; wait $alloc 2>/dev/null; rm -rf "$dir"' EXIT
"$build/allocator/gpool-allocator" --listen 127.0.0.1:0 --db "$dir/bench.db" ${GPOOL_BENCH_STORE:+--store "$GPOOL_BENCH_STORE"} --log-level warn --max-client-cpu 0 2>"${GPOOL_BENCH_LOG:-$dir/log}" &
alloc=$!
for _ in $(seq 100); do [ -f "$dir/bench.db.key" ] && break; sleep 0.05; done
sleep 0.3
port=$(ss -ltnp 2>/dev/null | grep "pid=$alloc," | grep -oE '127\.0\.0\.1:[0-9]+' | head -1 | cut -d: -f2)
[ -n "$port" ] || { echo "allocator did not start"; cat "$dir/log"; exit 2; }
"$build/bench/gpool_bench_allocator" --allocator "http://127.0.0.1:$port" --key-file "$dir/bench.db.key" \
  --servers 125 --gpus-per-server 8 --rate 1000 --seconds 20 --hold 1.0 "$@"
