#!/usr/bin/env python3
"""gpool-server's --memory-audit against NVIDIA's driver (scripts/gpu_check.sh --only audit; docs/security.md):
a real allocator and a cuda gpool-server whose --worker is tests/security/taken_over_worker.py (the real
worker for every client but the one it takes over).
1. What a worker holds beside its lease's cap, as NVML counts it: a program holding 1 GiB through a lease;
   NVML's figure for its worker against the lease's own count (the server's /metrics). What --context-memory
   (2 GiB by default) must cover. Likewise for PyTorch after a convolution and a matmul (cuDNN's and
   cuBLAS's code loaded), and for a second process of the lease that opens the first one's memory by CUDA
   IPC (if NVML charged it to the importer too, the audit would count it twice).
2. A worker taken over allocates 3 GiB past its lease's cap with the driver itself (around its ledger):
   the server ends it within a few seconds, naming its lease, while the first lease's program holds on.
3. --compute-audit against the driver's count of device time (NVML's per-process utilization): a lease of
   0.5 whose program keeps to its share (its worker paces it) stays near its share, as /metrics shows what
   the server reads; one whose kernels run 8 s at a share of 0.25 is ended past --compute-audit 5.
Prints a line per check, "audit: NAME: PASS|FAIL ...", and exits 1 when one fails.
`--backend sim` runs the same on the sim backend (no GPU: the taken-over worker counts the memory in the
emulated device's page instead), to check this script where there is no GPU.
usage: memory_audit_check.py BUILD_DIR OUT_DIR [--backend cuda|sim]"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "allocator"))
import cluster  # noqa: E402  (BUILD is sys.argv[1])
from cluster import GIB, MEMCAP, Cluster, wait_for  # noqa: E402

TAKEN_OVER = os.path.join(HERE, "..", "security", "taken_over_worker.py")
SHARE = os.path.join(cluster.BUILD, "tests", "cuda_compute_share")  # kernels that keep the device busy
JIT = os.path.join(cluster.BUILD, "tests", "cuda_jit_link")  # PTX, which the driver compiles
MIB = 1 << 20
failed = []


def say(name, ok, detail):
    print(f"audit: {name}: {'PASS' if ok else 'FAIL'} {detail}", flush=True)
    if not ok:
        failed.append(name)


def nvml_used_mib(pid):
    """What NVML counts `pid` holding, in MiB (None: not listed)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid) and fields[1].isdigit():
            return int(fields[1])
    return None


def metric(c, name, labels=""):
    port = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", c.log("sim0")).group(1)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        m = re.search("^" + re.escape(name) + r"(\{[^}]*" + re.escape(labels) + r"[^}]*\})? ([0-9.e+-]+)$", r.read().decode(), re.M)
    return float(m.group(2)) if m else None


def worker_of(c, lease):
    m = re.search(r"→ worker (\d+) on device \d+ for lease " + lease["id"], c.log("sim0"))
    return int(m.group(1)) if m else None


