#!/usr/bin/env bash
# Builds gpool's libFuzzer targets (fuzz/, with clang: AddressSanitizer and UndefinedBehaviorSanitizer on)
# and runs each from its seed corpus in fuzz/corpus/TARGET. New inputs go to build-fuzz/corpus/TARGET,
# crashes to build-fuzz/crashes/. Exits non-zero on the first crash.
# usage: scripts/fuzz.sh [--runs N | --time SECONDS] [--jobs J] [TARGET...]
#   --runs N      executions per target (default 20000: the brief run of the test suite)
#   --time S      seconds per target instead (long runs: docs/security.md records them)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-runs=20000)
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) limit=(-runs="$2"); shift 2 ;;
    --time) limit=(-max_total_time="$2"); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is needed (apt-get install clang)"; exit 2; }
CXX=clang++ cmake -S fuzz -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_policy fuzz_allocator_json fuzz_request_arrival fuzz_handshake fuzz_calls fuzz_module_image fuzz_dispatcher)
mkdir -p build-fuzz/crashes
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "--- $t ${limit[*]}"
  parallel=()
  [ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
  "build-fuzz/$t" "build-fuzz/corpus/$t" "fuzz/corpus/$t" "${limit[@]}" "${parallel[@]}" \
    -artifact_prefix="build-fuzz/crashes/$t-" -print_final_stats=1 2>&1 |
    grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|Done|==[0-9]+==ERROR|SUMMARY)|#[0-9]+ +DONE" || true
  if ls "build-fuzz/crashes/$t-"* >/dev/null 2>&1; then
    echo "fuzz.sh: $t crashed; inputs in build-fuzz/crashes/"
    exit 1
  fi
done
