#!/usr/bin/env python3
"""The allocator under 1,000 slow connections and 1,000 long polls (issue 11: about 70 of either stopped
it answering, and it then declared healthy servers down): status probes are still answered, servers stay
up and leases live. Prints the probes' latency (docs/performance.md records it).
usage: allocator_load_test.py BUILD_DIR [unittest args]"""
import os
import resource
import selectors
import socket
import statistics
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import Cluster, setUpModule, tearDownModule  # noqa: E402,F401
from ports import free_port  # noqa: E402

SLOW, POLLS, PROBES = 1000, 1000, 200


def raise_fd_limit(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= need


class Crowd:
    """SLOW connections that send a request a byte every second, and POLLS connections that long-poll a
    lease again as soon as each answer comes; all on one thread."""

    def __init__(self, port, lease_id):
        self.port, self.lease_id = port, lease_id
        self.sel = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.answers = 0
        self.slow = [self.connect(b"POST /v1/leases HTTP/1.1\r\nHost: a\r\nX-Slow: ") for _ in range(SLOW)]
        for _ in range(POLLS):
            self.poll()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def connect(self, first):
        s = socket.create_connection(("127.0.0.1", self.port))
        s.sendall(first)
        return s

    def poll(self):
        s = self.connect(f"GET /v1/leases/{self.lease_id}?wait_ms=5000 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ)

    def run(self):
        next_byte = time.time() + 1
        while not self.stop.is_set():
            for key, _ in self.sel.select(timeout=0.1):
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # answered and closed: poll again
                    self.sel.unregister(key.fileobj)
                    key.fileobj.close()
                    self.answers += 1
                    if not self.stop.is_set():
                        self.poll()
            if time.time() >= next_byte:
                next_byte += 1
                for s in self.slow:
                    try:
                        s.send(b"x")
                    except OSError:
                        pass

    def close(self):
        self.stop.set()
        self.thread.join()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        for s in self.slow:
            s.close()


class AllocatorUnderLoad(unittest.TestCase):
    @unittest.skipIf(os.environ.get("GPOOL_SANITIZED"), "a latency figure: measured in the normal build, not under sanitizers")
    def test_probes_are_answered_with_1000_slow_connections_and_1000_long_polls(self):
        if not raise_fd_limit(SLOW + POLLS + 500):
            self.skipTest("needs a limit of at least 2,500 open files (ulimit -n)")
        c = Cluster(ttl="30s")
        crowd = None
        try:
            _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            crowd = Crowd(c.port, lease["id"])
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
                  f"{failures} not; p50 {p50:.1f} ms, p99 {p99:.1f} ms; {crowd.answers} long-poll answers", flush=True)
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
            self.assertIn("could not run for", c.log("allocator"))
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
