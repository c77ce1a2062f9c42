#!/usr/bin/env bash
# Runs a CUDA program through gpool: starts gpool-server on a free loopback port, points the program at
# it with GPOOL_SERVER and gpool's libcuda.so.1 first on LD_LIBRARY_PATH, and returns the program's status.
# usage: run_through_gpool.sh BUILD_DIR BACKEND(sim|cuda) PROGRAM [ARGS...]
set -u
build=$1; backend=$2; shift 2
log=$(mktemp /tmp/gpool-server-XXXXXX.log)
cache=$(mktemp -d /tmp/gpool-modules-XXXXXX)  # each test starts with an empty module cache
server_args=(--listen 127.0.0.1:0 --backend "$backend" --module-cache "$cache")
[ "$backend" = sim ] && server_args+=(--sim-kernels "$build/tests/libgpool_test_sim_kernels.so")
# shellcheck disable=SC2206  # extra server options for one test, split on spaces
[ -n "${GPOOL_TEST_SERVER_ARGS:-}" ] && server_args+=($GPOOL_TEST_SERVER_ARGS)
# GPOOL_TEST_SERVER_DIR=DIR: gpool-server and its workers from another build (the ThreadSanitizer pass's).
daemons=${GPOOL_TEST_SERVER_DIR:-$build/server}
LD_LIBRARY_PATH="$daemons${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$daemons/gpool-server" "${server_args[@]}" 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$log" "$cache"' EXIT
for _ in $(seq 100); do
  port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$')
  [ -n "$port" ] && break
  sleep 0.05
done
if [ -z "${port:-}" ]; then echo "gpool-server did not start:"; cat "$log"; exit 2; fi
# GPOOL_TEST_SHARES=N: the program gets N shares of the server's device 0 (N devices, each its own worker).
if [ -n "${GPOOL_TEST_SHARES:-}" ]; then
  GPOOL_SHARES=$(for _ in $(seq "$GPOOL_TEST_SHARES"); do printf '127.0.0.1:%s 0 -,' "$port"; done)
  export GPOOL_SHARES=${GPOOL_SHARES%,}
fi
# GPOOL_TEST_CLIENT_DIR=DIR: gpool's client library from another build (scripts/test.sh's ThreadSanitizer pass),
# with GPOOL_TEST_PRELOAD, the sanitizer's runtime, which a program not built with it does not load itself.
client=${GPOOL_TEST_CLIENT_DIR:-$build/lib/gpool}
GPOOL_SERVER=127.0.0.1:$port LD_PRELOAD=${GPOOL_TEST_PRELOAD:-${LD_PRELOAD:-}} \
  LD_LIBRARY_PATH="$client:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
rc=$?
# which transport the program's connections got, and their host-function channels
grep -ohE "client .* moved to [A-Za-z ()]+|host-function channel open over [A-Za-z ]+" "$log" | sort | uniq -c
# A sanitizer's report from the server or a worker (built with one) fails the run, even where the program passed.
if grep -q "^WARNING: ThreadSanitizer\|^==[0-9]*==ERROR: " "$log" && [ $rc -eq 0 ]; then rc=1; fi
if [ $rc -ne 0 ]; then echo "--- gpool-server log ---"; cat "$log"; fi
exit $rc
