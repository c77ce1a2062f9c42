#!/usr/bin/env bash
# Module images cross the wire once per worker host: runs a cuBLAS program twice through one
# gpool-server with an empty module cache, and checks from the workers' logs that the first run sent
# images and the second sent none (every image came from the host's cache).
# usage: module_cache.sh BUILD_DIR PROGRAM [ARGS...]
set -u
build=$1; shift
dir=$(mktemp -d)
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$dir"' EXIT
"$build/server/gpool-server" --listen 127.0.0.1:0 --backend sim --module-cache "$dir/cache" 2>"$dir/log" &
server=$!
for _ in $(seq 100); do
  port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$dir/log" | grep -oE '[0-9]+$'); [ -n "$port" ] && break; sleep 0.05
done
[ -n "${port:-}" ] || { echo "FAIL: gpool-server did not start"; cat "$dir/log"; exit 2; }
for run in 1 2; do
  GPOOL_SERVER=127.0.0.1:$port LD_LIBRARY_PATH="$build/lib/gpool:/usr/local/cuda/lib64" "$@" >"$dir/out$run" 2>&1 ||
    { echo "FAIL: run $run failed"; cat "$dir/out$run" "$dir/log"; exit 1; }
  # the worker logs its totals as it exits, just after the client disconnects
  for _ in $(seq 100); do [ "$(grep -c 'module images:' "$dir/log")" -ge $run ] && break; sleep 0.05; done
done
grep 'module images:' "$dir/log" | sed 's/.*gpool-worker\[[0-9]*\] /  /'
first=$(grep 'module images:' "$dir/log" | sed -n 1p)
second=$(grep 'module images:' "$dir/log" | sed -n 2p)
sent1=$(echo "$first" | grep -oE 'images: [0-9]+ received' | grep -oE '[0-9]+')
sent2=$(echo "$second" | grep -oE 'images: [0-9]+ received' | grep -oE '[0-9]+')
cached1=$(echo "$first" | grep -oE '[0-9]+ loaded from the host cache' | grep -oE '^[0-9]+')
cached2=$(echo "$second" | grep -oE '[0-9]+ loaded from the host cache' | grep -oE '^[0-9]+')
[ "${sent1:-0}" -gt 0 ] || { echo "FAIL: the first run sent no images"; exit 1; }
[ "${sent2:-1}" -eq 0 ] || { echo "FAIL: the second run sent $sent2 images the host already held"; exit 1; }
# the same program loads the same images: every load of the second run came from the cache
loads1=$((sent1 + ${cached1:-0}))
[ "${cached2:-0}" -eq "$loads1" ] || { echo "FAIL: the second run loaded $cached2 images from the cache, expected $loads1"; exit 1; }
echo "PASS: first run sent $sent1 distinct images ($loads1 loads); second run sent none and loaded $cached2 from the host cache"
