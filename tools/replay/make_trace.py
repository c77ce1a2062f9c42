#!/usr/bin/env python3
"""Writes a job trace for gpool-replay (docs/scheduling.md), the same from the same seed.

gavel: Gavel's simulated setup (Narayanan et al., OSDI 2020): 36 GPUs each of K80, P100 and V100; 26 job
  kinds (image classification, translation, language modelling, recommendation, reinforcement learning,
  CycleGAN), each with its measured throughput on each type; single-GPU jobs of a kind drawn uniformly;
  durations on a V100 from the Philly trace's distribution; Poisson arrivals.
fractional: the same kinds and durations, on 36 V100s, with jobs that ask for a quarter, half or whole
  GPU and run at their own pace on it (they cannot use more), as in shared inference and development
  clusters.

usage: make_trace.py {gavel,fractional} --jobs N --rate JOBS_PER_HOUR --seed S > trace.json"""
import argparse
import json
import math
import random
import sys

# Steps per second on one whole GPU (K80, P100, V100), from Gavel's scheduler/simulation_throughputs.json
# (each kind's throughput alone on the GPU).
KINDS = {
    "ResNet-18 (batch size 16)": (4.795, 35.869, 32.353),
    "ResNet-18 (batch size 32)": (7.176, 35.825, 29.947),
    "ResNet-18 (batch size 64)": (7.052, 22.305, 24.093),
    "ResNet-18 (batch size 128)": (1.807, 11.675, 17.995),
    "ResNet-18 (batch size 256)": (0.886, 7.723, 10.300),
    "ResNet-50 (batch size 16)": (2.301, 9.053, 11.396),
    "ResNet-50 (batch size 32)": (1.237, 4.888, 7.787),
    "ResNet-50 (batch size 64)": (0.619, 2.619, 4.395),
    "ResNet-50 (batch size 128)": (0.347, 1.584, 2.497),
    "Transformer (batch size 16)": (5.467, 9.537, 11.064),
    "Transformer (batch size 32)": (3.507, 7.869, 10.621),
    "Transformer (batch size 64)": (1.752, 5.092, 8.618),
    "Transformer (batch size 128)": (0.982, 3.074, 5.446),
    "Transformer (batch size 256)": (0.458, 1.678, 1.595),
    "A3C": (3.439, 5.681, 7.176),
    "LM (batch size 5)": (25.486, 90.776, 109.167),
    "LM (batch size 10)": (23.794, 77.085, 81.652),
    "LM (batch size 20)": (17.142, 58.173, 64.742),
    "LM (batch size 40)": (11.500, 35.766, 45.237),
    "LM (batch size 80)": (6.054, 21.158, 28.240),
    "Recommendation (batch size 512)": (32.859, 48.882, 23.318),
    "Recommendation (batch size 1024)": (20.050, 30.744, 13.283),
    "Recommendation (batch size 2048)": (10.441, 16.597, 7.470),
    "Recommendation (batch size 4096)": (5.300, 8.897, 3.906),
    "Recommendation (batch size 8192)": (2.699, 5.548, 2.842),
    "CycleGAN": (0.505, 2.403, 4.426),
}
TYPES = ("K80", "P100", "V100")


def duration_s(rng):
    """Philly's distribution of job durations, as Gavel draws them."""
    if rng.random() >= 0.8:
        return 60 * 10 ** rng.uniform(3, 4)
    return 60 * 10 ** rng.uniform(1.5, 3)


def fraction(rng):
    """What a job of the fractional trace asks for (an assumption, stated in docs/scheduling.md)."""
    r = rng.random()
    return 0.25 if r < 0.4 else 0.5 if r < 0.7 else 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["gavel", "fractional"])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=6.0, help="jobs per hour (Poisson arrivals)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpus-per-type", type=int, default=36)
    ap.add_argument("--users", type=int, default=1, help="jobs belong to users u0, u1, ... in turn (for queues)")
    args = ap.parse_args()
    kinds, arrivals, durations = random.Random(args.seed), random.Random(args.seed + 1), random.Random(args.seed + 2)
    fractions = random.Random(args.seed + 3)
    types = TYPES if args.kind == "gavel" else ("V100",)
    names = sorted(KINDS)
    jobs, t = [], 0.0
    for i in range(args.jobs):
        kind = kinds.choice(names)
        job = {"id": "j%d" % i, "arrival_s": round(t, 3), "kind": kind,
               "steps": round(duration_s(durations) * KINDS[kind][2], 1)}  # durations are on a V100
        if args.kind == "fractional":
            job["p"] = fraction(fractions)
        if args.users > 1:
            job["user"] = "u%d" % (i % args.users)
        jobs.append(job)
        t += -math.log(1.0 - arrivals.random()) * 3600.0 / args.rate
    trace = {"cluster": {ty: args.gpus_per_type for ty in types}, "gpus_per_server": 4,
             "kinds": {k: {ty: KINDS[k][TYPES.index(ty)] for ty in types} for k in names}, "jobs": jobs}
    json.dump(trace, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
