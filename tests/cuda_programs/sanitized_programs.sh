#!/usr/bin/env bash
# The CUDA test programs through gpool built with a sanitizer (-DGPOOL_SANITIZE=...), the nvcc-built programs
# and NVIDIA's runtime from the main build. Each program runs on sim and through the chain of
# run_through_gpool.sh (the cuda backend's worker, with an instrumented client library as its driver, in
# front of a sim server), so the cuda backend's code is instrumented too; a report from any gpool process
# fails the program's run.
#   thread: gpool's client library, gpool-server and its workers with ThreadSanitizer (its runtime preloaded
#     into the program). The client library's threads (host-function channels, the worker's liveness watch,
#     output relay) share its state with the program's threads, and the worker's threads share the
#     worker's: a data race or a lock-order inversion fails the run. Over shared memory, TCP and the chain.
#   address: gpool-server, its workers and the chain's driver with AddressSanitizer and
#     UndefinedBehaviorSanitizer (the program's client library is the main build's). Over shared memory
#     and the chain. ASAN_OPTIONS and UBSAN_OPTIONS as the caller set them (scripts/test.sh).
# usage: sanitized_programs.sh thread|address BUILD SANITIZED_BUILD [PROGRAM...]   (default: the programs below)
set -u
kind=$1
build=$(cd "$2" && pwd)
san=$(cd "$3" && pwd)
shift 3
here=$(cd "$(dirname "$0")" && pwd)
programs=("$@")
no_chain=()  # programs that do not go through the chain
export GPOOL_TEST_SERVER_DIR=$san/server GPOOL_TEST_DRIVER_DIR=$san/lib/gpool
case $kind in
  thread)
    runtime=$(g++ -print-file-name=libtsan.so)
    [ -e "$runtime" ] || { echo "ThreadSanitizer's runtime (libtsan.so) not found"; exit 2; }
    # Programs with threads of their own or of gpool's, and what each needs of its environment. Not `managed`:
    # the program and its worker both live in ThreadSanitizer's fixed memory layout here, so the worker's
    # managed memory always lies where this process keeps the sanitizer's heap, and cannot be mapped at the
    # same address (gpool then refuses it, as it says).
    [ ${#programs[@]} -gt 0 ] || programs=(threads contexts host_functions graph_host_copies capture_streams captured_nodes
      async_errors fork_child launch_blocking:CUDA_LAUNCH_BLOCKING=1 multi_device:GPOOL_TEST_SHARES=2 device_output
      graph_memory user_objects runtime_compile)
    routes=(shm tcp chain)
    name_of_kind=ThreadSanitizer
    export GPOOL_TEST_CLIENT_DIR=$san/lib/gpool GPOOL_TEST_PRELOAD=$runtime
    export TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=0 second_deadlock_stack=1"
    # UCX's memory hooks (libucm, in every worker) take a lock as a thread's stack is released at its exit,
    # after the sanitizer has let go of the thread: the worker crashes. Its RDMA transport needs no hooks.
    export UCX_MEM_EVENTS=no
    ;;
  address)
    # Every family program, and those whose calls reach further (several devices, compiled code, launches).
    [ ${#programs[@]} -gt 0 ] || programs=(basic_shared memory_2d memory_pools pointer_attributes stream_memops virtual_memory
      jit_link contexts host_functions graph_build graph_nodes managed ipc vmm_ipc pool_ipc arrays device_output
      user_objects capture_streams driver_extras graph_host_copies fork_child captured_nodes green_contexts threads
      async_errors multi_device:GPOOL_TEST_SHARES=2 runtime_compile launch_kinds)
    routes=(shm chain)
    # (managed memory through the chain: the cuda backend's client library maps it at the sim's fixed
    # addresses, which in an instrumented process are the sanitizer's own)
    no_chain=(managed)
    name_of_kind="AddressSanitizer and UndefinedBehaviorSanitizer"
    ;;
  *) echo "usage: sanitized_programs.sh thread|address BUILD SANITIZED_BUILD [PROGRAM...]"; exit 2 ;;
esac
failed=()
for entry in "${programs[@]}"; do
  name=${entry%%:*}
  extra=(); [ "$entry" = "$name" ] || extra=("${entry#*:}")
  for route in "${routes[@]}"; do
    backend=sim
    if [ "$route" = chain ]; then
      [[ " ${no_chain[*]} " == *" $name "* ]] && continue
      backend=chain
    fi
    out=$(env GPOOL_TRANSPORT="${route/chain/shm}" "${extra[@]}" timeout 300 "$here/run_through_gpool.sh" "$build" $backend "$build/tests/cuda_$name" 2>&1)
    rc=$?
    # (the program's own report, where the sanitizer is preloaded into it; the runner reads the servers' logs)
    if [ $rc -ne 0 ] || grep -qE "WARNING: ThreadSanitizer|==[0-9]+==ERROR: |: runtime error: " <<<"$out"; then
      echo "$out"
      echo "FAIL  $name over $route under $name_of_kind (exit $rc)"
      failed+=("$name/$route")
    else
      echo "PASS  $name over $route under $name_of_kind"
    fi
  done
done
[ ${#failed[@]} -eq 0 ] || { echo "failed under $name_of_kind: ${failed[*]}"; exit 1; }
echo "ALL PASSED under $name_of_kind"
