#!/usr/bin/env python3
"""Failover time of gpool-allocator replicas (issue 16): a three-member etcd cluster and three allocator
replicas on loopback; the leader is SIGKILLed KILLS times (and started again, as a standby, each time).
Each failover is timed from the SIGKILL to the first answer a client gets (GET /v1/status, 200) from
any replica, asked every 20 ms. With --load S, gpool_bench_allocator first asks the leader for leases at
1,000 a second for S seconds (1,000 simulated GPUs, each lease held), so that the new leader takes over
thousands of live leases; the bench is then SIGKILLed too, and the leases it held stay live.
usage: bench/failover.py [BUILD_DIR] [KILLS] [--leader-ttl S] [--load S]"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "allocator"))
from etcd_cluster import EtcdCluster, _free_port  # noqa: E402


def answer(url, path):
    try:
        with urllib.request.urlopen(url + path, timeout=1) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, ConnectionError, OSError):
        return 0, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("kills", nargs="?", type=int, default=10)
    ap.add_argument("--leader-ttl", type=int, default=3)
    ap.add_argument("--load", type=float, default=0, help="seconds of lease requests before each kill")
    a = ap.parse_args()
    allocator = os.path.join(os.path.abspath(a.build), "allocator", "gpool-allocator")
    bench = os.path.join(os.path.abspath(a.build), "bench", "gpool_bench_allocator")
    etcd = EtcdCluster(3)
    d = tempfile.mkdtemp(prefix="gpool-failover-")
    ports = [_free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    procs = [None] * 3

    def start(i):
        log = open(os.path.join(d, f"allocator{i}.log"), "a")
        procs[i] = subprocess.Popen([allocator, "--listen", f"127.0.0.1:{ports[i]}", "--db", os.path.join(d, "alloc.db"),
                                     "--store", etcd.url(), "--leader-ttl", str(a.leader_ttl), "--log-level", "warn",
                                     "--max-client-cpu", "0"], stderr=log)  # (the load's hosts are all 127.0.0.1)

    def leader():
        for i, u in enumerate(urls):
            if "gpool_allocator_leader 1" in answer(u, "/metrics")[1]:
                return i
        return None

    try:
        start(0)
        while leader() != 0:
            time.sleep(0.05)
        start(1)
        start(2)
        while not all(answer(u, "/metrics")[0] == 200 for u in urls):
            time.sleep(0.05)
        took = []
        for k in range(a.kills):
            old = leader()
            live = ""
            if a.load > 0:
                load = subprocess.Popen([bench, "--allocator", urls[old], "--key-file", os.path.join(d, "alloc.db.key"),
                                         "--servers", "125", "--gpus-per-server", "8", "--rate", "1000", "--threads", "16",
                                         "--seconds", "600", "--hold", "600", "--wait", "0"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(a.load)
                load.kill()
                load.wait()
                live = answer(urls[old], "/metrics")[1]
                live = next((ln.split()[1] for ln in live.splitlines() if ln.startswith("gpool_shares_in_use ")), "?")
                live = f" ({live} shares of live leases)"
            procs[old].send_signal(signal.SIGKILL)
            t0 = time.monotonic()
            procs[old].wait()
            while not any(answer(u, "/v1/status")[0] == 200 for u in urls):
                time.sleep(0.02)
            took.append(time.monotonic() - t0)
            print(f"kill {k + 1}: replica {old} killed{live}; replica {leader()} answered after {took[-1]:.2f} s", flush=True)
            start(old)
            while answer(urls[old], "/metrics")[0] != 200:
                time.sleep(0.05)
        print(f"failover_s min {min(took):.2f} median {statistics.median(took):.2f} mean {statistics.mean(took):.2f} "
              f"max {max(took):.2f} (leader TTL {a.leader_ttl} s, {a.kills} kills{', with load' if a.load else ''})")
    finally:
        for p in procs:
            if p and p.poll() is None:
                p.terminate()
                p.wait()
        etcd.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
