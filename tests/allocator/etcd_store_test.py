#!/usr/bin/env python3
"""The allocator's state in etcd (issue 16, first part): a real three-member etcd cluster on loopback, a
real gpool-allocator with --store etcd://..., a sim gpool-server and real `gpool run` launchers. A lease
granted survives the allocator's SIGKILL and restart (its state is in etcd, not on the allocator's host);
the allocator keeps serving when the etcd member it talked to is killed.
usage: etcd_store_test.py BUILD_DIR [unittest args]"""
import os
import signal
import subprocess
import sys
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


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
