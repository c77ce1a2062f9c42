#!/usr/bin/env python3
"""Writes docs/compatibility.md: every CUDA driver entry point gpool's libcuda.so.1 knows, what gpool does
with it (forwarded to the worker, answered in the client library, or refused and why), and which of
NVIDIA's libraries name it.

usage: scripts/compatibility.py BUILD_DIR [--check]
  BUILD_DIR: a build of this repository (reads interposer/driver_table.cpp and lib/gpool/libcuda.so.1).
  --check: exit 1 when docs/compatibility.md differs from what would be written.

How each column is found:
- status: the symbol the runtime resolves for a name (its newest variant, CUDA 13.0, default stream)
  is a weak stub in libcuda.so.1 (nm: W) -> refused with CUDA_ERROR_NOT_SUPPORTED; otherwise the client
  library defines it, and it is "forwarded" when its body, or a function of its file it calls, sends a
  request to the worker (conn->call/post/memcpyDtoH), else "local".
- libraries: the entry point's name appears in the library's read-only data (the libraries that
  embed the CUDA runtime name its whole table: a superset of what they resolve at start-up).
- PyTorch: the functions a PyTorch 2.11 training run called on an H100 (shared/design, measured).
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "interposer"))
from refusals import reason  # noqa: E402  (why each refused function is refused: shared with the client library)
CUDA_LIB = "/usr/local/cuda/lib64"
LIBRARIES = [  # (column, shared objects)
    ("runtime", ["libcudart.so"]),
    ("cuBLAS", ["libcublas.so", "libcublasLt.so"]),
    ("cuDNN", ["libcudnn_graph.so", "libcudnn_ops.so", "libcudnn_cnn.so", "libcudnn_engines_precompiled.so"]),
    ("cuFFT", ["libcufft.so"]),
    ("cuSPARSE", ["libcusparse.so"]),
    ("cuRAND", ["libcurand.so"]),
    ("NCCL", ["libnccl.so"]),
]
# Called by a PyTorch 2.11 + cu130 training run on an H100 (shared/design/CUDA-PRIVATE-INTERFACES.md §6).
PYTORCH_CALLED = set("""
cuCtxGetApiVersion cuCtxGetCurrent cuCtxGetDevice cuCtxGetLimit cuCtxGetStreamPriorityRange cuCtxSetCurrent
cuCtxSynchronize cuDeviceGet cuDeviceGetAttribute cuDeviceGetCount cuDeviceGetName cuDeviceGetUuid
cuDevicePrimaryCtxGetState cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRetain cuDeviceTotalMem
cuDriverGetVersion cuEventCreate cuFuncGetAttribute cuFuncSetAttribute cuInit cuKernelGetAttribute
cuKernelGetFunction cuKernelSetAttribute cuLaunchKernel cuLaunchKernelEx cuLibraryGetGlobal cuLibraryGetKernel
cuLibraryLoadData cuLibraryUnload cuMemAlloc cuMemFree cuMemHostAlloc cuMemHostGetDevicePointer
cuMemcpyDtoDAsync cuMemcpyDtoH cuMemcpyDtoHAsync cuMemcpyHtoD cuMemcpyHtoDAsync cuMemsetD8Async
cuModuleGetFunction cuModuleGetLoadingMode cuModuleLoad cuModuleLoadData cuOccupancyAvailableDynamicSMemPerBlock
cuOccupancyMaxActiveBlocksPerMultiprocessor cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags
cuOccupancyMaxActiveClusters cuPointerGetAttribute cuPointerGetAttributes cuStreamCreate cuStreamDestroy
cuStreamIsCapturing cuStreamSynchronize""".split())

# Entry points the client library defines only to refuse, as CUDA itself does on the device gpool presents
# (they log why and what to do instead).
REFUSED_AS_CUDA = [
    (r"^cuMem(DiscardBatch|PrefetchBatch|DiscardAndPrefetchBatch)Async$", "CUDA refuses batched prefetch and discard on a device without concurrent managed access, which gpool's emulated managed memory reports (docs/user.md)"),
]
EXPORT = re.compile(r"^GPOOL_EXPORT\s+CUresult\s+(\w+)\s*\(", re.M)
DEFINITION = re.compile(r"^(?:GPOOL_EXPORT\s+)?(?:static\s+)?[\w:<>\*&]+(?:\s+[\w:<>\*&]+)*\s+\**(?:\w+::)*(\w+)\s*\([^;{]*\)\s*(?:const\s*)?\{", re.M)
SENDS = re.compile(r"conn->(call|post|memcpyDtoH)\b|->call<|->post<")


def driver_table(build):
    rows = re.findall(r'\{"(\w+)", (\d+), (\d), "(\w+)"', open(os.path.join(build, "interposer/driver_table.cpp")).read())
    names = {}
    for name, version, per_thread, symbol in rows:
        if per_thread == "0" and int(version) <= 13000:
            best = names.get(name)
            if best is None or int(version) > best[0]:
                names[name] = (int(version), symbol)
    for name, version, per_thread, symbol in rows:  # names only a per-thread variant or a newer version has
        names.setdefault(name, (int(version), symbol))
    return {name: symbol for name, (version, symbol) in names.items()}


def weak_symbols(build):
    out = subprocess.run(["nm", "-D", os.path.join(build, "lib/gpool/libcuda.so.1")], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if " W " in line}


MACRO = re.compile(r"^#define (GPOOL_\w+)\(([^)]*)\)((?:.*\\\n)*.*)$", re.M)


def expand_macros(text):
    """The definitions GPOOL_* macros make in a file (GPOOL_MEMSET(8, ...) defines cuMemsetD8_v2...)."""
    out = []
    for name, params, body in MACRO.findall(text):
        params = [p.strip() for p in params.split(",")]
        body = body.replace("\\\n", "\n")
        for args in re.findall(r"^%s\(([^;\n]*)\)\s*$" % name, text, re.M):
            args = [a.strip() for a in args.split(",")]
            if len(args) != len(params):
                continue
            expanded = body
            for p, a in zip(params, args):
                expanded = re.sub(r"(##)?\b%s\b(##)?" % re.escape(p), a, expanded)
            out.append("\n".join(line.strip() for line in expanded.splitlines()))
    return "\n".join(out)


def forwarding(src_dir):
    """Exported functions of the client library -> whether they send a request to the worker. A function
    sends when its body does, or calls a function of its own file that sends, or an exported one that does."""
    files = {}
    for f in sorted(os.listdir(src_dir)):
        if f.endswith(".cpp"):
            text = open(os.path.join(src_dir, f)).read()
            text += "\n" + expand_macros(text)
            bodies = {}
            marks = [(m.start(), m.group(1)) for m in DEFINITION.finditer(text)]
            for i, (start, name) in enumerate(marks):
                end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
                bodies[name] = bodies.get(name, "") + text[start:end]
            files[f] = bodies
    sends = set()
    changed = True
    while changed:
        changed = False
        exported = {n for n in sends if n.startswith("cu")}
        for bodies in files.values():
            local = {n for n in bodies if n in sends}
            for n, b in bodies.items():
                if n in sends:
                    continue
                callees = local | exported
                if SENDS.search(b) or any(re.search(r"\b%s\s*[(<]" % re.escape(c), b) for c in callees if c != n):
                    sends.add(n)
                    changed = True
    return sends


def rodata_strings(path):
    """The names in a library's read-only data and dynamic symbols (what it resolves or links), fast on large files."""
    with tempfile.NamedTemporaryFile() as section:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.rodata", "--only-section=.lrodata", "--only-section=.dynstr", path, section.name], check=True,
                       capture_output=True)
        return re.findall(rb"cu[A-Z][A-Za-z0-9_]+", open(section.name, "rb").read())


