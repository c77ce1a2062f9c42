#!/usr/bin/env python3
"""NVIDIA's public CUDA samples (github.com/NVIDIA/cuda-samples), natively and through gpool (issue 9).

  cuda_samples.py build SAMPLES_SRC OUT [--jobs N]
      Builds every sample of a cuda-samples checkout for Hopper only (sm_90) with the shared CUDA runtime
      (small binaries, to carry to a GPU host that has no network), and gathers each sample that built
      into OUT/bin/NAME/ with its data files and OUT/test_args.json (the samples' own arguments).
  cuda_samples.py gather SAMPLES_SRC OUT
      Gathers the samples of that build again.
  cuda_samples.py run OUT GPOOL_BUILD [--backend cuda|sim|chain] [--jobs N] [--timeout S] [--only NAME ...]
      Runs each gathered sample natively (only where a GPU is present) and through gpool (gpool-server on
      loopback, tests/cuda_programs/run_through_gpool.sh), several at a time, each in its own folder, and
      prints a table: sample, native, gpool, result. Exit status 1 when a sample that passes natively does
      not pass through gpool. Each run's output is kept in OUT/logs/NAME.{native,gpool} (on sim and
      chain, NAME.sim and NAME.chain). chain: the cuda backend with gpool's client library as its driver,
      in front of a sim server (the cuda backend's code without a GPU; compare its table with sim's).

A sample's verdict is its exit status: 0 PASS, 2 WAIVED (the samples' own word for "cannot run here", such
as a second GPU missing), anything else FAIL, TIMEOUT past --timeout. Samples that need a display, MPI or
more than one GPU are left out (DISPLAY_OR_MPI), or waive themselves natively.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "..", "tests", "cuda_programs", "run_through_gpool.sh")
# Samples that need a display, a graphics API, MPI or another platform: never built or run.
DISPLAY_OR_MPI = re.compile(r"GL|D3D|Vulkan|^vk|EGL|NvSci|MPI|Tegra")


# What samples read at run time besides their data folders (NVRTC samples compile their kernels with
# the headers beside them).
RUN_TIME_FILES = (".ptx", ".fatbin", ".cubin", ".cu", ".cuh", ".h", ".ll", ".bin", ".ppm", ".pgm", ".raw", ".dat", ".txt", ".mtx")


def patch_architectures(src):
    """Every sample's CMakeLists names nine architectures: Hopper alone builds in a fraction of the time."""
    for root, _, files in os.walk(src):
        if "CMakeLists.txt" in files:
            path = os.path.join(root, "CMakeLists.txt")
            with open(path) as f:
                text = f.read()
            patched = re.sub(r"set\(CMAKE_CUDA_ARCHITECTURES [^)]*\)", "set(CMAKE_CUDA_ARCHITECTURES 90)", text)
            if patched != text:
                with open(path, "w") as f:
                    f.write(patched)


def sample_dirs(src, only):
    """Samples/CATEGORY/NAME folders that build a sample, those named in `only` when given."""
    found = []
    for category in sorted(os.listdir(os.path.join(src, "Samples"))):
        folder = os.path.join(src, "Samples", category)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if os.path.isfile(os.path.join(folder, name, "CMakeLists.txt")) and (not only or name in only) \
                    and not DISPLAY_OR_MPI.search(name):
                found.append(os.path.join("Samples", category, name))
    return found


def configure(work, tree, samples):
    """One project of the chosen samples (each sample's own CMakeLists stands alone). A sample whose
    configuration fails (a library this toolkit lacks: nvJPEG, NPP, static cuFFT) is left out, and the
    rest configured again."""
    for _ in range(len(samples) + 1):
        with open(os.path.join(work, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.20)\nproject(gpool-cuda-samples LANGUAGES C CXX CUDA)\n")
            f.write("find_package(CUDAToolkit REQUIRED)\n")
            f.writelines(f"add_subdirectory({rel})\n" for rel in samples)
        shutil.rmtree(tree, ignore_errors=True)
        p = subprocess.run(["cmake", "-S", work, "-B", tree, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                            "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared", "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"],
                           capture_output=True, text=True)
        if p.returncode == 0:
            return samples
        bad = set(re.findall(r"CMake Error at (Samples/[^/]+/[^/]+)/", p.stdout + p.stderr))
        if not bad:
            sys.exit("cmake failed:\n" + (p.stdout + p.stderr)[-3000:])
        print("left out (they do not configure here): " + ", ".join(sorted(os.path.basename(b) for b in bad)), flush=True)
        samples = [rel for rel in samples if rel not in bad]
    sys.exit("cmake kept failing")


def build(a):
    work = os.path.join(os.path.abspath(a.out), "src")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for shared in ("Common", "cmake"):
        if os.path.isdir(os.path.join(a.src, shared)):
            shutil.copytree(os.path.join(a.src, shared), os.path.join(work, shared))
    samples = sample_dirs(a.src, a.only)
    for rel in samples:
        shutil.copytree(os.path.join(a.src, rel), os.path.join(work, rel))
    patch_architectures(work)
    tree = os.path.join(os.path.abspath(a.out), "build")
    configure(work, tree, samples)
    # -k 0: a sample that does not build (a library this host lacks) costs only its own row
    subprocess.run(["cmake", "--build", tree, "-j", str(a.jobs), "--", "-k", "0"])
    gather(a.src, os.path.abspath(a.out))


def gather(src, out):
    """Each built sample into OUT/bin/NAME/, with what it reads at run time."""
    work, tree = os.path.join(out, "src"), os.path.join(out, "build")
    bins = os.path.join(out, "bin")
    shutil.rmtree(bins, ignore_errors=True)
    count = 0
    for root, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != "CMakeFiles"]
        for name in files:
            path = os.path.join(root, name)
            if not os.access(path, os.X_OK) or "." in name or DISPLAY_OR_MPI.search(name):
                continue
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            dest = os.path.join(bins, name)
            os.makedirs(dest, exist_ok=True)
            shutil.copy2(path, dest)
            subprocess.run(["strip", "--strip-debug", os.path.join(dest, name)])
            # the files the sample reads at run time, where it looks for them (beside itself, in ./data):
            # its source folder's data and kernels (NVRTC compiles them), and the modules its build made
            # (the driver-API samples load a .fatbin, .ptx or .cubin)
            rel = os.path.relpath(root, tree)
            data = os.path.join(work, rel, "data")
            if os.path.isdir(data):
                shutil.copytree(data, os.path.join(dest, "data"), dirs_exist_ok=True)
            for folder in (os.path.join(work, rel), root):
                for f in os.listdir(folder):
                    if os.path.isfile(os.path.join(folder, f)) and os.path.splitext(f)[1] in RUN_TIME_FILES:
                        shutil.copy2(os.path.join(folder, f), dest)
            # and the folders its build copied beside it (data; CUDA's headers for NVRTC: cooperative_groups, cuda, nv)
            for d in os.listdir(root):
                if d != "CMakeFiles" and os.path.isdir(os.path.join(root, d)):
                    shutil.copytree(os.path.join(root, d), os.path.join(dest, d), dirs_exist_ok=True)
            count += 1
    shutil.copy2(os.path.join(src, "test_args.json"), os.path.join(out, "test_args.json"))
    print(f"{count} samples gathered in {bins}")


