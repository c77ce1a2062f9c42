#!/usr/bin/env bash
# Runs a CUDA program through gpool: starts gpool-server on a free loopback port, points the program at
# it with GPOOL_SERVER and gpool's libcuda.so.1 first on LD_LIBRARY_PATH, and returns the program's status.
# usage: run_through_gpool.sh BUILD_DIR BACKEND(sim|cuda|chain) PROGRAM [ARGS...]
#   chain: the program's server runs the cuda backend, whose driver (--cuda-driver) is gpool's client library
#   connected to a second server on sim. So the cuda backend's own code runs, on every call, without a GPU;
#   GPOOL_TEST_SERVER_ARGS' --sim-* options go to the second server, the others to the first. The second is
#   always BUILD_DIR's (GPOOL_TEST_SERVER_DIR names the first): its fixed addresses lie in what a sanitizer
#   keeps for itself, where an instrumented sim worker could not map them.
set -u
build=$1; backend=$2; shift 2
logs=()
cache=$(mktemp -d /tmp/gpool-modules-XXXXXX)  # each test starts with an empty module cache
servers=()
trap 'kill "${servers[@]}" 2>/dev/null; wait "${servers[@]}" 2>/dev/null; rm -rf "${logs[@]}" "$cache"' EXIT
# GPOOL_TEST_SERVER_DIR=DIR: gpool-server and its workers from another build (the ThreadSanitizer pass's).
daemons=${GPOOL_TEST_SERVER_DIR:-$build/server}
# GPOOL_TEST_CLIENT_DIR=DIR: gpool's client library from another build (scripts/test.sh's ThreadSanitizer pass),
# with GPOOL_TEST_PRELOAD, the sanitizer's runtime, which a program not built with it does not load itself.
client=${GPOOL_TEST_CLIENT_DIR:-$build/lib/gpool}
# shellcheck disable=SC2206  # extra server options for one test, split on spaces
extra=(${GPOOL_TEST_SERVER_ARGS:-})

# start_server BACKEND [OPTION...]: a gpool-server on a free loopback port (with the environment as set
# for this call), its port in $port. Exits when it does not start.
start_server() {
  local kind=$1 log
  shift
  log=$(mktemp /tmp/gpool-server-XXXXXX.log)
  logs+=("$log")
  local args=(--listen 127.0.0.1:0 --backend "$kind" --module-cache "$cache/$kind")
  [ "$kind" = sim ] && args+=(--sim-kernels "$build/tests/libgpool_test_sim_kernels.so")
  LD_LIBRARY_PATH="$daemons${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$daemons/gpool-server" "${args[@]}" "$@" 2>"$log" &
  servers+=($!)
  port=
  for _ in $(seq 100); do
    port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$')
    [ -n "$port" ] && return
    sleep 0.05
  done
  echo "gpool-server did not start:"; cat "$log"; exit 2
}

if [ "$backend" = chain ]; then
  sim_args=(); cuda_args=()
  for a in "${extra[@]}"; do if [[ $a == --sim-* ]]; then sim_args+=("$a"); else cuda_args+=("$a"); fi; done
  # (fixed addresses: device memory at 0x300000000 up, where the program, the cuda backend's worker and
  # its client library keep nothing, so that managed memory can have one address in all three)
  daemons=$build/server start_server sim --sim-fixed-addresses "${sim_args[@]}"
  # GPOOL_TEST_DRIVER_DIR=DIR: the cuda backend's driver from another build (with its daemons: the sanitizer passes')
  GPOOL_SERVER=127.0.0.1:$port start_server cuda --cuda-driver "${GPOOL_TEST_DRIVER_DIR:-$client}/libcuda.so.1" "${cuda_args[@]}"
else
  start_server "$backend" "${extra[@]}"
fi
# GPOOL_TEST_SHARES=N: the program gets N shares of the server's device 0 (N devices, each its own worker).
if [ -n "${GPOOL_TEST_SHARES:-}" ]; then
  GPOOL_SHARES=$(for _ in $(seq "$GPOOL_TEST_SHARES"); do printf '127.0.0.1:%s 0 -,' "$port"; done)
  export GPOOL_SHARES=${GPOOL_SHARES%,}
fi
[ "$backend" = chain ] && export GPOOL_TEST_CHAIN=1  # (what a test program can tell of the chain: tests/cuda_programs/basic.cu)
GPOOL_SERVER=127.0.0.1:$port LD_PRELOAD=${GPOOL_TEST_PRELOAD:-${LD_PRELOAD:-}} \
  LD_LIBRARY_PATH="$client:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"
rc=$?
# The servers stop once their workers have finished (and said what a sanitizer found at their exit).
kill "${servers[@]}" 2>/dev/null
running() { local s; for s in "${servers[@]}"; do kill -0 "$s" 2>/dev/null && return 0; done; return 1; }
for _ in $(seq 100); do running || break; sleep 0.1; done
kill -9 "${servers[@]}" 2>/dev/null
wait "${servers[@]}" 2>/dev/null
# which transport the program's connections got, and their host-function channels (the program's server's)
grep -ohE "client .* moved to [A-Za-z ()]+|host-function channel open over [A-Za-z ]+" "${logs[-1]}" | sort | uniq -c
# The chain's first server must have served the program on the cuda backend, or the test tested nothing new.
if [ "$backend" = chain ] && ! grep -q "serving .* on cuda device" "${logs[-1]}"; then
  echo "FAIL  the program was not served on the cuda backend (chain)"; rc=1
fi
# A sanitizer's report from a server or a worker (built with one) fails the run, even where the program passed
# (a worker's lines stand in its server's log after the worker's name).
if grep -qE "WARNING: ThreadSanitizer|==[0-9]+==ERROR: |: runtime error: " "${logs[@]}" && [ $rc -eq 0 ]; then rc=1; fi
if [ $rc -ne 0 ]; then
  for log in "${logs[@]}"; do echo "--- gpool-server log ($log) ---"; cat "$log"; done
fi
exit $rc
