#!/usr/bin/env bash
# The GPU check for a lent machine whose time is short: runs scripts/gpu_check.sh section by section, most
# telling first, each within what is left of BUDGET seconds, so that a run cut short still brings back
# everything it did. Ends every gpool process a section leaves behind. Servers log at debug level: every
# driver call that fails on the worker is a line in its log.
# Leaves three files in OUT, as few as the device tool brings back: steps.txt (each step's exit status and
# time), summary.txt (each step's result tables) and logs.tgz (every log, refreshed after each step).
# usage: scripts/gpu_run_all.sh BUILD_DIR OUT BUDGET_S [STEP...]   (BUILD_DIR: a build tree or the .gpu folder)
#   STEP...: only these steps (after the environment and the sandbox check, which always run), in the
#   order below: programs bench workloads-core trace-jax nvml share samples workloads-rest two cache idle
#   users audit. A session whose time does not reach the later steps leaves them to the next one.
#   NVIDIA's samples run too where .samples/bin exists (scripts/cuda_samples.py build SRC .samples; carry it)
#   e.g. on the device: scripts/gpu_run_all.sh .gpu "$OUT" 540
#        scripts/gpu_run_all.sh .gpu "$OUT" 540 samples workloads-rest two
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$1; out=$2; budget=$3
shift 3
only=("$@")
# Whether step NAME is among those asked for (all, when none was named).
want() {
  [ "${#only[@]}" -eq 0 ] && return 0
  local s
  for s in "${only[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}
mkdir -p "$out"
work=$(mktemp -d /tmp/gpool-gpu-XXXXXX)
deadline=$((SECONDS + budget))
export GPOOL_CHECK_TIMEOUT=${GPOOL_CHECK_TIMEOUT:-90}
export GPOOL_TEST_SERVER_ARGS="--log-level debug" GPOOL_CHECK_SERVER_ARGS="--log-level debug"

cleanup() { pkill -x gpool-server 2>/dev/null; pkill -x gpool-worker 2>/dev/null; sleep 0.5; pkill -9 -x gpool-worker 2>/dev/null; true; }
# Packs every log but the module caches into OUT/logs.tgz (replaced whole, so a kill leaves the last one).
pack() { tar czf "$out/logs.tgz.new" -C "$work" --exclude='cache-*' . 2>/dev/null && mv "$out/logs.tgz.new" "$out/logs.tgz"; }
# step NAME SECONDS COMMAND...: runs COMMAND with at most SECONDS (and what is left), output to NAME.txt.
step() {
  local name=$1 most=$2 left=$((deadline - SECONDS)); shift 2
  [ "$name" = environment ] || want "$name" || return 0
  [ "$left" -gt 15 ] || { echo "$name: skipped, no time left" | tee -a "$out/steps.txt"; return; }
  [ "$most" -lt "$left" ] || most=$left
  local t0=$SECONDS
  timeout -k 5 "$most" "$@" > "$work/$name.txt" 2>&1
  echo "$name: exit $? after $((SECONDS - t0)) s (limit $most s)" | tee -a "$out/steps.txt"
  cleanup
  { echo "##### $name"; sed -n '/^=== driver entry points/,$p' "$work/$name.txt"; } >> "$out/summary.txt"
  pack
}
# check NAME SECONDS SECTION: one section of gpu_check.sh as a step, its logs in logs-NAME.
check() { GPOOL_CHECK_LOGS="$work/logs-$1" step "$1" "$2" "$here/gpu_check.sh" "$build" --only "$3"; }

step environment 30 bash -c 'nvidia-smi; nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version;
  python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda)";
  python3 -c "import jax; print(\"jax\", jax.__version__, jax.devices())"; python3 -c "import cupy; print(\"cupy\", cupy.__version__)"'
# The workers' sandbox (Landlock, where the kernel has it) with this host's driver: a plain program through a
# server as configured, then without the sandbox where that fails. If only the second runs, the rest runs
# without the sandbox, so that a rule the driver needs costs one step rather than the run (sandbox.txt).
sandboxed() { timeout -k 5 60 "$here/../tests/cuda_programs/run_through_gpool.sh" "$build" cuda "$build/tests/cuda_basic_shared"; }
if ! GPOOL_TEST_SERVER_ARGS="--log-level debug" sandboxed > "$work/sandbox.txt" 2>&1; then
  if GPOOL_TEST_SERVER_ARGS="--log-level debug --no-worker-sandbox" sandboxed > "$work/sandbox-off.txt" 2>&1; then
    echo "sandbox: the program failed in sandboxed workers and ran without: the rest runs with --no-worker-sandbox" | tee -a "$out/steps.txt"
    GPOOL_TEST_SERVER_ARGS+=" --no-worker-sandbox" GPOOL_CHECK_SERVER_ARGS+=" --no-worker-sandbox"
  else
    echo "sandbox: the program failed with the sandbox and without" | tee -a "$out/steps.txt"
  fi
else
  echo "sandbox: the program ran with the server's default (workers sandboxed where the kernel has Landlock: $(uname -r), lsm $(cat /sys/kernel/security/lsm 2>/dev/null || echo unknown))" | tee -a "$out/steps.txt"
fi
pack
GPOOL_CHECK_JOBS=4 check programs 150 programs
GPOOL_BENCH_TRANSPORTS="tcp shm" check bench 120 bench  # no UCX on the GPU host
GPOOL_CHECK_WORKLOADS="tensors matmul mlp resnet18 jax_mlp jax_scan jax_fft" check workloads-core 200 workloads
if [ -f "$build/trace/libtrace.so" ] && want trace-jax; then  # what JAX asks of the driver natively (the tracer of shared/tools)
  mkdir -p "$work/trace"
  step trace-jax 40 env TRACE_OUT="$work/trace/jax" LD_PRELOAD="$build/trace/libtrace.so" \
    python3 "$here/../tests/gpu/workloads.py" run --out "$work/trace/wl" --only jax_mlp
  # one file of counts, summed over the processes (each wrote its own)
  cat "$work"/trace/jax.*.counts 2>/dev/null | awk -F'\t' '{n[$2]+=$1} END {for (k in n) print n[k] "\t" k}' | sort -rn > "$work/trace-jax-counts.txt"
  cat "$work"/trace/jax.*.log 2>/dev/null | sort | uniq -c | sort -rn > "$work/trace-jax-tables.txt"
  rm -rf "$work/trace"
  pack
fi
check nvml 40 nvml
check share 50 share
# NVIDIA's CUDA samples, where they were built and carried (scripts/cuda_samples.py build SRC .samples)
samples=${GPOOL_SAMPLES:-$here/../.samples}
if [ -d "$samples/bin" ] && want samples; then
  step samples 180 python3 "$here/cuda_samples.py" run "$samples" "$build" --jobs 8 --timeout 60
  cp -r "$samples/logs" "$work/samples-logs" 2>/dev/null
  { echo "##### samples table"; sed -n '/^sample /,$p' "$work/samples.txt"; } >> "$out/summary.txt"
  pack
fi
GPOOL_CHECK_WORKLOADS="streams_events device_info caching_allocator cudnn cuda_graph green_context fft_sparse cupy compile nccl" \
  check workloads-rest 240 workloads
check two 120 two
check cache 60 cache
check idle 40 idle
check users 40 users  # --worker-uids: the driver used by workers that are users of their own (needs root)
check audit 150 audit  # --memory-audit: a worker taken over allocates past its cap with the driver itself; --compute-audit against NVML
echo "done with $((deadline - SECONDS)) s of the budget left" | tee -a "$out/steps.txt"
pack
rm -rf "$work"
