#!/usr/bin/env python3
"""What a crowd of slow connections costs gpool-allocator, for two builds side by side: starts each build's
allocator on a fresh database, opens N connections from 8 loopback addresses that send a request a byte a
second (tests/security/crowd.py), and 4 s later reads the allocator's threads and resident memory from
/proc. The crowd's addresses each hold N/8, within the default share of an address (a quarter of 4,096).
With --deaf MIB, the crowd's connections instead each ask for the policy, of MIB MiB (an admin's comments),
and never read it (they connect 20 ms apart, so that no burst makes threads); the kernel's TCP memory
(/proc/net/sockstat, all of this host's) is read too.
usage: bench/allocator_crowd_cost.py BEFORE_BUILD_DIR AFTER_BUILD_DIR [N=1000] [--deaf MIB]"""
import argparse
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


def tcp_mib():
    with open("/proc/net/sockstat") as f:
        fields = next(line for line in f if line.startswith("TCP:")).split()
    return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cost(build, n, deaf_mib):
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        args = [os.path.join(build, "allocator", "gpool-allocator"), "--listen", f"127.0.0.1:{port}",
                "--db", os.path.join(d, "a.db")]
        if deaf_mib:
            with open(os.path.join(d, "policy.toml"), "w") as f:
                f.write("[pools.default]\n" + ("# " + "x" * 1022 + "\n") * (deaf_mib * 1024))
            args += ["--config", os.path.join(d, "policy.toml")]
        p = subprocess.Popen(args, stderr=subprocess.DEVNULL)
        crowd = None
        try:
            time.sleep(1.5)
            addresses = [f"127.0.3.{i}" for i in range(1, 9)]
            if deaf_mib:
                # 20 ms apart: the threads then held are those the answers hold, not a burst's
                crowd = Crowd(port, deaf=n, deaf_request=b"GET /v1/policy HTTP/1.1\r\nHost: a\r\n\r\n", addresses=addresses,
                              pace=0.02)
            else:
                crowd = Crowd(port, slow=n, addresses=addresses)
            time.sleep(4)
            return (status(p.pid, "Threads"), status(p.pid, "VmRSS") / 1024, len(crowd.deaf if deaf_mib else crowd.slow),
                    tcp_mib())
        finally:
            if crowd:
                crowd.close()
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("usage:")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("n", type=int, nargs="?", default=1000)
    ap.add_argument("--deaf", type=int, metavar="MIB", default=0)
    a = ap.parse_args()
    kind = f"connections not reading a {a.deaf} MiB answer" if a.deaf else "slow connections"
    for name, build in (("before", a.before), ("after", a.after)):
        threads, mib, held, tcp = cost(build, a.n, a.deaf)
        print(f"{name}: {held} {kind} open; the allocator has {threads} threads, {mib:.1f} MiB resident; "
              f"the host's TCP buffers hold {tcp:.1f} MiB")


if __name__ == "__main__":
    main()
