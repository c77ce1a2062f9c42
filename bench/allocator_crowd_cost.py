#!/usr/bin/env python3
"""What a crowd of slow connections costs gpool-allocator, for two builds side by side: starts each build's
allocator on a fresh database, opens N connections from 8 loopback addresses that send a request a byte a
second (tests/security/crowd.py), and 4 s later reads the allocator's threads and resident memory from
/proc. The crowd's addresses each hold N/8, within the default share of an address (a quarter of 4,096).
usage: bench/allocator_crowd_cost.py BEFORE_BUILD_DIR AFTER_BUILD_DIR [N=1000]"""
import os
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests", "security"))
sys.path.insert(0, os.path.join(here, "..", "tests", "allocator"))
from crowd import Crowd  # noqa: E402
from ports import free_port  # noqa: E402


def status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith(field + ":")).split()[1])


def cost(build, n):
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        p = subprocess.Popen([os.path.join(build, "allocator", "gpool-allocator"), "--listen", f"127.0.0.1:{port}",
                              "--db", os.path.join(d, "a.db")], stderr=subprocess.DEVNULL)
        crowd = None
        try:
            time.sleep(1.5)
            crowd = Crowd(port, slow=n, addresses=[f"127.0.3.{i}" for i in range(1, 9)])
            time.sleep(4)
            return status(p.pid, "Threads"), status(p.pid, "VmRSS") / 1024, len(crowd.slow)
        finally:
            if crowd:
                crowd.close()
            p.kill()
            p.wait()


def main():
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    for name, build in (("before", sys.argv[1]), ("after", sys.argv[2])):
        threads, mib, held = cost(build, n)
        print(f"{name}: {held} slow connections open; the allocator has {threads} threads, {mib:.1f} MiB resident")


if __name__ == "__main__":
    main()
