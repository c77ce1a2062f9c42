#!/usr/bin/env python3
"""Replays one trace under several configurations, side by side: writes OUT/table.md (one row each, as
gpool-replay prints them), OUT/NAME.csv (each job's figures) and OUT/jct.png (the distribution of job
completion times, one curve each; needs gnuplot, Debian's gnuplot-nox).

usage: compare.py BUILD_DIR TRACE OUT 'NAME=gpool-replay flags' ['NAME=flags' ...]
example: compare.py build trace.json out 'packed=' 'whole GPUs=--whole-gpus'"""
import os
import re
import shlex
import shutil
import subprocess
import sys


def stem(name):
    """A file name for a run's name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def jct_hours(csv_path):
    rows = open(csv_path).read().splitlines()[1:]
    return sorted((float(r.split(",")[3]) - float(r.split(",")[1])) / 3600 for r in rows)


def plot(out, runs):
    data = []
    for name, _ in runs:
        path = os.path.join(out, stem(name) + ".cdf")
        jct = jct_hours(os.path.join(out, stem(name) + ".csv"))
        with open(path, "w") as f:
            for i, c in enumerate(jct):
                f.write("%g %g\n" % (max(c, 1e-3), (i + 1) / len(jct)))
        data.append("'%s' using 1:2 with lines linewidth 2 title '%s'" % (path, name))
    script = ("set terminal pngcairo size 900,560 noenhanced; set output '%s';"
              "set logscale x; set xlabel 'job completion time (hours)'; set ylabel 'fraction of jobs';"
              "set key bottom right; set grid; plot %s" % (os.path.join(out, "jct.png"), ", ".join(data)))
    if not shutil.which("gnuplot"):
        print("compare.py: no gnuplot: no jct.png (apt-get install gnuplot-nox)", file=sys.stderr)
        return
    subprocess.run(["gnuplot", "-e", script], check=True)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    build, trace, out = sys.argv[1:4]
    runs = [spec.split("=", 1) for spec in sys.argv[4:]]
    os.makedirs(out, exist_ok=True)
    replay = os.path.join(build, "tools", "replay", "gpool-replay")
    lines = []
    for i, (name, flags) in enumerate(runs):
        csv = os.path.join(out, stem(name) + ".csv")
        cmd = [replay, trace, "--label", name, "--csv", csv] + shlex.split(flags) + (["--header"] if i == 0 else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("compare.py: %s: %s" % (" ".join(cmd), run.stderr.strip()))
        lines.append(run.stdout.rstrip("\n"))
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table)
    sys.stdout.write(table)
    plot(out, runs)


if __name__ == "__main__":
    main()
