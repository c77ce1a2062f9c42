#!/usr/bin/env python3
"""What one client may hold of gpool-allocator's TCP connections (allocator/src/request_gate.h): one address
holds at most --max-connections-per-address of them, a request or a TLS handshake must arrive whole within
its deadline, and a connection waiting for its request holds no thread and gives its place to a new one, so
a crowd of slow connections, from one address or many, cannot keep everyone else waiting. Real sockets,
from several loopback addresses (127.0.0.0/8 is all this host's).
usage: allocator_connections_test.py BUILD_DIR [unittest args]"""
import http.client
import os
import re
import select
import selectors
import socket
import ssl
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import GPOOL, NOBODY, Cluster, as_user, policy_of, read_answer, setUpModule, tearDownModule  # noqa: E402,F401
from crowd import Crowd  # noqa: E402

ATTACKER = "127.0.2.1"
SLOW_START = b"GET /v1/status HTTP/1.1\r\nHost: a\r\nX-Slow: "
ASK_POLICY = b"GET /v1/policy HTTP/1.1\r\nHost: a\r\n\r\n"


def kernel_takes():
    """The most a TCP connection's send buffer holds here: an answer larger than this waits for its reader."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2])


# Answers of 1 MiB, which the kernel takes whole (its buffers grow to several MiB), and answers larger
# than it takes, whose rest is sent from the allocator as its reader takes what came before.
LARGE_POLICY = policy_of(1 << 20)
HUGE_POLICY = policy_of(kernel_takes() + (2 << 20))


def refused(c, reason):
    ctx = ssl.create_default_context(cafile=c.cert) if c.tls else None
    with urllib.request.urlopen(c.url + "/metrics", timeout=10, context=ctx) as r:
        text = r.read().decode()
    m = re.search(r'gpool_allocator_connections_refused_total\{reason="%s"\} (\d+)' % reason, text)
    return int(m.group(1)) if m else None


def closed_within(s, seconds, drip=None):
    """Whether the peer closed `s` within `seconds`, sending `drip` (a byte at a time, one every 0.5 s)
    meanwhile; the time it took."""
    t0 = time.time()
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    sent = 0
    while time.time() - t0 < seconds:
        for _ in sel.select(timeout=0.5):
            try:
                if not s.recv(65536):
                    return True, time.time() - t0
            except BlockingIOError:
                pass
            except OSError:
                return True, time.time() - t0
        if drip is not None and sent < len(drip):
            try:
                s.send(drip[sent:sent + 1])
                sent += 1
            except BlockingIOError:
                pass
            except OSError:
                return True, time.time() - t0
    return False, time.time() - t0


class CrowdsCannotTakeEveryConnection(unittest.TestCase):
    def answered_beside(self, addresses, slow):
        """How many of 20 status probes from 127.0.0.1 were answered (within 5 s each) while `slow`
        connections from `addresses` sent their requests a byte a second; and the allocator, to look at."""
        # 32 connections in all, 8 per address.
        c = Cluster(servers=0, allocator_args=["--max-connections", "32", "--max-connections-per-address", "8"])
        self.addCleanup(c.close)
        crowd = Crowd(c.port, slow=slow, addresses=addresses)
        self.addCleanup(crowd.close)
        time.sleep(2)  # the crowd connected (and was closed, and connected again)
        answered = 0
        for _ in range(20):
            with urllib.request.urlopen(c.url + "/v1/status", timeout=5) as r:
                answered += r.status == 200
            time.sleep(0.1)
        return answered, c

    def test_others_are_answered_while_one_address_holds_a_crowd_of_slow_connections(self):
        # The crowd of 48 would hold all 32 without the share of each address.
        answered, c = self.answered_beside([ATTACKER], 48)
        self.assertEqual(answered, 20)
        self.assertGreater(refused(c, "address"), 0)
        self.assertIn("--max-connections-per-address", c.log("allocator"))

    def test_others_are_answered_while_a_crowd_from_many_addresses_holds_slow_connections(self):
        # 8 addresses with their 8 each ask for all 32 and more. When each connection held a thread, they
        # kept everyone else waiting until their deadlines.
        answered, c = self.answered_beside([f"127.0.2.{i}" for i in range(1, 9)], 64)
        self.assertEqual(answered, 20)
        self.assertGreater(refused(c, "displaced"), 0)

    def test_others_are_answered_after_every_connection_was_answered_at_once_and_kept_open(self):
        # 16 long polls take every connection at once, and the allocator stops accepting; then they are
        # answered, and kept open for a next request. A new connection takes the place of one: the
        # allocator accepts again (it used to wait for one to close, and none did).
        c = Cluster(ttl="30s", allocator_args=["--max-connections", "16", "--max-connections-per-address", "4"])
        self.addCleanup(c.close)
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})  # granted, and stays so: its polls wait
        for i in range(16):
            s = socket.create_connection(("127.0.0.1", c.port), source_address=(f"127.0.2.{i % 4 + 1}", 0))
            self.addCleanup(s.close)
            s.sendall(f"GET /v1/leases/{lease['id']}?wait_ms=2000 HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        time.sleep(3)  # answered, and kept open
        for _ in range(3):
            with urllib.request.urlopen(c.url + "/v1/status", timeout=5) as r:
                self.assertEqual(r.status, 200)

    def test_a_kept_alive_connection_that_began_its_next_request_gives_way_after_its_idle_ones(self):
        # A client's 8 connections were answered and wait, kept alive; the oldest begins its next request.
        # With every connection held, a newcomer takes the place of one of this client's (it holds as many
        # as the other, and the oldest): an idle one, not the one whose request is on its way (which was
        # displaced as idle, by the time it was answered last, and its request lost).
        c = Cluster(servers=0, allocator_args=["--max-connections", "16", "--max-connections-per-address", "8"])
        self.addCleanup(c.close)

        def connect(address):
            s = socket.create_connection(("127.0.0.1", c.port), timeout=10, source_address=(address, 0))
            self.addCleanup(s.close)
            return s

        mine = []
        for _ in range(8):
            s = connect("127.0.2.1")
            self.assertIn(b" 200 ", status_of(s, b"GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n"))
            mine.append(s)
            time.sleep(0.05)  # each waits from a later time
        mine[0].sendall(b"GET /v1/status HTTP/1.1\r\n")  # the oldest begins its next request
        for _ in range(8):  # every connection held: these wait for their requests
            connect("127.0.2.2")
        time.sleep(0.5)
        self.assertIn(b" 200 ", status_of(connect("127.0.2.3"), b"GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n"))
        self.assertIn(b" 200 ", status_of(mine[0], b"Host: a\r\n\r\n"), "the request on its way was lost")

    def test_others_are_answered_while_a_crowd_from_many_addresses_reads_its_answers_slowly(self):
        # 8 addresses with their 2 each ask for a policy larger than the kernel takes, and read it at
        # 512 KiB a second (12 s for the whole), holding all 16 connections. When an answer was written on
        # a thread, the crowd's connections could not give way to a newcomer's while they took their
        # answers: none was displaced, and a probe waited for a write to fail (5 s without progress) or
        # end. (A crowd larger than the connections would displace its own, and reopen them, for ever:
        # the allocator would make its answers over and over, a request rate this test is not about.)
        c = Cluster(servers=0, policy=HUGE_POLICY,
                    allocator_args=["--max-connections", "16", "--max-connections-per-address", "4"])
        self.addCleanup(c.close)
        crowd = Crowd(c.port, deaf=16, deaf_request=ASK_POLICY, deaf_reads=512 << 10,
                      addresses=[f"127.0.2.{i}" for i in range(1, 9)])
        self.addCleanup(crowd.close)
        time.sleep(2)
        for _ in range(10):
            with urllib.request.urlopen(c.url + "/v1/status", timeout=5) as r:
                self.assertEqual(r.status, 200)
            time.sleep(0.1)
        self.assertGreater(refused(c, "displaced"), 0)
        self.assertGreater(crowd.cut_off, 0, "no connection of the crowd was closed to make room")


def status_of(s, data):
    """Sends `data` on `s` and reads one answer whole; its status line (b"" when the allocator closed `s`)."""
    s.sendall(data)
    f = s.makefile("rb")
    try:
        return read_answer(f)[0]
    except ConnectionResetError:
        return b""
    finally:
        f.close()


def exchange(port, data):
    """Sends `data` to the allocator; returns all it answers until it closes (a read waits 10 s at most)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
        return got
    finally:
        s.close()


