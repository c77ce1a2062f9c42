#!/usr/bin/env bash
# A client over shared memory killed (SIGKILL) in the middle of 256 MiB copies leaves nothing behind on the
# GPU host: its worker ends, and no process of the server holds or maps a gpool segment (the rings, or the
# pool of shared page-locked memory, whose registrations with the driver end with the worker) or its Unix socket.
# usage: shm_client_killed.sh BUILD_DIR PROGRAM (one that copies large buffers for a while)
set -u
build=$1; prog=$2
dir=$(mktemp -d)
trap 'kill -9 -- -$server 2>/dev/null; rm -rf "$dir"' EXIT
setsid "$build/server/gpool-server" --listen 127.0.0.1:0 --backend sim --module-cache none 2>"$dir/log" &
server=$!
for _ in $(seq 100); do
  port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$dir/log" | grep -oE '[0-9]+$'); [ -n "$port" ] && break; sleep 0.05
done
[ -n "${port:-}" ] || { echo "FAIL: gpool-server did not start"; cat "$dir/log"; exit 1; }
# What the server's processes hold: gpool segments (memfd:gpool-shm, memfd:gpool-host-pool), open or
# mapped, and shared-memory sockets.
held() {
  local n=0 p inode
  for p in $(pgrep -g "$server"); do
    n=$((n + $(ls -l "/proc/$p/fd" 2>/dev/null | grep -cE 'memfd:gpool-(shm|host-pool)')))
    n=$((n + $(grep -cE 'memfd:gpool-(shm|host-pool)' "/proc/$p/maps" 2>/dev/null)))
    # Its Unix sockets with a gpool name (other programs on this host may have their own).
    for inode in $(ls -l "/proc/$p/fd" 2>/dev/null | grep -oE 'socket:\[[0-9]+\]' | grep -oE '[0-9]+'); do
      n=$((n + $(awk -v i="$inode" '$7 == i && $8 ~ /^@gpool-/' /proc/net/unix | wc -l)))
    done
  done
  echo $n
}
# The pool of page-locked memory, mapped by a process of the server (the worker).
pool_mapped() {
  local n=0 p
  for p in $(pgrep -g "$server"); do n=$((n + $(grep -c 'memfd:gpool-host-pool' "/proc/$p/maps" 2>/dev/null))); done
  echo $n
}
GPOOL_TRANSPORT=shm GPOOL_SERVER=127.0.0.1:$port LD_LIBRARY_PATH="$build/lib/gpool" "$prog" >"$dir/out" 2>&1 &
client=$!
for _ in $(seq 600); do grep -q "moved to shared memory" "$dir/log" && break; sleep 0.05; done
grep -q "moved to shared memory" "$dir/log" || { echo "FAIL: the client did not move to shared memory"; cat "$dir/log" "$dir/out"; exit 1; }
# Into the pinned copies: once the worker maps the client's page-locked pool (not after a fixed time,
# which a fast machine outran: the program had ended before the kill).
for _ in $(seq 1500); do [ "$(pool_mapped)" -gt 0 ] && break; kill -0 $client 2>/dev/null || break; sleep 0.02; done
during=$(held)
pool_during=$(pool_mapped)
kill -0 $client 2>/dev/null || { echo "FAIL: the client ended before it could be killed"; cat "$dir/out"; exit 1; }
kill -9 $client
wait $client 2>/dev/null
for _ in $(seq 300); do [ "$(pgrep -g "$server" | wc -l)" -le 1 ] && [ "$(held)" -eq 0 ] && break; sleep 0.05; done
echo "segments and sockets held while the client ran: $during; after it was killed: $(held)"
echo "processes of the server left: $(pgrep -g "$server" | wc -l) (the server itself)"
[ "$during" -gt 0 ] || { echo "FAIL: nothing was seen while the client ran (the check sees nothing)"; exit 1; }
echo "the worker mapped the page-locked pool while the client ran: $pool_during mapping(s)"
[ "$pool_during" -gt 0 ] || { echo "FAIL: the worker had not mapped the client's page-locked pool"; exit 1; }
[ "$(held)" -eq 0 ] || { echo "FAIL: a segment or socket outlived its client"; exit 1; }
[ "$(pgrep -g "$server" | wc -l)" -le 1 ] || { echo "FAIL: the worker outlived its client"; exit 1; }
grep -E "client .* (disconnected|closing)" "$dir/log" | tail -1
echo PASSED
