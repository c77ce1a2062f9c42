#!/usr/bin/env python3
"""Each client's share of gpool-allocator's CPU (allocator/src/client_cpu.h, --max-client-cpu): a crowd asking
over and over for costly answers, or making a TLS handshake for each request, from several addresses (or as
a local user), costs the allocator its share of the CPU for each, and everyone else's requests are answered
at once beside it; its own requests wait their turn, and are answered. Real sockets from several loopback
addresses (127.0.0.0/8 is all this host's); the allocator's CPU time read from /proc.
usage: allocator_client_cpu_test.py BUILD_DIR [unittest args]"""
import http.client
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import GPOOL, NOBODY, POLICY, Cluster, as_user, policy_of, read_answer, setUpModule, tearDownModule  # noqa: E402,F401

SHARE = 0.05  # of one CPU, each client's (--max-client-cpu), unless a test says otherwise
CROWD = [f"127.0.2.{i}" for i in range(1, 5)]  # 4 clients: 0.2 CPU in all
MANY = [f"127.0.3.{i}" for i in range(1, 17)]  # 16 clients: 0.8 CPU in all, unless a total splits less


def bound(shares, share=SHARE):
    """What the allocator may use while `shares` clients use theirs: its own work for their connections,
    which no client is charged (about a third more, for a crowd making a TLS handshake each request: its
    threads starting, its connections closing), and the probes'. Without the shares, the crowds below took
    0.5 (TLS) to 1.1 CPU of the 2 of the machine they were written on; with them, 0.06 to 0.27."""
    return 1.5 * share * shares + 0.05

SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def cpu_seconds(pid):
    """The CPU time process `pid` has used, all its threads, in the kernel and out."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(c, name, kind=int):
    with urllib.request.urlopen(c.urls[0] + "/metrics", timeout=10, context=context(c)) as r:
        m = re.search(r"^%s ([0-9.e+-]+)$" % name, r.read().decode(), re.M)
    return kind(m.group(1)) if m else None


def context(c):
    return ssl.create_default_context(cafile=c.cert) if c.tls else None


class Greedy:
    """Threads asking the allocator for `path` as soon as each answer came, from `addresses` in turn: over a
    kept-alive connection, or over a new one each time (`fresh`; with TLS, a handshake each)."""

    def __init__(self, c, path, addresses, threads=8, fresh=False):
        self.c, self.path, self.fresh = c, path, fresh
        self.stop = threading.Event()
        self.answers = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.ask, args=(addresses[i % len(addresses)],)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def connect(self, address):
        if self.c.tls:
            return http.client.HTTPSConnection("127.0.0.1", self.c.port, timeout=60, source_address=(address, 0),
                                               context=context(self.c))
        return http.client.HTTPConnection("127.0.0.1", self.c.port, timeout=60, source_address=(address, 0))

    def ask(self, address):
        h = None
        while not self.stop.is_set():
            try:
                h = h or self.connect(address)
                h.request("GET", self.path)
                r = h.getresponse()
                r.read()
                with self.lock:
                    self.answers += r.status == 200
                if self.fresh or r.will_close:
                    h.close()
                    h = None
            except (OSError, http.client.HTTPException):
                h = None
        if h:
            h.close()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join()


class GreedyClients(unittest.TestCase):
    def cpu_beside(self, c, pid):
        """The allocator's CPU time per second over 8 s, the crowd having spent what its clients saved (4 s of
        their shares); meanwhile 16 status probes from 127.0.0.1 must each be answered within 5 s."""
        time.sleep(3)
        used, t0 = cpu_seconds(pid), time.time()
        for _ in range(16):
            with urllib.request.urlopen(c.urls[0] + "/v1/status", timeout=5, context=context(c)) as r:
                self.assertEqual(r.status, 200)
            time.sleep(0.5)
        return (cpu_seconds(pid) - used) / (time.time() - t0)

    def crowd_costs_its_share(self, path, fresh, tls=False, policy=POLICY, share=SHARE, crowd=CROWD, total=None):
        args = ["--max-client-cpu", str(share)] + (["--max-client-cpu-total", str(total)] if total else [])
        c = Cluster(servers=0, tls=tls, policy=policy, allocator_args=args)
        self.addCleanup(c.close)
        greedy = Greedy(c, path, crowd, threads=max(8, len(crowd)), fresh=fresh)
        self.addCleanup(greedy.close)
        used = self.cpu_beside(c, c.allocator.pid)
        answers = greedy.answers
        shares = total / share if total else len(crowd)
        self.assertLess(used, bound(shares, share), f"the crowd had {answers} answers")
        self.assertGreater(answers, 0, "the crowd's requests were refused, not held back")
        self.assertGreater(metric(c, "gpool_allocator_requests_held_total"), 0)
        self.assertIn("--max-client-cpu", c.log("allocator"))
        return c

    def test_a_crowd_asking_for_large_answers_over_and_over_costs_its_share(self):
        # 6 MiB each: without the shares, the crowd took 1.1 CPU, and the probes waited up to 90 ms.
        self.crowd_costs_its_share("/v1/policy", fresh=False, policy=policy_of(6 << 20))

    def test_a_crowd_from_many_addresses_splits_the_total(self):
        # 16 addresses at 0.05 each would take 0.8 CPU; with a total of 0.2 they split it, 0.0125 each (it
        # measured 0.8 without the total, and under 0.3 with it).
        c = self.crowd_costs_its_share("/v1/policy", fresh=False, policy=policy_of(6 << 20), crowd=MANY, total=0.2)
        self.assertGreaterEqual(metric(c, "gpool_allocator_clients_asking"), len(MANY) // 2)
        self.assertLess(metric(c, "gpool_allocator_client_cpu_share", float), SHARE)
        self.assertIn("--max-client-cpu-total 0.2", c.log("allocator"))

    def test_a_crowd_making_a_tls_handshake_for_each_request_costs_its_share(self):
        # At 0.01 of a CPU, about 20 handshakes a second for each client: more than a crowd makes beside a
        # build (it never waited at 0.05 then), and fewer than it makes alone.
        self.crowd_costs_its_share("/v1/status", fresh=True, tls=True, share=0.01)

    def batch(self, c, whole):
        """Sends 4 requests together on a new connection from CROWD[0], for the policy (`whole` bytes) and
        the status in turn, and checks that each is answered, whole, in order; the ms each answer says its
        request was held (X-Gpool-Held-Ms, 0 when absent)."""
        held = []
        s = socket.create_connection(("127.0.0.1", c.port), timeout=90, source_address=(CROWD[0], 0))
        self.addCleanup(s.close)
        s.sendall(b"GET /v1/policy HTTP/1.1\r\nHost: a\r\n\r\nGET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n" * 2)
        with s.makefile("rb") as f:
            for i in range(4):
                status, headers, body = read_answer(f)
                self.assertIn(b" 200 ", status, f"answer {i}")
                held.append(int(headers.get("x-gpool-held-ms", 0)))
                if i % 2 == 0:
                    self.assertEqual(len(body), whole, f"answer {i}")
                else:
                    self.assertIn(b'"servers"', body, f"answer {i}")
        return held

    def test_a_clients_requests_held_back_are_each_answered_in_turn(self):
        # A client asks for 6 MiB answers 4 requests at a time until it has spent what it saved (at 0.05 of
        # a CPU, 0.2 s: a dozen such answers) and its requests wait; then those that wait are each
        # answered, whole and in order (each batch waits about a second, 3 under the sanitizers); the first
        # of a batch says how long it was held (X-Gpool-Held-Ms); another client's answer says nothing of it.
        c = Cluster(servers=0, policy=policy_of(6 << 20), allocator_args=["--max-client-cpu", "0.05"])
        self.addCleanup(c.close)
        whole = len(policy_of(6 << 20).format(ttl="1s"))
        batches = 0
        while (held := metric(c, "gpool_allocator_requests_held_total")) == 0:
            self.batch(c, whole)
            batches += 1
            self.assertLess(batches, 100, "the client's requests never waited")
        said = [self.batch(c, whole) for _ in range(3)]
        self.assertGreater(metric(c, "gpool_allocator_requests_held_total"), held)
        self.assertTrue(any(ms > 0 for b in said for ms in b), f"no answer said it was held: {said}")
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=60, source_address=(CROWD[1], 0))
        conn.request("GET", "/v1/status")
        r = conn.getresponse()
        r.read()
        conn.close()
        self.assertIsNone(r.getheader("X-Gpool-Held-Ms"))

LOCAL_GREEDY = """
import socket, sys
request = b"GET /v1/policy HTTP/1.1\\r\\nHost: a\\r\\nConnection: close\\r\\n\\r\\n"
while True:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    s.sendall(request)
    while s.recv(1 << 20):
        pass
    s.close()
"""


class GreedyLocalUser(unittest.TestCase):
    def test_a_local_user_asking_over_and_over_leaves_the_rest_to_another(self):
        c = Cluster(servers=0, policy=policy_of(6 << 20), allocator_args=["--max-client-cpu", str(SHARE)])
        self.addCleanup(c.close)
        crowd = [subprocess.Popen([SYSTEM_PYTHON, "-c", LOCAL_GREEDY, c.socket], preexec_fn=as_user(61001, 61001))
                 for _ in range(4)]
        for p in crowd:
            self.addCleanup(p.wait, 30)
            self.addCleanup(p.kill)
        time.sleep(5)  # it spent what it saved
        used, t0 = cpu_seconds(c.allocator.pid), time.time()
        for _ in range(5):
            r = subprocess.run([GPOOL, "whoami"], env=dict(os.environ, GPOOL_ALLOCATOR="unix:" + c.socket),
                               preexec_fn=as_user(NOBODY, NOBODY), capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("user nobody", r.stdout)
            time.sleep(1)
        used = (cpu_seconds(c.allocator.pid) - used) / (time.time() - t0)
        self.assertLess(used, bound(1))
        self.assertGreater(metric(c, "gpool_allocator_requests_held_total"), 0)
        self.assertIn("unix:uid=61001 has used its share", c.log("allocator"))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[2:])
