#!/usr/bin/env bash
# The CUDA test programs through gpool with ThreadSanitizer: gpool's client library, gpool-server and its
# workers from a build made with it (-DGPOOL_SANITIZE=thread), the nvcc-built programs and NVIDIA's runtime
# from the main build (not instrumented; the sanitizer's runtime is preloaded into them). The client
# library's threads (host-function channels, the worker's liveness watch, output relay) share its state
# with the program's threads, and the worker's threads share the worker's; a data race or a lock-order
# inversion in either fails the program's run. Each program runs over shared memory, over TCP, and through
# the chain of run_through_gpool.sh (the cuda backend's worker, with the instrumented client library as its
# driver, in front of a sim server), whose worker threads are the cuda backend's.
# usage: thread_sanitizer.sh BUILD TSAN_BUILD [PROGRAM...]   (default: the programs listed below)
set -u
build=$(cd "$1" && pwd)
tsan=$(cd "$2" && pwd)
shift 2
here=$(cd "$(dirname "$0")" && pwd)
runtime=$(g++ -print-file-name=libtsan.so)
[ -e "$runtime" ] || { echo "ThreadSanitizer's runtime (libtsan.so) not found"; exit 2; }
# Programs with threads of their own or of gpool's, and what each needs of its environment. Not `managed`:
# the program and its worker both live in ThreadSanitizer's fixed memory layout here, so the worker's
# managed memory always lies where this process keeps the sanitizer's heap, and cannot be mapped at the
# same address (gpool then refuses it, as it says).
programs=("$@")
[ ${#programs[@]} -gt 0 ] || programs=(threads contexts host_functions graph_host_copies capture_streams captured_nodes
  async_errors fork_child launch_blocking:CUDA_LAUNCH_BLOCKING=1 multi_device:GPOOL_TEST_SHARES=2 device_output
  graph_memory user_objects runtime_compile)
export GPOOL_TEST_CLIENT_DIR=$tsan/lib/gpool GPOOL_TEST_SERVER_DIR=$tsan/server GPOOL_TEST_PRELOAD=$runtime
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0 second_deadlock_stack=1"
# UCX's memory hooks (libucm, in every worker) take a lock as a thread's stack is released at its exit,
# after the sanitizer has let go of the thread: the worker crashes. Its RDMA transport needs no hooks.
export UCX_MEM_EVENTS=no
failed=()
for entry in "${programs[@]}"; do
  name=${entry%%:*}
  extra=(); [ "$entry" = "$name" ] || extra=("${entry#*:}")
  for transport in shm tcp chain; do
    backend=sim
    [ $transport = chain ] && backend=chain
    out=$(env GPOOL_TRANSPORT=${transport/chain/shm} "${extra[@]}" timeout 300 "$here/run_through_gpool.sh" "$build" $backend "$build/tests/cuda_$name" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || grep -q "^WARNING: ThreadSanitizer" <<<"$out"; then
      echo "$out"
      echo "FAIL  $name over $transport under ThreadSanitizer (exit $rc)"
      failed+=("$name/$transport")
    else
      echo "PASS  $name over $transport under ThreadSanitizer"
    fi
  done
done
[ ${#failed[@]} -eq 0 ] || { echo "failed under ThreadSanitizer: ${failed[*]}"; exit 1; }
echo "ALL PASSED under ThreadSanitizer"
