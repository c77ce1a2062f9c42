#!/usr/bin/env bash
# The whole GPU check (issue 2): on a machine with an NVIDIA GPU, runs the test programs natively and
# through gpool-server's cuda backend over loopback TCP, compares their results check by check, then
# runs the benchmarks side by side. Prints a table last; exits non-zero when a result differs.
# usage: scripts/gpu_check.sh [BUILD_DIR]   (a build tree, or the .gpu folder scripts/pack_gpu.sh makes)
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../build}" && pwd)
runner=$here/../tests/cuda_programs/run_through_gpool.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || { echo "no NVIDIA GPU here"; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
rows=()
for prog in cuda_basic_static cuda_basic_shared; do
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$build/tests/$prog" > "$out/$prog.native" 2>&1; nrc=$?
  "$runner" "$build" cuda "$build/tests/$prog" > "$out/$prog.gpool" 2>&1; grc=$?
  echo "=== $prog native (exit $nrc) ==="; cat "$out/$prog.native"
  echo "=== $prog through gpool (exit $grc) ==="; cat "$out/$prog.gpool"
  # Compare verdict and check name per line (details such as timings differ by nature).
  while read -r verdict name; do
    g=$(grep -F "  $name" "$out/$prog.gpool" | head -1 | awk '{print $1}')
    result=same; [ "$verdict" = "$g" ] || { result=DIFFERENT; status=1; }
    rows+=("$(printf '%-18s %-62s %-6s %-6s %s' "$prog" "${name:0:62}" "$verdict" "${g:-none}" "$result")")
  done < <(grep -E '^(PASS|FAIL)  ' "$out/$prog.native" | sed -E 's/^(PASS|FAIL)  ([^:]*).*/\1 \2/')
  [ $nrc -eq 0 ] && [ $grc -eq 0 ] || status=1
done
echo
echo "=== benchmarks (native and through gpool, one run) ==="
"$here/../bench/run.sh" "$build" | tee "$out/bench"
echo
echo "=== results: native vs through gpool (cuda backend, loopback TCP) ==="
printf '%-18s %-62s %-6s %-6s %s\n' program check native gpool result
printf '%s\n' "${rows[@]}"
echo "overall: $([ $status -eq 0 ] && echo 'gpool matches native' || echo 'DIFFERENCES FOUND')"
exit $status
