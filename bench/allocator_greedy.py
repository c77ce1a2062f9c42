#!/usr/bin/env python3
"""What a greedy crowd costs gpool-allocator, and everyone else, without and with each client's share of its
CPU (--max-client-cpu), side by side; or, with --total, with the share alone and with the share and a total
the clients asking split (--max-client-cpu-total). Starts the build's allocator on a fresh database with a policy of
POLICY_MIB, ROUNDS times for each setting, and while 8 threads (or one per address, if more) from ADDRESSES loopback addresses ask for /v1/policy as
soon as each answer came (kept-alive connections), measures over 8 s, once the crowd has spent what it
saved: the allocator's CPU use (CPU seconds a second), the crowd's answers a second, and the time 32
status probes from another address took (a new connection each). Prints medians per round, and ratios.
usage: bench/allocator_greedy.py BUILD_DIR [ROUNDS=3] [--share 0.25] [--policy-mib 6] [--addresses 4] [--total CPUS]"""
import argparse
import http.client
import os
import statistics
import subprocess
import tempfile
import threading
import time
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "allocator"))
from ports import free_port, wait_listening  # noqa: E402


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def greedy(port, address, stop, answers):
    h = None
    while not stop.is_set():
        try:
            h = h or http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(address, 0))
            h.request("GET", "/v1/policy")
            r = h.getresponse()
            r.read()
            answers.append(1)
            if r.will_close:
                h.close()
                h = None
        except (OSError, http.client.HTTPException):
            h = None


def one_round(build, limits, policy_mib, addresses):
    """(allocator CPU, crowd answers a second, probe median ms, probe max ms)."""
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        policy = os.path.join(d, "policy.toml")
        with open(policy, "w") as f:
            f.write("[pools.default]\nfractions = [1.0, 0.5]\n" + ("# " + "x" * 1022 + "\n") * (policy_mib << 10))
        p = subprocess.Popen([os.path.join(build, "allocator", "gpool-allocator"), "--listen", f"127.0.0.1:{port}",
                              "--db", os.path.join(d, "a.db"), "--config", policy] + limits,
                             stderr=subprocess.DEVNULL)
        stop, answers = threading.Event(), []
        threads = []
        try:
            wait_listening(port)
            threads = [threading.Thread(target=greedy, args=(port, f"127.0.2.{i % addresses + 1}", stop, answers))
                       for i in range(max(8, addresses))]
            for t in threads:
                t.start()
            time.sleep(5)
            used, had, t0 = cpu_seconds(p.pid), len(answers), time.time()
            probes = []
            for _ in range(32):
                t = time.perf_counter()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", "/v1/status")
                conn.getresponse().read()
                conn.close()
                probes.append((time.perf_counter() - t) * 1e3)
                time.sleep(0.25)
            took = time.time() - t0
            return ((cpu_seconds(p.pid) - used) / took, (len(answers) - had) / took, statistics.median(probes), max(probes))
        finally:
            stop.set()
            for t in threads:
                t.join()
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("usage:")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("rounds", type=int, nargs="?", default=3)
    ap.add_argument("--share", type=float, default=0.25)
    ap.add_argument("--policy-mib", type=int, default=6)
    ap.add_argument("--addresses", type=int, default=4)
    ap.add_argument("--total", type=float, help="compare the share alone with the share and this total")
    a = ap.parse_args()
    share = ["--max-client-cpu", str(a.share)]
    if a.total:
        settings = {"share alone": share + ["--max-client-cpu-total", "0"],
                    f"total {a.total}": share + ["--max-client-cpu-total", str(a.total)]}
    else:
        settings = {"no limit": ["--max-client-cpu", "0"], f"--max-client-cpu {a.share}": share + ["--max-client-cpu-total", "0"]}
    got = {name: [] for name in settings}
    for _ in range(a.rounds):
        for name, limits in settings.items():
            got[name].append(one_round(a.build, limits, a.policy_mib, a.addresses))
    (before, b), (after, f) = got.items()
    for i, name in enumerate(("allocator CPU", "crowd answers/s", "probe median ms", "probe max ms")):
        ratio = statistics.median(r[i] for r in f) / statistics.median(r[i] for r in b)
        print(f"{name}: {before} {' '.join(f'{r[i]:.2f}' for r in b)}; {after}: {' '.join(f'{r[i]:.2f}' for r in f)}; "
              f"{after}/{before} {ratio:.2f}")


if __name__ == "__main__":
    main()
