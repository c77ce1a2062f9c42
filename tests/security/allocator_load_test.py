#!/usr/bin/env python3
"""The allocator under 1,000 slow connections and 1,000 long polls (issue 11: about 70 of either stopped
it answering, and it then declared healthy servers down): status probes are still answered, servers stay
up and leases live. The crowd comes from 8 loopback addresses (each under the allocator's share per
address) and its slow requests are cut off at the request deadline, then sent again. Prints the probes'
latency (docs/performance.md records it).
usage: allocator_load_test.py BUILD_DIR [unittest args]"""
import os
import resource
import socket
import statistics
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import Cluster, setUpModule, tearDownModule, wait_for  # noqa: E402,F401
from ports import free_port  # noqa: E402
from crowd import Crowd  # noqa: E402

SLOW, POLLS, PROBES = 1000, 1000, 200


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= need


class AllocatorUnderLoad(unittest.TestCase):
    @unittest.skipIf(os.environ.get("GPOOL_SANITIZED"), "a latency figure: measured in the normal build, not under sanitizers")
    def test_probes_are_answered_with_1000_slow_connections_and_1000_long_polls(self):
        if not raise_fd_limit(SLOW + POLLS + 500):
            self.skipTest("needs a limit of at least 2,500 open files (ulimit -n)")
        c = Cluster(ttl="30s")
        crowd = None
        try:
            _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            crowd = Crowd(c.port, SLOW, POLLS, lease["id"], [f"127.0.1.{i}" for i in range(1, 9)])
            time.sleep(2)  # all of them connected and waiting
            latencies, failures, why = [], 0, None
            for _ in range(PROBES):
                t0 = time.time()
                try:
                    with urllib.request.urlopen(c.url + "/v1/status", timeout=2) as r:
                        r.read()
                    latencies.append(time.time() - t0)
                except OSError:
                    failures += 1
                status, out = c.try_http("POST", f"/v1/leases/{lease['id']}/heartbeat",
                                         headers={"X-Gpool-Lease-Key": lease["lease_key"]})
                if status != 200:
                    failures += 1
                    why = (status, out)
                time.sleep(0.02)
            latencies.sort()
            p50, p99 = statistics.median(latencies) * 1e3, latencies[int(0.99 * (len(latencies) - 1))] * 1e3
            print(f"\nstatus probes with {SLOW} slow connections and {POLLS} long polls open: {len(latencies)} answered, "
                  f"{failures} not; p50 {p50:.1f} ms, p99 {p99:.1f} ms; {crowd.answers} long-poll answers, "
                  f"{crowd.cut_off} slow requests cut off", flush=True)
            self.assertEqual(failures, 0, why if failures else "")
            self.assertGreater(crowd.answers, 0)  # the long polls were answered too
            self.assertTrue(all(s["up"] for s in c.status()["servers"]), "a server was declared down")
            self.assertEqual(c.lease(lease["id"])["state"], "granted")
        finally:
            if crowd:
                crowd.close()
            c.close()

    def test_an_allocator_that_could_not_run_ends_no_lease_for_it(self):
        # Stopped for three times the heartbeat timeouts: the time it could not run counts against nobody.
        import signal
        c = Cluster(ttl="1s")
        try:
            _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            c.allocator.send_signal(signal.SIGSTOP)
            time.sleep(3)
            c.allocator.send_signal(signal.SIGCONT)
            status, out = c.http("POST", f"/v1/leases/{lease['id']}/heartbeat")
            self.assertEqual(status, 200, out)
            self.assertTrue(all(s["up"] for s in c.status()["servers"]), "a server was declared down")
            # (its tick thread says so once it runs again, which may be after the heartbeat's answer)
            self.assertTrue(wait_for(lambda: "could not run for" in c.log("allocator")), c.log("allocator"))
        finally:
            c.close()


class AllocatorAtItsDescriptorLimit(unittest.TestCase):
    def test_it_warns_then_serves_again_once_connections_close(self):
        import subprocess
        import tempfile
        build = sys.argv[1]
        with tempfile.TemporaryDirectory() as d:
            port = free_port()
            log = open(os.path.join(d, "log"), "w+")
            limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))  # noqa: E731
            p = subprocess.Popen([os.path.join(build, "allocator", "gpool-allocator"), "--listen", f"127.0.0.1:{port}",
                                  "--db", os.path.join(d, "a.db"), "--max-connections", "100"],
                                 stderr=log, preexec_fn=limit)
            crowd = []
            try:
                url = f"http://127.0.0.1:{port}/v1/status"
                for _ in range(100):
                    try:
                        urllib.request.urlopen(url, timeout=1)
                        break
                    except OSError:
                        time.sleep(0.05)
                crowd = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]  # past the limit
                time.sleep(1)
                self.assertIsNone(p.poll(), "the allocator ended at its descriptor limit")
                # It stops accepting before the limit (the rest wait in the backlog) instead of failing
                # accept() and retrying every millisecond at it.
                held = len(os.listdir(f"/proc/{p.pid}/fd"))
                self.assertLess(held, 64, f"the allocator holds {held} descriptors: at its limit")
                for s in crowd:
                    s.close()
                crowd = []
                status = None
                for _ in range(100):
                    try:
                        status = urllib.request.urlopen(url, timeout=2).status
                        break
                    except OSError:
                        time.sleep(0.1)
                self.assertEqual(status, 200, "not answering once connections closed")
                log.seek(0)
                self.assertIn("only 64 open files allowed", log.read())
            finally:
                for s in crowd:
                    s.close()
                p.kill()
                p.wait()


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
