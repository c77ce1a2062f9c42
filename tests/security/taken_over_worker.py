#!/usr/bin/env python3
"""A gpool-worker taken over by its client, for tests/security/worker_users_test.py. gpool-server starts it
(--worker) in place of gpool-worker. When the file that GPOOL_TEST_TAKEOVER names exists, this worker takes
it (renames it away) and does what a client that took over its worker could: as the user the worker
becomes (its --uid and --gid), with the descriptors it inherited, it reaches for what is not its lease's,
and writes what it reached as JSON to the file's "report". Otherwise it is the real worker
(GPOOL_TEST_REAL_WORKER), so the other leases of the test are served as usual. Unless the server gave it
--no-sandbox, it acts from inside the sandbox the real worker shuts itself in (worker_sandbox.h), entered
through GPOOL_TEST_SANDBOXED_AS_WORKER with the worker's own options, as the real worker's code would be."""
import ctypes
import errno
import fcntl
import json
import mmap
import os
import resource
import signal
import sys
import time


def arg(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def attempt(action):
    """'reached', or the errno's name that stopped it."""
    try:
        action()
        return "reached"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def read(path):
    with open(path, "rb") as f:
        f.read(1)


def plant(path):
    with open(path, "wb") as f:
        f.write(b"code the other user's program would run in place of what its PTX compiles to")


def overwrite_launch_counters(fd):
    """Every slot of the launch-counter page it was given (shared_budget.cpp: magic, limit, total, slots)."""
    size = os.fstat(fd).st_size
    with mmap.mmap(fd, size) as page:
        for offset in range(24, size - 7, 8):
            page[offset:offset + 8] = (1 << 62).to_bytes(8, "little")


def hold_device_memory(fd, slot, size):
    """Counts `size` bytes more in its slot of the sim device's page (and its total), as the driver counts
    memory a worker allocated itself, around its ledger (shared_budget.cpp: magic, limit, total, slots)."""
    with mmap.mmap(fd, os.fstat(fd).st_size) as page:
        for offset in (16, 24 + 8 * slot):
            value = int.from_bytes(page[offset:offset + 8], "little") + size
            page[offset:offset + 8] = value.to_bytes(8, "little")


def take_device_time(fd, slot, seconds):
    """Counts all of the device's time in its slot of the sim's page of device time (ns), for `seconds`, as the
    driver counts a worker that launched around its lease's pace, or lowered it (shared_budget.cpp's layout)."""
    with mmap.mmap(fd, os.fstat(fd).st_size) as page:
        end = last = time.monotonic()
        end += seconds
        while last < end:
            time.sleep(0.05)
            now = time.monotonic()
            for offset in (16, 24 + 8 * slot):
                value = int.from_bytes(page[offset:offset + 8], "little") + int((now - last) * 1e9)
                page[offset:offset + 8] = value.to_bytes(8, "little")
            last = now


def allocate_with_the_driver(size):
    """Allocates `size` bytes on device 0 with NVIDIA's driver itself (a GPU machine), around the worker's
    ledger, as a client that took over its worker could; returns the CUresult (0: allocated, and held)."""
    import ctypes
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for rc in (lambda: cuda.cuInit(0), lambda: cuda.cuDeviceGet(ctypes.byref(device), 0),
               lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
               lambda: cuda.cuCtxSetCurrent(context), lambda: cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size))):
        if (result := rc()) != 0:
            return result
    return 0


forged = []  # (kept open, locked, for as long as this process runs)


def forge_record(records, victim, charge):
    """Files an export record in `records` (export_records.cpp: magic, server, worker, reserved, charge, seal)
    naming `victim` as its exporter and this stand-in's server as the victim's, and holds it as an importer
    does (a shared lock): once the victim ends, its server would keep its lease charged `charge` bytes."""
    header = (0x52585047).to_bytes(4, "little") + os.getppid().to_bytes(4, "little") + victim.to_bytes(4, "little")
    header += bytes(4) + charge.to_bytes(8, "little") + bytes(16)  # (its seal: unknown to it)
    fd = os.open(os.path.join(records, os.urandom(32).hex()), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.write(fd, header)
    fcntl.flock(fd, fcntl.LOCK_SH)
    forged.append(fd)


def leave_running(plan):
    """Starts a process that outlives this worker; returns once it is named in plan["linger"]."""
    ready, told = os.pipe()
    if os.fork() == 0:
        os.setsid()
        left = os.getpid()
        if plan.get("apart"):  # started apart: its parent ends at once, the worker stays
            left = os.fork()
        if left != 0:  # (apart, its parent names it: it is the server's to kill from its first instant)
            with open(plan["linger"], "w") as f:
                f.write(f"{left} {os.getuid()}")  # (its uid too: it may be killed before it is looked at)
            os.write(told, b"!")
            if plan.get("apart"):
                os._exit(0)
        os.closerange(3, 4096)  # (its client's connection ends with the worker; this stays on unseen)
        os.execv("/bin/sleep", ["sleep", "120"])
    os.close(told)  # (so that the read ends, whatever becomes of what it started)
    os.read(ready, 1)  # (before this worker ends, and gpool-server may clear its user)


def fork_up_to(n):
    """Starts up to `n` processes that wait; ends them; returns how many started."""
    children = []
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.execv("/bin/sleep", ["sleep", "30"])
        children.append(pid)
    for pid in children:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return len(children)


def enter_the_sandbox(taken):
    """Runs this script again inside the sandbox the real worker is in by the time it reads its client's first
    call (worker_sandbox.h), unless the server said --no-sandbox. (The real worker takes its user first; the
    stand-in takes it after, as this script's interpreter may be where the user cannot read.)"""
    if "--no-sandbox" in sys.argv:
        return
    helper = os.environ["GPOOL_TEST_SANDBOXED_AS_WORKER"]
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["GPOOL_TEST_TAKEN"] = taken
    os.execv(helper, [helper, "--also-read", sys.prefix, "--also-read", sys.base_prefix, "--also-read", here,
                      "--also-write", os.path.dirname(taken), "--", sys.executable, os.path.abspath(__file__)] + sys.argv[1:])


def become_the_workers_user():
    if arg("--uid"):  # (worker_user.cpp)
        uid, gid = int(arg("--uid")), int(arg("--gid"))
        if arg("--max-threads"):
            resource.setrlimit(resource.RLIMIT_NPROC, (int(arg("--max-threads")),) * 2)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)


