#!/usr/bin/env bash
# Compares two builds' client-side call costs side by side in one run: alternates bench/run.sh between
# them ROUNDS times (so both see the same machine load) and prints each metric's median and the ratio.
# usage: bench/compare.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS=5]
# GPOOL_COMPARE_BEFORE_ENV / GPOOL_COMPARE_AFTER_ENV: VAR=VALUE settings for one side only, to compare
# one build with itself under two settings (e.g. GPOOL_COMPARE_BEFORE_ENV=GPOOL_SPIN_US=0).
set -u
here=$(cd "$(dirname "$0")" && pwd)
before=$1; after=$2; rounds=${3:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((i = 0; i < rounds; i++)); do
  for side in before after; do
    dir=$before; settings=${GPOOL_COMPARE_BEFORE_ENV:-}
    [ $side = after ] && dir=$after settings=${GPOOL_COMPARE_AFTER_ENV:-}
    # rows: metric  native  gpool  ...; the gpool column is "VALUE UNIT" after the native one
    # shellcheck disable=SC2086  # settings split on spaces
    env $settings "$here/run.sh" "$dir" | awk -v s=$side '$1 ~ /^(async_launch|launch_sync|dtoh_4B|malloc_free_1MiB|graph_dtoh_4B|host_func|htod_|dtoh_256)/ {print s, $1, $4, $5}' >> "$out" || exit 1
  done
done
python3 - "$out" "$rounds" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
vals, unit = {}, {}
for side, metric, value, u in rows:
    vals.setdefault(metric, {}).setdefault(side, []).append(float(value))
    unit[metric] = u
print(f"median of {sys.argv[2]} alternating runs each")
print(f"{'metric':22} {'before':>12} {'after':>12} {'after/before':>13}  better")
for m, v in vals.items():
    b, a = statistics.median(v['before']), statistics.median(v['after'])
    better = 'higher' if unit[m] == 'GB/s' else 'lower'
    print(f"{m:22} {b:>9.3f} {unit[m]:<4} {a:>7.3f} {unit[m]:<4} {a / b:>10.2f}x  {better}")
PY
