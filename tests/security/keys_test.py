#!/usr/bin/env python3
"""What a GPU host's files can do (issue 11): it holds the allocator's public token key and its own server
key, so it can neither mint lease tokens, nor sign admin requests, nor speak for another server.
usage: keys_test.py BUILD_DIR [unittest args]"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import GIB, NVML_QUERY, Cluster, ed25519_sign, setUpModule, tearDownModule, wait_for  # noqa: E402,F401


class HostKeys(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(servers=2, ttl="30s")

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_a_host_holds_no_secret_that_mints_tokens(self):
        with open(self.c.token_pub) as f:
            self.assertIn("PUBLIC KEY", f.read())  # all a GPU host is given to verify tokens
        _, lease = self.c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        share = lease["shares"][0]
        payload = f"{lease['id']}|{share['server']}|0|{8 * GIB}|1|{int(time.time()) + 600}".encode()
        for key in (self.c.server_key(share["server"]), self.c.server_key("sim1" if share["server"] == "sim0" else "sim0")):
            token = "gpl2." + payload.hex() + "." + ed25519_sign(key, payload).hex()
            env = self.c.client_env(share, token=token)
            run = subprocess.run([NVML_QUERY], env=env, capture_output=True, text=True, timeout=30)
            self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertTrue(wait_for(lambda: "signature does not verify" in self.c.log(share["server"]), timeout=5))
        self.c.http("DELETE", "/v1/leases/" + lease["id"])

    def test_a_server_key_signs_no_admin_request(self):
        body = b"[pools.default]\nfractions = [1.0]\n"
        headers = self.c.server_signature("sim0", "PUT", "/v1/policy", body)
        status, out = self.c.try_http("PUT", "/v1/policy", body, headers=headers)
        self.assertEqual(status, 401, out)
        data = json.dumps({"drain": True}).encode()
        status, _ = self.c.try_http("POST", "/v1/servers/sim1/drain", data,
                                    headers=self.c.server_signature("sim0", "POST", "/v1/servers/sim1/drain", data))
        self.assertEqual(status, 401)
        self.assertIn("[1.0, 0.5, 0.25]", self.c.http("GET", "/v1/policy")[1])  # unchanged

    def test_a_server_speaks_only_for_itself(self):
        path = "/v1/servers/sim1/heartbeat"
        status, out = self.c.try_http("POST", path, b"", headers=self.c.server_signature("sim0", "POST", path, b""))
        self.assertEqual(status, 403, out)
        self.assertIn("only for itself", out["error"])
        reg = json.dumps({"name": "sim1", "address": "10.0.0.66:1", "gpus": [{"index": 0, "memory": GIB}]}).encode()
        status, out = self.c.try_http("POST", "/v1/servers", reg, headers=self.c.server_signature("sim0", "POST", "/v1/servers", reg))
        self.assertEqual(status, 403, out)
        self.assertNotIn("10.0.0.66:1", [s["address"] for s in self.c.status()["servers"]])
        # sim0 claiming to be sim1 while signing with its own key
        headers = self.c.server_signature("sim1", "POST", path, b"", key=self.c.server_key("sim0"))
        status, out = self.c.try_http("POST", path, b"", headers=headers)
        self.assertEqual(status, 401, out)

    def test_a_servers_figures_are_checked_and_count_only_for_leases_it_serves(self):
        # A heartbeat's `use` (what the server measured of each lease: `gpool status` shows it) is bounded,
        # and a server cannot set the figures of a lease whose shares are on another server.
        _, lease = self.c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})
        elsewhere = "sim1" if lease["shares"][0]["server"] == "sim0" else "sim0"
        path = f"/v1/servers/{elsewhere}/heartbeat"
        good = {"memory": GIB, "device_s": 1.5, "held_s": 0}
        for use in ({lease["id"]: dict(good, memory=-1)}, {lease["id"]: dict(good, device_s=1e13)}, {lease["id"]: {"memory": 1}},
                    {lease["id"]: dict(good, held_s="1")}, {lease["id"]: dict(good, extra=1)}, [good], {"x" * 65: good}):
            body = json.dumps({"use": use}).encode()
            status, out = self.c.try_http("POST", path, body, headers=self.c.server_signature(elsewhere, "POST", path, body))
            self.assertEqual(status, 400, use)
            self.assertIn("use must map", out["error"])
        body = json.dumps({"use": {lease["id"]: good}}).encode()
        status, _ = self.c.try_http("POST", path, body, headers=self.c.server_signature(elsewhere, "POST", path, body))
        self.assertEqual(status, 200)
        mine = [x for x in self.c.status()["leases"] if x["id"] == lease["id"]][0]
        self.assertNotIn("use", mine, "another server's figures were taken for the lease")
        self.c.http("DELETE", "/v1/leases/" + lease["id"])

    def test_an_unenrolled_server_is_refused(self):
        path = "/v1/servers/stranger/heartbeat"
        key = os.path.join(self.c.dir, "stranger.pem")
        subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True, capture_output=True)
        status, out = self.c.try_http("POST", path, b"", headers=self.c.server_signature("stranger", "POST", path, b"", key=key))
        self.assertEqual(status, 401, out)
        self.assertIn("not enrolled", out["error"])
        self.assertEqual(self.c.http("DELETE", "/v1/servers/sim1/key", signed=True)[0], 200)
        path = "/v1/servers/sim1/heartbeat"
        status, out = self.c.try_http("POST", path, b"", headers=self.c.server_signature("sim1", "POST", path, b""))
        self.assertEqual(status, 401, out)  # unenrolled: refused from now on
        self.assertTrue(wait_for(lambda: "not enrolled" in self.c.log("sim1"), timeout=10), self.c.log("sim1"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