# Another user runs the system's Python: the one running this test may be in root's home (pyenv).
SYSTEM_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
LOCAL_CROWD = """
import socket, sys, time
sys.path.insert(0, sys.argv[1])
from crowd import Crowd
def local():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[2])
    return s
crowd = Crowd(None, slow=int(sys.argv[3]), connect=local)
sys.stdin.read()  # until the test ends
crowd.close()
"""


class LocalUsersCannotTakeEveryLocalConnection(unittest.TestCase):
    def whoami_beside_crowds(self, uids, slow):
        """Runs `gpool whoami` as nobody 5 times over the local socket while each of `uids` holds `slow` slow
        connections to it (a process of its own, as that user); returns the allocator."""
        c = Cluster(servers=0)
        self.addCleanup(c.close)
        for uid in uids:
            p = subprocess.Popen([SYSTEM_PYTHON, "-c", LOCAL_CROWD, os.path.dirname(os.path.abspath(__file__)), c.socket,
                                  str(slow)], stdin=subprocess.PIPE, preexec_fn=as_user(uid, uid))
            self.addCleanup(p.wait, 30)
            self.addCleanup(p.stdin.close)
        time.sleep(3)
        for _ in range(5):
            r = subprocess.run([GPOOL, "whoami"], env=dict(os.environ, GPOOL_ALLOCATOR="unix:" + c.socket),
                               preexec_fn=as_user(NOBODY, NOBODY), capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("user nobody", r.stdout)
        return c

    def test_another_user_is_answered_while_one_holds_a_crowd_of_slow_local_connections(self):
        c = self.whoami_beside_crowds([0], 300)  # more than the 256 local connections held at once
        self.assertGreater(refused(c, "address"), 0)
        self.assertIn("a local user's share", c.log("allocator"))

    def test_another_user_is_answered_while_many_hold_crowds_of_slow_local_connections(self):
        # 6 users with their share of 64 each ask for all 256 and more. When each local connection held a
        # thread, they kept everyone else out.
        c = self.whoami_beside_crowds(range(61001, 61007), 64)
        self.assertGreater(refused(c, "displaced"), 0)


class RequestDeadline(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(servers=0)
        cls.tls = Cluster(servers=0, tls=True)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.tls.close()

    def test_a_request_sent_a_byte_a_second_is_cut_off_at_its_deadline(self):
        before = refused(self.c, "slow")
        s = socket.create_connection(("127.0.0.1", self.c.port))
        s.sendall(SLOW_START)
        closed, took = closed_within(s, 30, drip=b"x" * 1000)
        s.close()
        self.assertTrue(closed, "a request that never ends held its connection for 30 s")
        self.assertGreaterEqual(took, 5, "cut off before its deadline")
        self.assertEqual(refused(self.c, "slow"), before + 1)

    def test_a_tls_handshake_sent_a_byte_at_a_time_is_cut_off_at_its_deadline(self):
        ctx = ssl.create_default_context(cafile=self.tls.cert)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        with self.assertRaises(ssl.SSLWantReadError):
            tls.do_handshake()
        hello = outgoing.read()
        s = socket.create_connection(("127.0.0.1", self.tls.port))
        closed, _ = closed_within(s, 30, drip=hello[:-1])  # never the whole ClientHello
        s.close()
        self.assertTrue(closed, "a handshake that never ends held its connection for 30 s")

    def test_a_client_that_expects_100_continue_is_told_to_send_its_body(self):
        s = socket.create_connection(("127.0.0.1", self.c.port), timeout=10)
        try:
            s.sendall(b"PUT /v1/servers/x/key HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
                      b"Content-Length: 3\r\nConnection: close\r\n\r\n")
            self.assertTrue(s.recv(25).startswith(b"HTTP/1.1 100 Continue\r\n"))
            s.sendall(b"abc")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        finally:
            s.close()
        self.assertIn(b"HTTP/1.1 401 ", got)  # the request itself was read and answered (it is not signed)

    def test_a_body_over_1_mib_is_refused_from_its_head(self):
        got = exchange(self.c.port, b"PUT /v1/servers/x/key HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n")
        self.assertTrue(got.startswith(b"HTTP/1.1 413 "), got)
        self.assertIn(b"at most 1 MiB", got)

    def test_requests_sent_together_are_each_answered(self):
        got = exchange(self.c.port, b"GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n"
                                    b"GET /v1/policy HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        self.assertEqual(got.count(b"HTTP/1.1 200 OK"), 2, got[:300])
        self.assertIn(b"application/toml", got)  # the second answer is the policy

    def test_a_connection_its_client_closed_leaves_the_clients_share_at_once(self):
        # A client that closes with a TLS record unread resets the connection; what the allocator sent
        # last then stays counted as not taken. Such connections were kept 30 s, for their answers to be
        # taken, and the 17th of these from one address was refused.
        c = Cluster(servers=0, tls=True, allocator_args=["--max-connections", "64", "--max-connections-per-address", "16"])
        self.addCleanup(c.close)
        ctx = ssl.create_default_context(cafile=c.cert)
        for _ in range(64):
            conn = http.client.HTTPSConnection("127.0.0.1", c.port, timeout=10, context=ctx)
            conn.request("GET", "/v1/status")
            self.assertEqual(conn.getresponse().status, 200)
            conn.close()
        self.assertEqual(refused(c, "address"), 0)

    def test_keep_alive_connections_serve_several_requests(self):
        for c, conn in ((self.c, http.client.HTTPConnection("127.0.0.1", self.c.port, timeout=10)),
                        (self.tls, http.client.HTTPSConnection("127.0.0.1", self.tls.port, timeout=10,
                                                               context=ssl.create_default_context(cafile=self.tls.cert)))):
            with self.subTest(tls=c.tls):
                for path in ("/v1/status", "/v1/policy", "/v1/status"):
                    conn.request("GET", path)
                    r = conn.getresponse()
                    body = r.read()
                    self.assertEqual(r.status, 200, body)
                self.assertIsNotNone(conn.sock, "the connection was closed between requests")
                conn.close()


class LargeAnswers(unittest.TestCase):
    """Answers larger than a socket takes at once: the allocator sends the rest as the reader takes it."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(servers=0, policy=HUGE_POLICY)
        cls.tls = Cluster(servers=0, policy=HUGE_POLICY, tls=True)
        cls.taken_whole = Cluster(servers=0, policy=LARGE_POLICY)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.tls.close()
        cls.taken_whole.close()

    def connections(self, c, count):
        if not c.tls:
            return [http.client.HTTPConnection("127.0.0.1", c.port, timeout=10) for _ in range(count)]
        ctx = ssl.create_default_context(cafile=c.cert)
        return [http.client.HTTPSConnection("127.0.0.1", c.port, timeout=10, context=ctx) for _ in range(count)]

    def test_slow_readers_are_given_their_whole_answers_and_then_the_next(self):
        expected = HUGE_POLICY.format(ttl="1s").encode()
        for c in (self.c, self.tls):
            with self.subTest(tls=c.tls):
                conns = self.connections(c, 3)
                for conn in conns:
                    conn.request("GET", "/v1/policy")
                time.sleep(2)  # every answer waits, unread
                for turn in range(2):  # the same connections, kept alive: a next answer after a late one
                    for conn in conns:
                        r = conn.getresponse()
                        self.assertEqual((r.status, r.read()), (200, expected), f"answer {turn + 1}")
                        conn.request("GET", "/v1/status" if turn else "/v1/policy")
                for conn in conns:
                    self.assertEqual(conn.getresponse().status, 200)
                    conn.close()

    def test_past_the_budget_a_client_that_does_not_read_loses_its_own_answers(self):
        # 16 MiB for answers not read yet. A crowd's 4 connections from one address each ask for the 6 MiB
        # policy and do not read it; then a newcomer asks for it too, and reads it a second late.
        c = Cluster(servers=0, policy=HUGE_POLICY, allocator_args=["--max-unread-answers", "16"])
        self.addCleanup(c.close)
        hangups = select.poll()
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", c.port), source_address=(ATTACKER, 0))
            self.addCleanup(s.close)
            s.sendall(ASK_POLICY)
            hangups.register(s, 0)
            time.sleep(0.2)
        newcomer = self.connections(c, 1)[0]
        newcomer.request("GET", "/v1/policy")
        time.sleep(1)
        r = newcomer.getresponse()
        self.assertEqual((r.status, r.read()), (200, HUGE_POLICY.format(ttl="1s").encode()))
        reset = len(hangups.poll(0))
        self.assertGreaterEqual(reset, 2, "the crowd's answers were all held")
        self.assertLess(reset, 4, "more of the crowd's answers were dropped than the budget asks")
        self.assertEqual(refused(c, "unread"), reset)

    def test_an_answer_being_sent_when_the_allocator_stops_is_given_whole(self):
        c = Cluster(servers=0, policy=HUGE_POLICY)
        self.addCleanup(c.close)
        conn = self.connections(c, 1)[0]
        conn.request("GET", "/v1/policy")
        time.sleep(1)  # the answer's rest waits for the reader
        c.allocator.terminate()
        time.sleep(1)  # it has stopped everything else meanwhile
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, HUGE_POLICY.format(ttl="1s").encode()))
        self.assertEqual(c.allocator.wait(10), 0)

    def test_answers_not_taken_within_30_s_are_cut_off(self):
        # One whose rest the allocator holds, and one the kernel took whole: neither is left to the kernel
        # to send after the close, for minutes, to a client that does not read. Each is reset.
        cut = [(c, refused(c, "slow")) for c in (self.c, self.taken_whole)]
        hangups = select.poll()
        for c, _ in cut:
            s = socket.create_connection(("127.0.0.1", c.port))
            self.addCleanup(s.close)
            s.sendall(ASK_POLICY)
            hangups.register(s, 0)
        t0 = time.time()
        reset = set()
        while len(reset) < 2 and time.time() - t0 < 45:
            reset |= {fd for fd, _ in hangups.poll(1000)}
        self.assertEqual(len(reset), 2, "an answer no one reads held its connection for 45 s")
        self.assertGreaterEqual(time.time() - t0, 25, "cut off before its deadline")
        for c, before in cut:
            self.assertEqual(refused(c, "slow"), before + 1)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
