#!/usr/bin/env python3
"""Identity and lease ownership at gpool-allocator, as an attacker tries them (issue 11): the allocator
knows who calls (MUNGE, its local socket's peer, service keys), and only a lease's owner or an admin reads
its tokens, heartbeats or releases it. usage: identity_test.py BUILD_DIR [unittest args]"""
import os
import sqlite3
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
import cluster  # noqa: E402
from cluster import GPOOL, NOBODY, POLICY, Cluster, as_user, setUpModule, tearDownModule  # noqa: E402,F401

ACCESS_POLICY = POLICY + """
[quotas.groups.ml]
gpus = 0.5

[access]
admins = ["@ops"]

[access.priorities]
high = ["@leads"]
"""

ROOT = os.geteuid() == 0


class Identity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(ttl="30s", policy=ACCESS_POLICY)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def tearDown(self):
        for lease in self.c.status()["leases"] + self.c.status()["queue"]:
            self.c.http("DELETE", "/v1/leases/" + lease["id"], signed=True)

    def run_gpool(self, *args, uid=None, env=None):
        e = dict(os.environ, GPOOL_ALLOCATOR=self.c.url, GPOOL_MUNGE_SOCKET=cluster.MUNGED.socket)
        for k in ("GPOOL_KEY_FILE", "GPOOL_SERVICE_KEY_FILE"):
            e.pop(k, None)
        e.update(env or {})
        return subprocess.run([GPOOL, *args], env=e, capture_output=True, text=True, timeout=30,
                              preexec_fn=as_user(uid, uid) if uid is not None else None)

    # --- who is calling ---------------------------------------------------------------------------------

    def test_a_request_that_proves_no_one_is_refused(self):
        status, out = self.c.try_http("POST", "/v1/leases", {"user": "alice", "p": 0.5})
        self.assertEqual(status, 401, out)
        self.assertIn("MUNGE", out["error"])
        self.assertEqual(self.c.status()["leases"], [])

    def test_gpool_run_without_munged_says_so_at_once_rather_than_retrying(self):
        r = self.run_gpool("run", "--", "true", env={"GPOOL_MUNGE_SOCKET": "/nonexistent/munge.socket"})
        self.assertEqual(r.returncode, 5, r.stderr)  # (it retried until killed before)
        self.assertIn("cannot get a MUNGE credential", r.stderr)
        self.assertIn("start munged on this host", r.stderr)
        self.assertNotIn("retrying", r.stderr)

    def test_the_user_is_who_the_credential_says_not_who_the_body_says(self):
        status, out = self.c.try_http("POST", "/v1/leases", {"user": "alice", "p": 0.5}, headers=self.c.bearer("mallory"))
        self.assertEqual(status, 403, out)
        self.assertIn("you are 'mallory'", out["error"])
        status, out = self.c.try_http("POST", "/v1/leases", {"p": 0.5}, headers=self.c.bearer("mallory"))
        self.assertEqual(status, 201, out)
        self.assertEqual(out["request"]["user"], "mallory")

    @unittest.skipUnless(ROOT, "runs a client as another user, which needs root")
    def test_munge_and_the_local_socket_name_the_real_user(self):
        r = self.run_gpool("whoami", uid=NOBODY)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("user nobody", r.stdout)
        self.assertIn("known by munge", r.stdout)
        r = self.run_gpool("whoami", uid=NOBODY, env={"GPOOL_ALLOCATOR": "unix:" + self.c.socket})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("user nobody", r.stdout)
        self.assertIn("known by peer", r.stdout)
        for where in (self.c.url, "unix:" + self.c.socket):  # nobody cannot claim to be root, either way
            r = self.run_gpool("run", "--user", "root", "-p", "0.5", "--wait", "0", "--", "true", uid=NOBODY,
                               env={"GPOOL_ALLOCATOR": where})
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("you are 'nobody'", r.stderr)

    def test_a_munge_credential_serves_one_request_only(self):
        def credential(payload):
            return subprocess.run(["munge", "-S", cluster.MUNGED.socket, "-s", payload], capture_output=True, text=True,
                                  check=True).stdout.strip()
        import hashlib
        body = b'{"p": 0.5}'
        made_for = "gpool1 POST /v1/leases " + hashlib.sha256(body).hexdigest()
        cred = credential(made_for)
        status, out = self.c.try_http("POST", "/v1/leases", body, headers={"Authorization": "MUNGE " + cred})
        self.assertEqual(status, 201, out)
        status, out = self.c.try_http("POST", "/v1/leases", body, headers={"Authorization": "MUNGE " + cred})
        self.assertEqual(status, 401, out)  # captured and sent again
        self.assertIn("Replayed", out["error"])
        other = credential(made_for)
        status, out = self.c.try_http("POST", "/v1/leases", b'{"p": 1.0, "n": 1}', headers={"Authorization": "MUNGE " + other})
        self.assertEqual(status, 401, out)  # a credential made for another body
        self.assertIn("made for another request", out["error"])

    def test_a_group_is_one_the_user_is_in_and_omitting_it_escapes_no_quota(self):
        status, out = self.c.try_http("POST", "/v1/leases", {"p": 0.25, "group": "ml"}, headers=self.c.bearer("mallory"))
        self.assertEqual(status, 403, out)
        self.assertIn("not in group 'ml'", out["error"])
        carol = self.c.bearer("carol", groups=["ml"])
        status, first = self.c.try_http("POST", "/v1/leases", {"p": 0.5}, headers=carol)
        self.assertEqual((status, first["request"]["group"]), (201, "ml"), first)  # charged to her primary group
        status, second = self.c.try_http("POST", "/v1/leases", {"p": 0.25, "wait": 60}, headers=carol)
        self.assertEqual(status, 202, second)
        self.assertIn("quota: group 'ml'", second["waiting_for"])
        # dave's primary group is his own, and he is in ml too: ml's quota holds whatever group he names
        dave = self.c.bearer("dave", groups=["dave", "ml"])
        for body in ({"p": 0.25, "wait": 60}, {"p": 0.25, "wait": 60, "group": "dave"}):
            status, out = self.c.try_http("POST", "/v1/leases", body, headers=dave)
            self.assertEqual(status, 202, out)
            self.assertIn("quota: group 'ml'", out["waiting_for"])

    def test_who_may_use_a_priority_class_is_policy(self):
        status, out = self.c.try_http("POST", "/v1/leases", {"p": 0.25, "priority": "high"}, headers=self.c.bearer("mallory"))
        self.assertEqual(status, 403, out)
        self.assertIn("may not use priority class 'high'", out["error"])
        status, out = self.c.try_http("POST", "/v1/leases", {"p": 0.25, "priority": "high"},
                                      headers=self.c.bearer("lead", groups=["leads"]))
        self.assertEqual(status, 201, out)

    # --- leases belong to their owner ---------------------------------------------------------------------

    def test_only_the_owner_or_an_admin_sees_a_leases_tokens(self):
        status, lease = self.c.try_http("POST", "/v1/leases", {"p": 0.5}, headers=self.c.bearer("alice"))
        self.assertEqual(status, 201, lease)
        path = "/v1/leases/" + lease["id"]
        for who in ({}, self.c.bearer("mallory")):
            status, seen = self.c.try_http("GET", path, headers=who)
            self.assertEqual(status, 200, seen)
            self.assertNotIn("token", seen["shares"][0], who)
        self.assertTrue(all("token" not in s for l in self.c.status()["leases"] for s in l["shares"]))
        for who in ({"X-Gpool-Lease-Key": lease["lease_key"]}, self.c.bearer("alice"), self.c.bearer("boss", groups=["ops"])):
            status, seen = self.c.try_http("GET", path, headers=who)
            self.assertEqual(seen["shares"][0]["token"], lease["shares"][0]["token"], who)
        self.assertEqual(self.c.try_http("GET", path, headers={"X-Gpool-Lease-Key": "gplk1." + "0" * 64})[1]["shares"][0].get("token"), None)

    def test_others_can_neither_heartbeat_nor_release_a_lease(self):
        status, lease = self.c.try_http("POST", "/v1/leases", {"p": 0.5}, headers=self.c.bearer("alice"))
        path = "/v1/leases/" + lease["id"]
        for method, p in (("POST", path + "/heartbeat"), ("DELETE", path)):
            self.assertEqual(self.c.try_http(method, p)[0], 401)
            status, out = self.c.try_http(method, p, headers=self.c.bearer("mallory"))
            self.assertEqual(status, 403, out)
            self.assertIn("not yours", out["error"])
        self.assertEqual(self.c.http("GET", path)[1]["state"], "granted")
        self.assertEqual(self.c.try_http("POST", path + "/heartbeat", headers={"X-Gpool-Lease-Key": lease["lease_key"]})[0], 200)
        self.assertEqual(self.c.try_http("DELETE", path, headers=self.c.bearer("boss", groups=["ops"]))[0], 200)  # an admin
        self.assertEqual(self.c.http("GET", path)[1]["state"], "ended")

    def test_keys_are_kept_only_as_hashes_and_a_deleted_account_is_locked_out(self):
        headers = self.c.bearer("temp")
        status, lease = self.c.try_http("POST", "/v1/leases", {"p": 0.25}, headers=headers)
        self.assertEqual(status, 201, lease)
        db = sqlite3.connect(os.path.join(self.c.dir, "alloc.db"))
        dump = "\n".join(db.iterdump())
        db.close()
        self.assertNotIn(headers["Authorization"][7:], dump)
        self.assertNotIn(lease["lease_key"], dump)
        self.assertEqual(self.c.http("DELETE", "/v1/service-accounts/temp", signed=True)[0], 200)
        status, out = self.c.try_http("POST", "/v1/leases", {"p": 0.25}, headers=headers)
        self.assertEqual(status, 401, out)
        del self.c.accounts["temp"]

    def test_admins_are_who_the_policy_names(self):
        status, out = self.c.try_http("POST", "/v1/servers/sim0/drain", {"drain": False}, headers=self.c.bearer("mallory"))
        self.assertEqual(status, 403, out)
        self.assertIn("not an admin", out["error"])
        status, out = self.c.try_http("POST", "/v1/service-accounts", {"name": "sneaky"}, headers=self.c.bearer("mallory"))
        self.assertEqual(status, 403, out)
        status, out = self.c.try_http("POST", "/v1/servers/sim0/drain", {"drain": False}, headers=self.c.bearer("boss", groups=["ops"]))
        self.assertEqual(status, 200, out)
        r = self.run_gpool("admin", "service-account", "list", env={"GPOOL_SERVICE_KEY_FILE": self.c.account("boss")})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("mallory", r.stdout)
        self.assertNotIn("gpsa1.", r.stdout)


class Tls(unittest.TestCase):
    """The API over HTTPS: servers and clients verify the allocator's certificate."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(ttl="30s", tls=True)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_servers_and_clients_reach_the_allocator_over_tls(self):
        self.assertIn("listening on https://", self.c.log("allocator"))
        self.assertIn("registered with allocator https://", self.c.log("sim0"))  # verified against --allocator-ca
        out, err = self.c.gpool("run", "-p", "0.5", "--", "echo", "ran").communicate(timeout=30)
        self.assertEqual(out.strip(), "ran", err)

    def test_a_client_that_cannot_verify_the_certificate_sends_nothing(self):
        p = self.c.gpool("whoami", env={"GPOOL_CA_FILE": "", "SSL_CERT_FILE": "/nonexistent"})
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 5, err)
        self.assertIn("cannot reach gpool-allocator", err)
        self.assertIn("SSL", err)
        plain = self.c.gpool("status", env={"GPOOL_ALLOCATOR": self.c.url.replace("https://", "http://")})
        _, err = plain.communicate(timeout=30)
        self.assertNotEqual(plain.returncode, 0, err)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
