#!/usr/bin/env bash
# Starts gpool-server (sim) in its own process group, runs server_loss against it, kills the server and
# its workers while the program holds memory, and checks the program reports CUDA errors and exits normally.
# usage: server_loss.sh BUILD_DIR PROGRAM
set -u
build=$1; prog=$2
dir=$(mktemp -d)
trap 'kill -9 -- -$server 2>/dev/null; rm -rf "$dir"' EXIT
setsid "$build/server/gpool-server" --listen 127.0.0.1:0 --backend sim --module-cache "$dir/cache" 2>"$dir/log" &
server=$!
for _ in $(seq 100); do
  port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$dir/log" | grep -oE '[0-9]+$'); [ -n "$port" ] && break; sleep 0.05
done
GPOOL_SERVER=127.0.0.1:$port LD_LIBRARY_PATH="$build/lib/gpool" "$prog" "$dir/go" >"$dir/out" 2>&1 &
client=$!
for _ in $(seq 200); do grep -q READY "$dir/out" && break; sleep 0.05; done
kill -9 -- -$server   # the server and every worker it started
sleep 0.2
touch "$dir/go"
wait $client; rc=$?
cat "$dir/out"
if [ $rc -gt 128 ]; then echo "FAIL: the program was killed by signal $((rc - 128))"; exit 1; fi
grep -q "lost the connection to gpool-server at 127.0.0.1:$port" "$dir/out" || { echo "FAIL: no log line naming the address"; exit 1; }
[ "$(grep -c 'lost the connection' "$dir/out")" -eq 1 ] || { echo "FAIL: the loss was logged more than once"; exit 1; }
exit $rc
