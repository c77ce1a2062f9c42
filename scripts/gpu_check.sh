#!/usr/bin/env bash
# The whole GPU check (issues 2, 3 and 9): on a machine with an NVIDIA GPU, runs the test programs, NVIDIA's
# libraries, nvidia-smi and the PyTorch/CuPy/JAX workloads natively and through gpool-server's cuda backend
# over loopback TCP, compares results, shows the module cache at work, runs the benchmarks side by side,
# and lists every driver entry point or private-table slot gpool was asked for and lacks. Prints tables
# last; exits non-zero when a result differs.
# usage: scripts/gpu_check.sh [BUILD_DIR] [--quick] [--only SECTION,...]
#   BUILD_DIR: a build tree, or the .gpu folder scripts/pack_gpu.sh makes
#   --quick: skips the benchmarks and the slowest workloads
#   --only: runs these sections, in this order: programs nvml idle share workloads two cache users audit bench (default: all)
# environment: GPOOL_CHECK_LOGS=DIR keeps every log there (else a temporary folder, removed at the end);
#   GPOOL_CHECK_JOBS=N runs the C++ programs N at a time (default 1: timings inside them stay quiet);
#   GPOOL_CHECK_WORKLOADS="a b" runs only these workloads; GPOOL_CHECK_TIMEOUT=S bounds each program and
#   workload (default 300 s); GPOOL_CHECK_SERVER_ARGS adds options to its gpool-servers (--log-level debug);
#   GPOOL_CHECK_TRANSPORT picks the transport of every gpool run (default tcp, as issue 9 measures).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
shift || true
quick=0; sections="programs nvml idle share workloads two cache users audit bench"
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --only) sections=${2//,/ }; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
limit=${GPOOL_CHECK_TIMEOUT:-300}
# Issue 9 measures gpool over loopback TCP: every gpool run takes it unless GPOOL_CHECK_TRANSPORT says
# otherwise (auto: shared memory, as a client on the GPU's own host gets it). The benchmarks run both.
export GPOOL_TRANSPORT=${GPOOL_CHECK_TRANSPORT:-tcp}
runner=$here/../tests/cuda_programs/run_through_gpool.sh
workloads=$here/../tests/gpu/workloads.py
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || { echo "no NVIDIA GPU here"; exit 2; }
if [ -n "${GPOOL_CHECK_LOGS:-}" ]; then mkdir -p "$GPOOL_CHECK_LOGS"; out=$(cd "$GPOOL_CHECK_LOGS" && pwd); keep=1
else out=$(mktemp -d); keep=0; fi
servers=()
trap 'for s in "${servers[@]}"; do kill $s 2>/dev/null; done; [ $keep = 1 ] || rm -rf "$out"' EXIT
status=0
rows=()
# TRITON_LIBCUDA_PATH: Triton links its launchers against the libcuda it finds with ldconfig (NVIDIA's)
# unless told; the loader would still bind gpool's already-loaded one, but this leaves no doubt.
gpool_env() { echo "GPOOL_SERVER=127.0.0.1:$1 LD_LIBRARY_PATH=$build/lib/gpool:/usr/local/cuda/lib64 TRITON_LIBCUDA_PATH=$build/lib/gpool"; }
row() { rows+=("$(printf '%-18s %-62s %-6s %-6s %s' "$@")"); }

# Starts gpool-server (cuda backend) with module cache $2; sets $port. Its log is $1.
start_server() {
  # shellcheck disable=SC2086  # extra server options, split on spaces
  LD_LIBRARY_PATH="$build/server" "$build/server/gpool-server" --listen 127.0.0.1:0 --backend cuda --module-cache "$2" ${GPOOL_CHECK_SERVER_ARGS:-} 2>"$1" &
  servers+=($!)
  port=
  for _ in $(seq 200); do
    port=$(grep -oE 'listening on 127\.0\.0\.1:[0-9]+' "$1" | grep -oE '[0-9]+$'); [ -n "$port" ] && break; sleep 0.05
  done
  [ -n "$port" ] || { echo "gpool-server did not start:"; cat "$1"; exit 2; }
}

# --- C++ programs: the same binary natively and through gpool, compared check by check --------------
run_program() {  # label, program, args...: both runs, into $out/LABEL.{native,gpool,rc}
  local label=$1 prog=$2; shift 2
  GPOOL_TEST_EXPECT_COMPUTE=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout "$limit" "$prog" "$@" > "$out/$label.native" 2>&1; local nrc=$?
  GPOOL_TEST_EXPECT_COMPUTE=1 GPOOL_LOG_LEVEL=info timeout "$limit" "$runner" "$build" cuda "$prog" "$@" > "$out/$label.gpool" 2>&1
  echo "$nrc $?" > "$out/$label.rc"
}
compare_program() {  # label: prints both runs and adds a row per check (verdict and check name per line;
  local label=$1 nrc grc  # details such as timings differ by nature)
  read -r nrc grc < "$out/$label.rc"
  echo "=== $label native (exit $nrc) ==="; cat "$out/$label.native"
  echo "=== $label through gpool (exit $grc) ==="; cat "$out/$label.gpool"
  while read -r verdict name; do
    g=$(grep -F "  $name" "$out/$label.gpool" | head -1 | awk '{print $1}')
    result=same; [ "$verdict" = "$g" ] || { result=DIFFERENT; status=1; }
    row "$label" "${name:0:62}" "$verdict" "${g:-none}" "$result"
  done < <(grep -E '^(PASS|FAIL|SKIP)  ' "$out/$label.native" | sed -E 's/^(PASS|FAIL|SKIP)  ([^:]*).*/\1 \2/')
  [ "$nrc" -eq 0 ] && [ "$grc" -eq 0 ] || { status=1; row "$label" "exit status" "$nrc" "$grc" "$([ "$nrc" = "$grc" ] && echo same || echo DIFFERENT)"; }
  cat "$out/$label.gpool" >> "$out/all-gpool.log"
}
section_programs() {
  local jobs=${GPOOL_CHECK_JOBS:-1} labels=(basic_static basic_shared libraries math_libraries runtime_compile launch_kinds)
  local family
  for family in memory_2d memory_pools pointer_attributes stream_memops virtual_memory jit_link contexts host_functions graph_build graph_nodes graph_memory managed ipc vmm_ipc pool_ipc arrays device_output user_objects capture_streams driver_extras graph_host_copies fork_child captured_nodes green_contexts threads; do  # issue 10's driver families
    labels+=("$family")
  done
  for label in "${labels[@]}"; do
    run_program "$label" "$build/tests/cuda_$label" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  done
  # Captured host copies go through the host-function channel, over TCP above and over shared memory
  # here (where page-locked memory needs none): the same program once more over shared memory.
  GPOOL_TRANSPORT=shm run_program graph_host_copies.shm "$build/tests/cuda_graph_host_copies" &
  wait
  # CUDA_LAUNCH_BLOCKING=1: natively NVIDIA's driver makes launches synchronous; through gpool the client
  # waits. It times itself, so it runs alone.
  CUDA_LAUNCH_BLOCKING=1 run_program launch_blocking "$build/tests/cuda_launch_blocking"
  for label in "${labels[@]}" graph_host_copies.shm launch_blocking; do compare_program "$label"; done
}

# --- NVML: nvidia-smi natively and through gpool's libnvidia-ml.so.1 ----------------------------------
section_nvml() {
  start_server "$out/nvml-server.log" "$out/cache-nvml"
  local query=name,uuid,memory.total,memory.used,utilization.gpu,driver_version snrc sgrc nqrc same_gpu=DIFFERENT
  nvidia-smi --query-gpu=$query --format=csv > "$out/smi.native" 2>&1; snrc=$?
  env $(gpool_env $port) timeout "$limit" nvidia-smi --query-gpu=$query --format=csv > "$out/smi.gpool" 2>&1; sgrc=$?
  env $(gpool_env $port) timeout "$limit" nvidia-smi -L > "$out/smi-L.gpool" 2>&1
  env $(gpool_env $port) timeout "$limit" "$build/tests/nvml_query" > "$out/nvml_query.gpool" 2>&1; nqrc=$?
  echo "=== nvidia-smi native (exit $snrc) ==="; cat "$out/smi.native"
  echo "=== nvidia-smi through gpool (exit $sgrc) ==="; cat "$out/smi.gpool" "$out/smi-L.gpool"
  echo "=== nvml_query through gpool (exit $nqrc) ==="; cat "$out/nvml_query.gpool"
  [ $sgrc -eq 0 ] && [ "$(sed -n 2p "$out/smi.native" | cut -d, -f1-3)" = "$(sed -n 2p "$out/smi.gpool" | cut -d, -f1-3)" ] && same_gpu=same
  [ "$same_gpu" = same ] && [ $nqrc -eq 0 ] || status=1
  row nvidia-smi "name, uuid, memory.total as natively" "$([ $snrc -eq 0 ] && echo PASS || echo FAIL)" "$([ $sgrc -eq 0 ] && echo PASS || echo FAIL)" "$same_gpu"
  row nvml_query "NVML subset against the CUDA driver API" "-" "$([ $nqrc -eq 0 ] && echo PASS || echo FAIL)" "-"
}

# --- GPU memory of processes that only ask (cuInit, the device count), as torch.cuda.is_available() does in
# every DataLoader worker: natively no context exists, and a gpool worker makes one only at its client's
# first call that needs the device (before that, each cost about 525 MiB on an H200). Measured, not judged.
idle_mib() {  # label, env...: MiB more in use on the GPU while 4 asking processes hold on
  local before after label=$1; shift
  before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  for i in 1 2 3 4; do
    env "$@" python3 -c "import ctypes, time; c = ctypes.CDLL('libcuda.so.1'); n = ctypes.c_int(); c.cuInit(0); c.cuDeviceGetCount(ctypes.byref(n)); time.sleep(6)" &
  done
  sleep 4
  after=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  wait
  echo "$label: $((after - before)) MiB for 4 processes that only ask" >> "$out/idle_contexts.txt"
  echo "$((after - before))MiB"
}
section_idle() {
  start_server "$out/idle-server.log" "$out/cache-idle"
  local idle_native idle_gpool
  idle_native=$(idle_mib native LD_LIBRARY_PATH=)
  idle_gpool=$(idle_mib gpool $(gpool_env $port))
  row idle_contexts "GPU memory of 4 processes that only ask (measured)" "$idle_native" "$idle_gpool" "-"
}

# --- compute shares: a client's kernels held to its share of the device's time (gpool-server --client-share
# stands for a lease's fraction). One client at 0.25, judged by the program's own check; then two clients at
# 0.5 at once, and the same two processes natively: what time-slicing between them leaves, measured.
device_share() { grep -oE '[0-9.]+ of the device' "$1" | awk '{print $1}'; }
section_share() {
  local prog=$build/tests/cuda_compute_share nrc grc verdict=FAIL
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout "$limit" "$prog" 2 1000 > "$out/share.native" 2>&1; nrc=$?
  GPOOL_TEST_SERVER_ARGS="${GPOOL_TEST_SERVER_ARGS:-} --client-share=0.25" timeout "$limit" "$runner" "$build" cuda "$prog" 2 1000 0.25 \
    > "$out/share.gpool" 2>&1; grc=$?
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout "$limit" "$prog" 2 1000 0 2 > "$out/share-two.native" 2>&1
  GPOOL_TEST_SERVER_ARGS="${GPOOL_TEST_SERVER_ARGS:-} --client-share=0.5" timeout "$limit" "$runner" "$build" cuda "$prog" 2 1000 0 2 \
    > "$out/share-two.gpool" 2>&1
  for f in share.native share.gpool share-two.native share-two.gpool; do echo "=== compute share: $f ==="; cat "$out/$f"; done
  cat "$out/share.gpool" "$out/share-two.gpool" >> "$out/all-gpool.log"
  [ $nrc -eq 0 ] && [ $grc -eq 0 ] && verdict=PASS
  [ $verdict = PASS ] || status=1
  row compute_share "device time of one client at a share of 0.25 (<= 0.3075)" "$(device_share "$out/share.native")" \
    "$(device_share "$out/share.gpool")" "$verdict"
  row compute_share "device time of two clients at 0.5 at once, together" "$(device_share "$out/share-two.native")" \
    "$(device_share "$out/share-two.gpool")" "-"
}

# --- PyTorch / CuPy / JAX workloads ------------------------------------------------------------------------
section_workloads() {
  local only=()
  [ $quick -eq 1 ] && only=(--only tensors device_info matmul mlp resnet18 cuda_graph jax_mlp)
  [ -n "${GPOOL_CHECK_WORKLOADS:-}" ] && only=(--only $GPOOL_CHECK_WORKLOADS)
  echo "=== workloads natively ==="
  python3 "$workloads" run --timeout "$limit" --out "$out/wl-native" "${only[@]}"
  start_server "$out/wl-server.log" "$out/cache-workloads"
  echo "=== workloads through gpool ==="
  # Each workload's requests, waits and bytes (GPOOL_PROFILE), one file per process, named by its command line.
  env $(gpool_env $port) GPOOL_LOG_LEVEL=info GPOOL_PROFILE="$out/wl-gpool/profile.%p" \
    python3 "$workloads" run --timeout "$limit" --out "$out/wl-gpool" "${only[@]}"
  cat "$out"/wl-gpool/*.log >> "$out/all-gpool.log" 2>/dev/null
}

# --- two devices (issue 12): two shares of the one GPU, each its own worker, as `gpool run -n 2 -p 0.5` gives --
section_two() {
  start_server "$out/two-server.log" "$out/cache-two"
  local two="GPOOL_SHARES=127.0.0.1:$port 0 -,127.0.0.1:$port 0 -" mdrc ncrc ncv=FAIL
  echo "=== two devices: the test program and NCCL through gpool ==="
  env $(gpool_env $port) "$two" GPOOL_TEST_EXPECT_COMPUTE=1 timeout "$limit" "$build/tests/cuda_multi_device" > "$out/multi_device.gpool" 2>&1; mdrc=$?
  env $(gpool_env $port) "$two" timeout "$limit" "$build/tests/cuda_nccl_all_reduce" > "$out/nccl.gpool" 2>&1; ncrc=$?
  cat "$out/multi_device.gpool" "$out/nccl.gpool"
  cat "$out/multi_device.gpool" "$out/nccl.gpool" >> "$out/all-gpool.log"
  row multi_device "two devices: copies both ways, kernels, cross-device waits" "-" "$([ $mdrc -eq 0 ] && echo PASS || echo FAIL)" "-"
  grep -q "NCCL is not supported between gpool devices" "$out/nccl.gpool" && [ $ncrc -eq 0 ] && ncv=PASS
  row nccl_two_devices "NCCL refused at set-up with gpool's line, CUDA goes on" "-" "$ncv" "-"
  [ $mdrc -eq 0 ] && [ "$ncv" = PASS ] || status=1
  echo "=== two-device workloads natively (one GPU: both on cuda:0) and through gpool (cuda:0, cuda:1) ==="
  python3 "$workloads" run --timeout "$limit" --out "$out/wl2-native" --only two_devices torchrun_two
  env $(gpool_env $port) "$two" GPOOL_LOG_LEVEL=info python3 "$workloads" run --timeout "$limit" --out "$out/wl2-gpool" --only two_devices torchrun_two
  cat "$out"/wl2-gpool/*.log >> "$out/all-gpool.log" 2>/dev/null
}

# --- module images cross the wire once per host: the same PyTorch script twice, one fresh cache -------
section_cache() {
  start_server "$out/cache-server.log" "$out/cache-twice"
  for run in 1 2; do
    env $(gpool_env $port) python3 "$workloads" run --timeout "$limit" --out "$out/cache-run$run" --only matmul > /dev/null
    for _ in $(seq 100); do [ "$(grep -c 'module images:' "$out/cache-server.log")" -ge $run ] && break; sleep 0.1; done
  done
  echo "=== module cache: the matmul workload twice through one server (worker logs) ==="
  grep 'module images:' "$out/cache-server.log" | sed 's/.* worker [0-9]*\( (lease [^)]*)\)\?: /  /'
}

# --- --worker-uids: workers that use the driver as users of their own (docs/admin.md; gpool-server as root) --
section_users() {
  if [ "$(id -u)" != 0 ]; then row users "--worker-uids needs gpool-server as root" - skip -; return; fi
  GPOOL_CHECK_SERVER_ARGS="${GPOOL_CHECK_SERVER_ARGS:-} --worker-uids 61000-61015" start_server "$out/users-server.log" none
  local label nrc grc
  for label in basic_static ipc; do
    GPOOL_TEST_EXPECT_COMPUTE=1 LD_LIBRARY_PATH=/usr/local/cuda/lib64 timeout "$limit" "$build/tests/cuda_$label" > "$out/users-$label.native" 2>&1; nrc=$?
    env GPOOL_TEST_EXPECT_COMPUTE=1 $(gpool_env $port) timeout "$limit" "$build/tests/cuda_$label" > "$out/users-$label.gpool" 2>&1; grc=$?
    echo "=== $label through a server with --worker-uids (exit $grc; native $nrc) ==="; cat "$out/users-$label.gpool"
    [ $grc -eq $nrc ] || status=1
    row "users:$label" "exit status, its workers as uids of --worker-uids" "$nrc" "$grc" "$([ $grc -eq $nrc ] && echo same || echo DIFFERENT)"
  done
  grep -E "as uid|cannot become" "$out/users-server.log"
  cat "$out/users-$label.gpool" "$out/users-server.log" >> "$out/all-gpool.log"
}

# --- --memory-audit, --compute-audit: a lease's processes past its cap or share, as NVML counts them, are ended ---
# A real allocator (packed with its libraries by pack_gpu.sh) and a server whose worker is taken over: what a
# worker's context holds beside its cap, and a worker allocating past it with the driver itself; how far ahead
# of its share NVML reads a lease its worker paces, and a lease whose kernels run 8 s at 0.25 (docs/security.md).
section_audit() {
  local rc name verdict detail
  LD_LIBRARY_PATH="$build/allocator/lib:$build/server" timeout "$((limit > 150 ? limit : 150))" python3 "$here/../tests/gpu/memory_audit_check.py" "$build" "$out" \
    > "$out/audit.txt" 2>&1; rc=$?
  echo "=== --memory-audit (exit $rc) ==="; cat "$out/audit.txt"
  while read -r name verdict detail; do
    row "audit:${name%:}" "${detail:0:62}" - "$verdict" -
  done < <(grep -E '^audit: [a-z_]+: (PASS|FAIL)' "$out/audit.txt" | cut -d' ' -f2-)
  [ $rc -eq 0 ] || status=1
  cat "$out"/audit-*.log >> "$out/all-gpool.log" 2>/dev/null
}

# --- benchmarks ------------------------------------------------------------------------------------------
section_bench() {
  [ $quick -eq 0 ] || return 0
  echo
  echo "=== benchmarks (native and through gpool, one run) ==="
  timeout "$limit" "$here/../bench/run.sh" "$build" | tee "$out/bench"
}

for section in $sections; do
  case $section in
    programs|nvml|idle|share|workloads|two|cache|users|audit|bench) echo "### section $section ($(date +%T))"; "section_$section" ;;
    *) echo "unknown section $section (programs nvml idle share workloads two cache users audit bench)"; exit 2 ;;
  esac
done

# --- what gpool was asked for and lacks --------------------------------------------------------------------
echo
echo "=== driver entry points and private-table slots gpool lacks (from every gpool run above) ==="
grep -hoE "gpool: warning: [A-Za-z0-9_]+ is not supported by gpool: [^;]*|private table [0-9]+ slot [0-9]+ was called|unknown table [0-9a-f]{32} refused" \
  "$out/all-gpool.log" 2>/dev/null | sort | uniq -c | sort -rn || echo "  none"

echo
echo "=== results: native vs through gpool (cuda backend, loopback TCP) ==="
printf '%-18s %-62s %-6s %-6s %s\n' program check native gpool result
[ ${#rows[@]} -eq 0 ] || printf '%s\n' "${rows[@]}"
for pair in wl-native:wl-gpool wl2-native:wl2-gpool; do
  [ -d "$out/${pair%%:*}" ] || continue
  echo
  python3 "$workloads" compare "$out/${pair%%:*}" "$out/${pair##*:}" || status=1
done
echo "overall: $([ $status -eq 0 ] && echo 'gpool matches native' || echo 'DIFFERENCES FOUND')"
exit $status