def verdict(rc):
    return {0: "PASS", 2: "WAIVED", None: "TIMEOUT"}.get(rc, f"FAIL({rc})")


def run_one(cmd, cwd, env, timeout, log):
    # In its own process group, all of which ends at the timeout: a sample that loops (and the gpool-server
    # and worker it runs through) would otherwise keep the GPU busy under every later run.
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    try:
        text, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        text, _ = p.communicate()
        rc = None
    with open(log, "wb") as f:
        f.write(text[-200000:])
    return rc


def runs_of(name, config):
    """The argument lists the samples' own test_args.json gives a sample (None: skip it)."""
    c = config.get(name, {})
    if c.get("skip"):
        return None
    if "runs" in c:
        return [r.get("args", []) for r in c["runs"]]
    return [c.get("args", [])]


def run(a):
    out = os.path.abspath(a.out)
    gpool = os.path.abspath(a.gpool_build)
    bins = os.path.join(out, "bin")
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    try:
        with open(os.path.join(out, "test_args.json")) as f:
            config = json.load(f)
    except OSError:
        config = {}
    native = a.backend == "cuda" and shutil.which("nvidia-smi") is not None
    names = sorted(n for n in os.listdir(bins) if not a.only or n in a.only)
    cuda_libs = "/usr/local/cuda/lib64"
    tag = "gpool" if a.backend == "cuda" else a.backend

    def both(name):
        runs = runs_of(name, config)
        if runs is None:
            return name, "SKIPPED", "SKIPPED"
        here = os.path.join(bins, name)
        results = {"native": [], "gpool": []}
        for i, args in enumerate(runs):
            cmd = [os.path.join(here, name)] + args
            if native:
                env = dict(os.environ, LD_LIBRARY_PATH=cuda_libs)
                results["native"].append(run_one(cmd, here, env, a.timeout, os.path.join(logs, f"{name}.{i}.native")))
            env = dict(os.environ, GPOOL_LOG_LEVEL="info")
            results["gpool"].append(run_one([RUNNER, gpool, a.backend] + cmd, here, env, a.timeout,
                                            os.path.join(logs, f"{name}.{i}.{tag}")))
        worst = lambda rcs: next((verdict(r) for r in rcs if r != 0), "PASS") if rcs else "-"
        return name, worst(results["native"]), worst(results["gpool"])

    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        rows = list(pool.map(both, names))
    failed = 0
    print(f"{'sample':34} {'native':10} {'gpool':10} result")
    for name, n, g in rows:
        result = "-" if n in ("-", "SKIPPED") else "same" if n == g else "DIFFERENT"
        if n == "PASS" and g != "PASS":
            failed += 1
        print(f"{name:34} {n:10} {g:10} {result}")
    passing = sum(1 for _, n, _ in rows if n == "PASS")
    both_pass = sum(1 for _, n, g in rows if n == "PASS" and g == "PASS")
    gpool_pass = sum(1 for _, _, g in rows if g == "PASS")
    print(f"{len(rows)} samples in {time.time() - start:.0f} s: " +
          (f"{passing} pass natively, {both_pass} of them through gpool too" if native
           else f"{gpool_pass} pass through gpool on the {a.backend} backend (no native column without a GPU)"))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("src")
    b.add_argument("out")
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    b.add_argument("--only", nargs="*", help="these samples alone (by name)")
    g = sub.add_parser("gather", help="gathers a build's samples again (after `build`)")
    g.add_argument("src")
    g.add_argument("out")
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("gpool_build")
    r.add_argument("--backend", choices=["cuda", "sim", "chain"], default="cuda")
    r.add_argument("--jobs", type=int, default=4)
    r.add_argument("--timeout", type=int, default=120)
    r.add_argument("--only", nargs="*")
    a = ap.parse_args()
    if a.cmd == "build":
        return build(a) or 0
    if a.cmd == "gather":
        return gather(a.src, os.path.abspath(a.out)) or 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
