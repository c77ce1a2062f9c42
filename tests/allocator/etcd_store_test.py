#!/usr/bin/env python3
"""The allocator's state in etcd (issue 16, first part): a real three-member etcd cluster on loopback, a
real gpool-allocator with --store etcd://..., a sim gpool-server and real `gpool run` launchers. A lease
granted survives the allocator's SIGKILL and restart (its state is in etcd, not on the allocator's host);
the allocator keeps serving when the etcd member it talked to is killed.
usage: etcd_store_test.py BUILD_DIR [unittest args]"""
import base64
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ALLOCATOR, Cluster, setUpModule, tearDownModule, wait_for  # noqa: F401,E402
from etcd_cluster import EtcdCluster  # noqa: E402


class EtcdStore(unittest.TestCase):
    def setUp(self):
        self.etcd = EtcdCluster(3)
        self.cluster = Cluster(servers=1, ttl="30s", store=self.etcd.url())
        self.children = []

    def tearDown(self):
        for p in self.children:
            if p.poll() is None:
                p.kill()
            p.communicate()
        self.cluster.close()
        self.etcd.close()

    def granted(self):
        return [lease for lease in self.cluster.status()["leases"] if lease["state"] == "granted"]

    def test_a_granted_lease_outlives_the_allocator(self):
        c = self.cluster
        p = c.gpool("run", "--", "sh", "-c", f"until [ -f {c.dir}/go ]; do sleep 0.05; done")
        self.children.append(p)
        self.assertTrue(wait_for(lambda: len(self.granted()) == 1), c.log("allocator"))
        lease = self.granted()[0]["id"]
        c.allocator.send_signal(signal.SIGKILL)
        c.allocator.wait()
        c.start_allocator()  # a fresh process: what it knows, it read from etcd
        self.assertEqual([x["id"] for x in self.granted()], [lease])
        self.assertIn("1 live leases from etcd://", c.log("allocator"))
        open(f"{c.dir}/go", "w").close()
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)  # its heartbeats and release reached the new allocator
        self.assertEqual(c.lease(lease)["state"], "ended")

    def test_the_allocator_serves_on_when_an_etcd_member_dies(self):
        c = self.cluster
        self.etcd.kill(self.etcd.names[0])  # the first in --store's list: the one the allocator talked to
        for i in range(3):
            p = c.gpool("run", "--", "true")
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
        c.allocator.send_signal(signal.SIGKILL)
        c.allocator.wait()
        c.start_allocator()
        self.assertEqual(self.granted(), [])  # the three came and went, in etcd too


