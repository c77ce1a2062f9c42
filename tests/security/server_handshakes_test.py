#!/usr/bin/env python3
"""What one address may hold of gpool-server's connections before their handshake (server/src/listener.cpp):
at most --max-pending-per-address; more are closed as they come, so a host opening connections that never
say hello cannot take every descriptor of a GPU host and shut out the leases' programs. Real sockets from
another loopback address, a real server (sim backend) held to 64 open files.
usage: server_handshakes_test.py BUILD_DIR [unittest args]"""
import os
import resource
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import NVML_QUERY, Cluster, setUpModule, tearDownModule  # noqa: E402,F401

ATTACKER = "127.0.2.1"


class SilentCrowd(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(NVML_QUERY), "nvml_query is built with the tests")
    def test_a_leases_program_is_served_while_one_address_holds_silent_connections(self):
        # Handshakes wait 60 s here, so a crowd accepted before the fix would hold the server's 64 files
        # for longer than the program waits.
        c = Cluster(ttl="30s", server_args=["--max-pending-per-address", "16", "--handshake-timeout", "60000"])
        crowd = []
        try:
            _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            share = lease["shares"][0]
            host, port = share["address"].rsplit(":", 1)
            server = c.servers["sim0"]
            resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (64, 64))
            for _ in range(100):
                crowd.append(socket.create_connection((host, int(port)), source_address=(ATTACKER, 0)))
            time.sleep(1)
            closed = 0
            for s in crowd:
                s.setblocking(False)
                try:
                    closed += s.recv(1) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    closed += 1
            self.assertEqual(closed, 100 - 16, "the server did not close the crowd's connections past its share")
            run = subprocess.run([NVML_QUERY], env=c.client_env(share), capture_output=True, text=True, timeout=30)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertIn("--max-pending-per-address", c.log("sim0"))
        finally:
            for s in crowd:
                s.close()
            c.close()

    @unittest.skipUnless(os.path.exists(NVML_QUERY), "nvml_query is built with the tests")
    def test_a_program_closed_for_its_hosts_share_of_handshakes_tries_again(self):
        # One handshake in progress per address: a silent connection from this host holds it, so the
        # program's connection is closed as it comes. Once the silent one goes, the program's next try gets in.
        c = Cluster(ttl="30s", server_args=["--max-pending-per-address", "1"])
        silent = None
        try:
            _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            share = lease["shares"][0]
            host, port = share["address"].rsplit(":", 1)
            silent = socket.create_connection((host, int(port)))
            time.sleep(0.5)  # accepted: it holds this address's one handshake
            program = subprocess.Popen([NVML_QUERY], env=dict(c.client_env(share), GPOOL_LOG_LEVEL="debug"),
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.time() + 20
            while "--max-pending-per-address" not in c.log("sim0") and time.time() < deadline:
                time.sleep(0.05)
            self.assertIn("--max-pending-per-address", c.log("sim0"), "the program's connection was not closed")
            silent.close()
            out, _ = program.communicate(timeout=30)
            self.assertEqual(program.returncode, 0, out)
            self.assertIn("closed the connection before it answered", out)
        finally:
            if silent:
                silent.close()
            c.close()


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