def main():
    taken = os.environ.get("GPOOL_TEST_TAKEN")  # (set: this is the second run, inside the sandbox)
    if not taken:
        order = os.environ.get("GPOOL_TEST_TAKEOVER", "")
        taken = order + ".taken"
        try:
            os.rename(order, taken)
        except OSError:
            real = os.environ["GPOOL_TEST_REAL_WORKER"]
            os.execv(real, [real] + sys.argv[1:])
        # As the real worker asks before its sandbox (worker_main.cpp): SIGKILL when gpool-server ends. (Kept
        # through the exec into the sandbox; with --uid, the change of user below clears it, which the
        # real worker avoids by asking after its change.)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # (PR_SET_PDEATHSIG: 1)
        enter_the_sandbox(taken)
    become_the_workers_user()
    with open(taken) as f:
        plan = json.load(f)
    victim = plan["victim"]
    records = f"/dev/shm/gpool-ipc-{plan['victim_uid']}"  # (its /proc is out of a sandboxed worker's reach)
    report = {
        "uid": os.getuid(),
        "server key": attempt(lambda: read(plan["server_key"])),
        "signal": attempt(lambda: os.kill(victim, 0)),
        "memory": attempt(lambda: os.close(os.open(f"/proc/{victim}/mem", os.O_RDONLY))),  # (where ptrace is checked)
        "environment": attempt(lambda: read(f"/proc/{victim}/environ")),
        "server's environment": "reached" if "HOST_SECRET" in os.environ else "absent",  # (the test gives the server one)
        "records": attempt(lambda: os.close(os.open(records + "/forged", os.O_CREAT | os.O_WRONLY, 0o600))),
    }
    if plan.get("forge_record"):  # a record naming the victim as its exporter, held, to keep its lease charged
        report["forged record"] = attempt(lambda: forge_record(records, plan["victim"], plan["forge_record"]))
    if plan.get("victim_jit"):  # an entry planted in another user's JIT cache, which their driver would load
        report["victim's JIT cache"] = attempt(lambda: plant(os.path.join(plan["victim_jit"], "planted")))
        own = arg("--jit-cache")  # (its own lease's user's, from gpool-server)
        report["own JIT cache"] = attempt(lambda: plant(os.path.join(own, "mine"))) if own else "none given"
    if plan.get("forks"):  # a fork bomb, bounded: how many processes it could start
        report["forks"] = fork_up_to(plan["forks"])
    if arg("--launch-counter-fd"):
        overwrite_launch_counters(int(arg("--launch-counter-fd")))
        report["launch counters"] = "overwritten"
    if plan.get("log"):  # lines of its own making in gpool-server's log, where its standard error goes
        os.write(2, plan["log"].encode())
        report["log"] = "written"
    if plan.get("deaf"):  # deaf to what ends a worker with its server: the real one asks the kernel for SIGKILL
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # when its parent ends (PR_SET_PDEATHSIG); this undoes that
        report["parent's end"] = "ignored" if prctl(1, 0, 0, 0, 0) == 0 else "heard"  # (PR_SET_PDEATHSIG: 1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
    if plan.get("linger"):  # something left running after the worker, as the user it was (refused in its sandbox)
        report["linger"] = attempt(lambda: leave_running(plan))
    if plan.get("cuda_bytes"):
        result = allocate_with_the_driver(plan["cuda_bytes"])
        report["device memory"] = "held" if result == 0 else f"CUresult {result}"
    if plan.get("device_bytes"):
        hold_device_memory(int(arg("--device-budget-fd")), int(arg("--budget-slot")), plan["device_bytes"])
        report["device memory"] = "held"
    if plan.get("device_time"):  # taken below, once the report is written
        report["device time"] = "taking"
    with open(plan["report"] + ".part", "w") as f:
        json.dump(report, f)
    os.rename(plan["report"] + ".part", plan["report"])
    if plan.get("device_time"):  # all of the GPU's time, past its lease's share, until it is ended
        take_device_time(int(arg("--device-busy-fd")), int(arg("--budget-slot")), plan["device_time"])
    if plan.get("stay"):  # holds what it took, serving nothing, until it is ended
        time.sleep(plan["stay"])
    return 1  # its client gets no answer: the connection closes


if __name__ == "__main__":
    sys.exit(main())