def library_names(names):
    found = {}
    for column, files in LIBRARIES:
        seen = set()
        for f in files:
            path = os.path.join(CUDA_LIB, f)
            if os.path.exists(path):
                seen |= {s.decode() for s in rodata_strings(path) if s.decode() in names}
        found[column] = seen
    return found


def render(build):
    table = driver_table(build)
    weak = weak_symbols(build)
    sends = forwarding(os.path.join(ROOT, "interposer/src"))
    libs = library_names(set(table))
    rows, counts = [], {"forwarded": 0, "local": 0, "refused": 0}
    named_refused = []
    for name in sorted(table):
        symbol = table[name]
        as_cuda = [why for pattern, why in REFUSED_AS_CUDA if re.search(pattern, name)]
        if symbol in weak:
            status, why = "refused", "CUDA_ERROR_NOT_SUPPORTED: " + reason(name)
        elif as_cuda:
            status, why = "refused", "CUDA_ERROR_NOT_SUPPORTED: " + as_cuda[0]
        elif symbol in sends or name in sends:
            status, why = "forwarded", ""
        else:
            status, why = "local", ""
        counts[status] += 1
        users = [c for c, _ in LIBRARIES if name in libs[c]] + (["PyTorch (called)"] if name in PYTORCH_CALLED else [])
        if status == "refused" and name in PYTORCH_CALLED:
            why += " — CALLED BY PYTORCH"
        rows.append(f"| `{name}` | {status} | {why} | {', '.join(users)} |")
    lines = [
        "# Driver API compatibility",
        "",
        "Generated by `scripts/compatibility.py build` from the client library as built; do not edit by hand.",
        "Every entry point `cuGetProcAddress` can resolve (from CUDA 13.0's `cudaTypedefs.h`), one row per name:",
        "- **forwarded**: the call is checked and executed by the worker on the lease's GPU;",
        "- **local**: answered in the client library (device properties fetched at connect, contexts, error",
        "  strings, pointer attributes, host memory, cached function attributes, …);",
        "- **refused**: returns `CUDA_ERROR_NOT_SUPPORTED` and logs the function's name once, with the reason given (`interposer/refusals.py`).",
        "",
        f"Totals: {counts['forwarded']} forwarded, {counts['local']} local, {counts['refused']} refused, of {len(table)} names.",
        "",
        "Which libraries name a function: its name is among the library's strings. The libraries that embed the",
        "CUDA runtime (cuBLAS, cuDNN, cuSPARSE, cuRAND, NCCL) name the runtime's whole table, so these columns",
        "are what a library *may* resolve, not what it calls. What they call at start-up and in ordinary use",
        "is checked by running them: on sim in CI (`cuda_program.libraries.sim`: cuBLAS, cuBLASLt, cuFFT, cuDNN;",
        "`cuda_program.math_libraries.sim`: cuRAND, cuSPARSE, cuSOLVER, Thrust, CUB; NVRTC's output in",
        "`cuda_program.runtime_compile.sim`; every family program",
        "under `tests/cuda_programs/`), where no refused function is called (each refusal logs",
        "a line, and the tests fail on it), and on a GPU by `scripts/gpu_check.sh` (PyTorch, CuPy, JAX), which",
        "lists every refused function a workload called. PyTorch (called): measured on an H100 (a training",
        "run's distinct calls); none of them is refused. JAX 0.11 and CuPy are traced on the GPU machine with",
        "`shared/tools/trace` (`TRACE_OUT=/tmp/t LD_PRELOAD=libtrace.so python3 app.py`), not on this machine.",
        "NVIDIA's samples (`scripts/cuda_samples.py`; 157 of cuda-samples' that need no display or MPI, built for",
        "sm_90) ran through gpool on sim (2026-12-06, `run .samples build --backend sim`): none called a refused",
        "function. The sim computes no kernels, so their results are compared with native runs on a GPU only.",
        "Through the chain to the cuda backend (docs/architecture.md, \"The cuda backend without a GPU\";",
        "2026-12-08, `run .samples build --backend chain`) every sample ended as on sim (58 pass there, 57",
        "here), but for p2pBandwidthLatencyTest, whose kernel polls a flag in mapped host memory that the chain",
        "cannot map, and cuSolverRf, which crashes on the sim's uncomputed results either way, later through",
        "the chain than the 60 s limit.",
        "",
        "| function | gpool | why | named by |",
        "|---|---|---|---|",
    ] + rows
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    text = render(sys.argv[1])
    path = os.path.join(ROOT, "docs/compatibility.md")
    if "--check" in sys.argv:
        current = open(path).read() if os.path.exists(path) else ""
        if current != text:
            sys.exit("docs/compatibility.md is out of date: run scripts/compatibility.py " + sys.argv[1])
        return
    open(path, "w").write(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
