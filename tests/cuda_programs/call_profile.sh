#!/usr/bin/env bash
# GPOOL_PROFILE counts what a program asked of its worker: launch_loop launches N kernels without waiting
# and synchronises after every 50, then copies one word back; its profile, written to a file at exit, must
# say exactly that (N LaunchKernel sent, N/50 CtxSynchronize and one MemcpyDtoH waited for).
# usage: call_profile.sh BUILD_DIR LAUNCH_LOOP_PROGRAM
set -u
build=$1; program=$2
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
GPOOL_PROFILE="$dir/profile.%p" "$here/run_through_gpool.sh" "$build" sim "$program" 0.5 > "$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
cat "$dir/out" "$dir"/profile.*
launched=$(grep -oE 'PASSED: [0-9]+ launches' "$dir/out" | grep -oE '[0-9]+')
profile=$(ls "$dir"/profile.* 2>/dev/null | head -1)
[ -n "$launched" ] && [ -n "$profile" ] || { echo "FAIL: no launch count or no profile file"; exit 1; }
column() { awk -v r="$1" -v c="$2" '$1 == r {print $c}' "$profile"; }  # request, column (2: sent, 3: waited)
fail=0
expect() {  # what, got, want
  if [ "$2" = "$3" ]; then echo "PASS  $1: $2"; else echo "FAIL  $1: $2, expected $3"; fail=1; fi
}
expect "LaunchKernel sent without waiting" "$(column LaunchKernel 2)" "$launched"
expect "LaunchKernel waited for" "$(column LaunchKernel 3)" 0
expect "CtxSynchronize waited for" "$(column CtxSynchronize 3)" $((launched / 50))
expect "MemcpyDtoH waited for" "$(column MemcpyDtoH 3)" 1
expect "one profile, from the program's process" "$(ls "$dir"/profile.* | wc -l)" 1
grep -q "^gpool profile of cuda_launch_loop 0.5 (pid $(basename "$profile" | cut -d. -f2))" "$profile" ||
  { echo "FAIL  the summary names the program and its process"; fail=1; }
[ $fail = 0 ] && echo "ALL PASSED"
exit $fail
