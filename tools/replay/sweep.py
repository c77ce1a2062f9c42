#!/usr/bin/env python3
"""Replays traces of rising arrival rates under several configurations, side by side, as Gavel's figures do
(average JCT against the input job rate): writes OUT/table.md (one row per rate and configuration, as
gpool-replay prints them, plus each heterogeneity-aware configuration's gain over its agnostic twin) and
OUT/jct-vs-rate.png (needs gnuplot, Debian's gnuplot-nox). Runs in parallel, one replay per CPU.

usage: sweep.py BUILD_DIR OUT --kind gavel --jobs N --rates R1,R2,... [--seeds S1,S2] [--window FROM:TO]
                'NAME=gpool-replay flags' ... [--pair 'AWARE NAME=AGNOSTIC NAME' ...]
example: sweep.py build out --jobs 4000 --window 2000:3000 --rates 4,6,8 'fifo=' 'max-min=--policy mm.toml'"""
import argparse
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys

ROW = re.compile(r"^\| (?P<label>.*?) \| (?P<jobs>\d+) \| (?P<avg>[\d.]+) \|")


def replay(build, trace, label, flags, window):
    cmd = [os.path.join(build, "tools", "replay", "gpool-replay"), trace, "--label", label] + shlex.split(flags)
    if window:
        cmd += ["--window", window]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("sweep.py: %s: %s" % (" ".join(cmd), run.stderr.strip()))
    return run.stdout.strip()


def plot(out, names, rates, avg):
    if not shutil.which("gnuplot"):
        print("sweep.py: no gnuplot: no jct-vs-rate.png (apt-get install gnuplot-nox)", file=sys.stderr)
        return
    data = os.path.join(out, "jct-vs-rate.dat")
    with open(data, "w") as f:
        for r in rates:
            f.write("%g %s\n" % (r, " ".join("%g" % avg[(n, r)] for n in names)))
    curves = ", ".join("'%s' using 1:%d with linespoints linewidth 2 title '%s'" % (data, i + 2, n) for i, n in enumerate(names))
    script = ("set terminal pngcairo size 900,560 noenhanced; set output '%s';"
              "set xlabel 'input job rate (jobs per hour)'; set ylabel 'average JCT (hours)'; set logscale y;"
              "set key top left; set grid; plot %s" % (os.path.join(out, "jct-vs-rate.png"), curves))
    subprocess.run(["gnuplot", "-e", script], check=True)


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="NAME=gpool-replay flags")
    ap.add_argument("--kind", default="gavel")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rates", required=True)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--window", default="")
    ap.add_argument("--pair", action="append", default=[], help="'AWARE=AGNOSTIC': report the ratio of their average JCTs")
    a = ap.parse_args()
    runs = [spec.split("=", 1) for spec in a.runs]
    rates = [float(r) for r in a.rates.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    os.makedirs(a.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    traces = {}
    for r in rates:
        for s in seeds:
            path = os.path.join(a.out, "trace-%g-%d.json" % (r, s))
            with open(path, "w") as f:
                subprocess.run([sys.executable, os.path.join(here, "make_trace.py"), a.kind, "--jobs", str(a.jobs), "--rate", str(r),
                                "--seed", str(s)], stdout=f, check=True)
            traces[(r, s)] = path
    jobs = [(r, s, name, flags) for r in rates for s in seeds for name, flags in runs]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        rows = list(pool.map(lambda j: replay(a.build, traces[(j[0], j[1])], "%s, %g/h, seed %d" % (j[2], j[0], j[1]), j[3], a.window), jobs))
    avg = {}
    for (r, s, name, _), row in zip(jobs, rows):
        avg.setdefault((name, r), []).append(float(ROW.match(row).group("avg")))
    avg = {k: sum(v) / len(v) for k, v in avg.items()}
    lines = ["| run | jobs | avg JCT (h) | p99 JCT (h) | makespan (h) | GPUs used / allocated | avg queueing (h) | Jain's index | "
             "preemptions | replay time (s) |", "|---|---|---|---|---|---|---|---|---|---|"] + rows
    if a.pair:
        lines += ["", "| rate (jobs/h) | " + " | ".join(p.replace("=", " against ") for p in a.pair) + " |",
                  "|---|" + "---|" * len(a.pair)]
        for r in rates:
            lines.append("| %g | " % r + " | ".join("%.2f×" % (avg[(p.split("=")[1], r)] / avg[(p.split("=")[0], r)]) for p in a.pair) + " |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table)
    sys.stdout.write(table)
    plot(a.out, [n for n, _ in runs], rates, avg)


if __name__ == "__main__":
    main()
