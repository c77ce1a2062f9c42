#!/usr/bin/env bash
# Which driver library the cuda backend loads (gpool-worker --cuda-driver, from gpool-server --cuda-driver):
# gpool's own client library found as libcuda.so.1 on the library path is refused as a mistake; named with
# --cuda-driver it is taken, with a warning (the chain of servers of run_through_gpool.sh); a named library
# that does not load is reported by its name.
# usage: driver_choice.sh GPOOL_WORKER CLIENT_LIBRARY_DIR
set -u
worker=$1; client=$2
failures=0
# expect DESCRIPTION PATTERN COMMAND...: COMMAND fails (no usable device here) and says PATTERN.
expect() {
  local what=$1 pattern=$2 out
  shift 2
  out=$("$@" 2>&1)
  if [ $? -ne 0 ] && grep -q -- "$pattern" <<<"$out"; then echo "PASS  $what"; else
    echo "FAIL  $what: expected /$pattern/ and a failure, got:"; echo "$out"; failures=$((failures + 1)); fi
}
expect "gpool's client library found on the library path is refused" "found first is gpool's client library" \
  env LD_LIBRARY_PATH="$client" "$worker" --probe
expect "gpool's client library named with --cuda-driver is loaded, with a warning" \
  "is gpool's client library: this worker forwards its driver calls to another gpool-server" \
  env GPOOL_SERVER=127.0.0.1:1 "$worker" --probe --cuda-driver "$client/libcuda.so.1"
expect "...and gets past loading to the device count (no server at 127.0.0.1:1)" "the driver loaded but reports no usable device" \
  env GPOOL_SERVER=127.0.0.1:1 "$worker" --probe --cuda-driver "$client/libcuda.so.1"
expect "a --cuda-driver that does not load is named" "cannot load /nonexistent/libcuda.so.1" \
  "$worker" --probe --cuda-driver /nonexistent/libcuda.so.1
[ $failures -eq 0 ] && echo "ALL PASSED"
exit $((failures > 0))