def hold(c, lease, size, go):
    """memcap_probe holding `size` bytes through `lease` until `go` exists."""
    return subprocess.Popen([MEMCAP, "hold", str(size), go], env=c.client_env(lease["shares"][0]), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def commands(c, lease):
    p = subprocess.Popen([MEMCAP, "commands"], env=c.client_env(lease["shares"][0]), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def ask(line):
        p.stdin.write(line + "\n")
        p.stdin.flush()
        return p.stdout.readline().strip()
    return p, ask


TORCH = """
import sys, torch
x = torch.randn(64, 3, 224, 224, device="cuda")
y = torch.nn.Conv2d(3, 64, 7).cuda()(x)
z = torch.randn(4096, 4096, device="cuda") @ torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print("READY", torch.cuda.memory_reserved(), flush=True)
sys.stdin.readline()
"""


def ipc_and_torch(c, lease, first_worker, before):
    """What a lease's second process holds, as NVML counts it, once it opened the first one's memory by IPC;
    and what PyTorch's worker holds beside its ledger once cuDNN and cuBLAS ran."""
    exporter, ask_exporter = commands(c, lease)
    importer, ask_importer = commands(c, lease)
    try:
        allocated = ask_exporter(f"alloc {GIB}")
        handle = ask_exporter("export")
        opened = ask_importer("open " + handle)
        workers = [int(w) for w in re.findall(r"→ worker (\d+) on device \d+ for lease " + lease["id"], c.log("sim0"))]
        exporter_w, importer_w = workers[-2], workers[-1]
        ledger = metric(c, "gpool_share_memory_bytes", lease["id"])
        e, i = nvml_used_mib(exporter_w), nvml_used_mib(importer_w)
        say("ipc", allocated == "OK" and opened == "OK" and i is not None and e is not None and i < e,
            f"exporter {exporter_w}: NVML {e} MiB, importer {importer_w}: NVML {i} MiB (alloc {allocated}, open {opened}); "
            f"the lease's ledger {ledger and ledger / MIB:.0f} MiB (1 GiB more than before: {before and before / MIB:.0f})")
    finally:
        for p in (importer, exporter):
            p.kill()
            p.wait()
    try:
        import torch  # noqa: F401  (only whether this machine has it)
    except ImportError:
        return say("torch", True, "skipped: no PyTorch here")
    env = c.client_env(lease["shares"][0])
    env["LD_LIBRARY_PATH"] += ":/usr/local/cuda/lib64"
    p = subprocess.Popen([sys.executable, "-c", TORCH], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        line = p.stdout.readline()
        worker = int(re.findall(r"→ worker (\d+) on device \d+ for lease " + lease["id"], c.log("sim0"))[-1])
        used, ledger = nvml_used_mib(worker), metric(c, "gpool_share_memory_bytes", lease["id"])
        beside = None if used is None or ledger is None else used - (ledger - (before or 0)) / MIB
        say("torch", line.startswith("READY") and beside is not None and beside < 2048,
            f"PyTorch's worker {worker}: NVML {used} MiB, the lease's ledger {ledger and ledger / MIB:.0f} MiB "
            f"({line.strip()}): {beside and round(beside)} MiB beside its part of it (--context-memory 2048 allows)")
    finally:
        p.kill()
        p.wait()


def jit_cache(c):
    """What the driver compiled of a lease's PTX is kept in its user's JIT cache, which the worker's sandbox
    lets it write (on sim: the sim's entry, where the driver would keep its own)."""
    if not os.path.exists(JIT):
        return say("jit_cache", True, "skipped: cuda_jit_link is built only with nvcc")
    status, jill = c.http("POST", "/v1/leases", {"user": "jill", "p": 0.25})
    assert status == 201, jill
    run = subprocess.run([JIT], env=dict(c.client_env(jill["shares"][0]), GPOOL_TEST_EXPECT_COMPUTE="1"), capture_output=True,
                         text=True, timeout=120)
    c.http("DELETE", "/v1/leases/" + jill["id"])
    cache = os.path.join(c.dir, "jit", "jill")
    kept = sorted(os.path.relpath(os.path.join(d, f), cache) for d, _, files in os.walk(cache) for f in files)
    others = [u for u in os.listdir(os.path.join(c.dir, "jit")) if u != "jill"]
    say("jit_cache", run.returncode == 0 and bool(kept) and not others,
        f"cuda_jit_link through a lease of jill (exit {run.returncode}): {len(kept)} file(s) in her JIT cache "
        f"{kept[:4]}; other users' caches: {others}" + ("" if run.returncode == 0 else "\n" + run.stdout + run.stderr))


def compute(c):
    """A lease at its share, and one whose kernels are longer than --compute-audit allows."""
    if not os.path.exists(SHARE):
        return say("compute", True, "skipped: cuda_compute_share is built only with nvcc")
    status, bea = c.http("POST", "/v1/leases", {"user": "bea", "p": 0.5})
    assert status == 201, bea
    p = subprocess.Popen([SHARE, "8", "1000", "0.5"], env=c.client_env(bea["shares"][0]), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    most = 0.0
    while p.poll() is None:
        ahead = metric(c, "gpool_lease_compute_ahead_seconds", bea["id"])
        most = max(most, ahead or 0.0)
        time.sleep(0.5)
    out = p.stdout.read().strip().splitlines()
    named = f"lease {bea['id']}: its processes took" in c.log("sim0")
    say("at_share", p.returncode == 0 and not named and most < 1,
        f"a lease of 0.5 paced by its worker ({out[-1] if out else 'no output'}): at most {most:.3f} s of device time "
        f"ahead of its share as the driver counts it (--compute-audit 5; named in the log: {named})")
    status, cal = c.http("POST", "/v1/leases", {"user": "cal", "p": 0.25})
    assert status == 201, cal
    t0 = time.time()
    p = subprocess.Popen([SHARE, "60", "8000000"], env=c.client_env(cal["shares"][0]), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        rc = p.wait(120)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    said = re.search(rf"lease {cal['id']}: its processes took [\d.]+ s of device \d+'s time past its share of 0\.25, as the "
                     r"driver counts it, more than the 5 s", c.log("sim0"))
    say("long_kernel", rc != 0 and said is not None,
        f"kernels of 8 s at a share of 0.25: the program ended after {time.time() - t0:.1f} s (exit {rc}); the server "
        f"said: {said and said.group(0)}")
    say("compute_metric", metric(c, "gpool_server_compute_overruns_total") == 1, "gpool_server_compute_overruns_total is 1")


def main():
    backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "cuda"
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    if shutil.which("munged") or os.path.exists("/usr/sbin/munged"):
        cluster.setUpModule()
    else:  # (a GPU machine may have no munged: nobody here proves who they are with MUNGE)
        cluster.MUNGED = types.SimpleNamespace(socket="/nonexistent/munge.socket")
    drop = tempfile.mkdtemp(prefix="gpool-audit-")
    os.chmod(drop, 0o777)
    os.environ.update(GPOOL_TEST_TAKEOVER=os.path.join(drop, "take-over-next"),
                      GPOOL_TEST_REAL_WORKER=os.path.join(cluster.BUILD, "server", "gpool-worker"),
                      GPOOL_TEST_SANDBOXED_AS_WORKER=os.path.join(cluster.BUILD, "tests", "sandboxed_as_worker"))
    c = Cluster(servers=1, ttl="120s", memory=8 * GIB, backend=backend, server_args=[
        "--worker", TAKEN_OVER, "--metrics", "127.0.0.1:0", "--log-level", "debug", "--compute-audit", "5",
        *(["--sim-kernels", cluster.KERNELS] if backend == "sim" else [])])
    progs = []
    try:
        # 0. A lease's user's JIT cache, written by the driver in the worker's sandbox.
        jit_cache(c)
        # 1. What a worker holds beside its lease's cap.
        status, ann = c.http("POST", "/v1/leases", {"user": "ann", "p": 0.5, "m": "4GiB"})
        assert status == 201, ann
        go = os.path.join(drop, "go")
        first = hold(c, ann, GIB, go)
        progs.append(first)
        line = first.stdout.readline()
        say("hold", line.startswith("HELD"), f"a program holds 1 GiB through a 4 GiB lease: {line.strip()}")
        worker = worker_of(c, ann)
        ledger = metric(c, "gpool_share_memory_bytes", ann["id"])
        if backend == "cuda":
            used = nvml_used_mib(worker)
            beside = None if used is None or ledger is None else used - ledger / MIB
            say("context", beside is not None and beside < 2048,
                f"worker {worker}: NVML counts {used} MiB, its lease's ledger {ledger and ledger / MIB:.0f} MiB: "
                f"{beside and round(beside)} MiB beside the cap (--context-memory 2048 allows)")
        if backend == "cuda":
            ipc_and_torch(c, ann, worker, ledger)
        # 2. A worker taken over goes around its ledger.
        report = os.path.join(drop, "report.json")
        plan = {"victim": worker, "victim_uid": os.stat(f"/proc/{worker}").st_uid, "report": report, "server_key": c.server_key("sim0"), "stay": 60,
                **({"cuda_bytes": 5 * GIB} if backend == "cuda" else {"device_bytes": 5 * GIB})}
        with open(os.environ["GPOOL_TEST_TAKEOVER"], "w") as f:
            json.dump(plan, f)
        status, mallory = c.http("POST", "/v1/leases", {"user": "mallory", "p": 0.5, "m": "2GiB"})
        assert status == 201, mallory
        second = hold(c, mallory, MIB, os.path.join(drop, "never"))
        progs.append(second)
        if not wait_for(lambda: os.path.exists(report), timeout=60):
            say("takeover", False, "the taken-over worker wrote no report:\n" + c.log("sim0")[-4000:])
            return
        with open(report) as f:
            got = json.load(f)
        say("takeover", got.get("device memory") == "held", f"the taken-over worker holds 5 GiB past its ledger: {got.get('device memory')}")
        taken = worker_of(c, mallory)
        t0 = time.time()
        ended = wait_for(lambda: not os.path.exists(f"/proc/{taken}") or open(f"/proc/{taken}/stat").read().split()[2] == "Z", timeout=20)
        said = re.search(rf"lease {mallory['id']}: its processes hold (\d+) MiB .*past the (\d+) MiB", c.log("sim0"))
        say("ended", ended and said is not None,
            f"worker {taken} ended {time.time() - t0:.1f} s after its report; the server said: {said and said.group(0)}")
        say("victim", first.poll() is None, "the first lease's program holds on meanwhile")
        say("metric", metric(c, "gpool_server_memory_overruns_total") == 1, "gpool_server_memory_overruns_total is 1")
        open(go, "w").close()
        say("victim_ends", first.wait(60) == 0, "the first lease's program then ends as it should")
        # 3. Device time, as the driver counts it.
        compute(c)
    finally:
        for p in progs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for name in os.listdir(c.dir):
            if name.endswith(".log"):
                shutil.copy(os.path.join(c.dir, name), os.path.join(out, "audit-" + name))
        c.close()
        if cluster.MUNGED and hasattr(cluster.MUNGED, "close"):
            cluster.tearDownModule()
    print("audit:", "all checks pass" if not failed else "FAILED: " + " ".join(failed))


if __name__ == "__main__":
    main()
    sys.exit(1 if failed else 0)