class EtcdOverTls(unittest.TestCase):
    """etcd that takes only HTTPS clients with a certificate it trusts (--client-cert-auth)."""

    def setUp(self):
        self.etcd = EtcdCluster(1, tls=True)

    def tearDown(self):
        self.etcd.close()

    def test_the_allocator_reaches_it_with_its_ca_and_client_certificate(self):
        e = self.etcd
        c = Cluster(servers=1, ttl="30s", store=e.url(),
                    allocator_args=["--etcd-ca", e.ca, "--etcd-cert", e.client_cert, "--etcd-key", e.client_key])
        try:
            p = c.gpool("run", "--", "true")
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
        finally:
            c.close()

    def test_without_its_client_certificate_the_allocator_does_not_start(self):
        r = subprocess.run([ALLOCATOR, "--listen", "127.0.0.1:0", "--db", os.path.join(self.etcd.dir, "x.db"), "--store",
                            self.etcd.url(), "--etcd-ca", self.etcd.ca], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("no etcd member answered", r.stderr)


class EtcdWithAuthentication(unittest.TestCase):
    """etcd with its authentication on: only known users, each within its role's keys. Its tokens lapse
    after 2 s unused (--auth-token-ttl), and all lapse when authentication is turned off and on again."""
    USER, PASSWORD = "gpool-allocator", "s3cret: with spaces"

    def setUp(self):
        self.etcd = EtcdCluster(1, extra_args=["--auth-token-ttl", "2"])
        self.root_password = self.etcd.enable_auth(self.USER, self.PASSWORD)
        self.password_file = self.write_password("password", self.PASSWORD)

    def tearDown(self):
        self.etcd.close()

    def root(self):
        """A fresh token of etcd's root user (tokens lapse after 2 s here)."""
        return self.etcd.token("root", self.root_password)

    def write_password(self, name, password):
        path = os.path.join(self.etcd.dir, name)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(password + "\n")
        return path

    def start(self, user, password_file):
        return subprocess.run([ALLOCATOR, "--listen", "127.0.0.1:0", "--db", os.path.join(self.etcd.dir, "x.db"), "--store",
                               self.etcd.url(), "--etcd-user", user, "--etcd-password-file", password_file],
                              capture_output=True, text=True, timeout=30)

    def run_true(self, c):
        p = c.gpool("run", "--", "true")
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err + c.log("allocator"))

    def test_replicas_act_as_their_user_and_ask_again_when_etcd_forgets_their_tokens(self):
        c = Cluster(servers=1, ttl="30s", store=self.etcd.url(), replicas=2,
                    allocator_args=["--etcd-user", self.USER, "--etcd-password-file", self.password_file])
        try:
            self.run_true(c)
            time.sleep(3)  # longer than the tokens live unused
            self.run_true(c)
            for path, token in (("/v3/auth/disable", self.root()), ("/v3/auth/enable", None)):  # every token is forgotten
                status, answer = self.etcd.call(path, {}, token)
                self.assertEqual(status, 200, answer)
            time.sleep(1.5)  # the leader's renewals come every second: one at least meets the new regime
            self.run_true(c)
            self.assertNotIn("no longer leads", c.log("allocator"))  # its renewals got a new token, too
            self.assertEqual(c.leading(), 0)
            key = base64.b64encode(b"/gpool/leader").decode()
            status, answer = self.etcd.call("/v3/kv/range", {"key": key}, self.root())
            self.assertEqual(len(answer.get("kvs", [])), 1, answer)  # it wrote as its user
            c.allocator.send_signal(signal.SIGKILL)  # the standby, watching as its user, takes over
            c.allocator.wait()
            self.assertTrue(wait_for(lambda: c.leading() == 1, timeout=15), c.log("allocator1"))
            self.run_true(c)
        finally:
            c.close()

    def test_without_a_user_the_allocator_does_not_start_and_says_which_flags_it_needs(self):
        r = subprocess.run([ALLOCATOR, "--listen", "127.0.0.1:0", "--db", os.path.join(self.etcd.dir, "x.db"), "--store",
                            self.etcd.url()], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("give the allocator --etcd-user and --etcd-password-file", r.stderr)

    def test_a_wrong_password_is_refused(self):
        r = self.start(self.USER, self.write_password("wrong", "not it"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"refused user {self.USER}", r.stderr)
        self.assertIn("invalid user ID or password", r.stderr)

    def test_a_user_whose_role_lacks_the_gpool_prefix_is_refused_and_told_why(self):
        status, answer = self.etcd.call("/v3/auth/user/add", {"name": "nobody", "password": "pw"}, self.root())
        self.assertEqual(status, 200, answer)
        r = self.start("nobody", self.write_password("nobody", "pw"))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("permission denied", r.stderr)
        self.assertIn("may read and write the /gpool/ prefix", r.stderr)

    def test_a_password_others_may_read_is_named_in_a_warning(self):
        os.chmod(self.password_file, 0o644)
        c = Cluster(servers=1, ttl="30s", store=self.etcd.url(),
                    allocator_args=["--etcd-user", self.USER, "--etcd-password-file", self.password_file])
        try:
            self.run_true(c)
            self.assertIn(f"may be read by others: chmod 600 {self.password_file}", c.log("allocator"))
        finally:
            c.close()


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
