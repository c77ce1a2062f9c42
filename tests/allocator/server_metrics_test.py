#!/usr/bin/env python3
"""gpool-server's /metrics, and the same figures in `gpool status`, end to end: a real allocator, a sim gpool-server started with --metrics, and
processes of a lease's share (a memory holder, a kernel loop paced to a quarter of the device) whose use
the server's figures must show; a forged token shows as a refusal.
usage: server_metrics_test.py BUILD_DIR [unittest args]"""
import os
import re
import subprocess
import sys
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, GIB, KERNELS, MEMCAP, Cluster, forged, setUpModule, tearDownModule, wait_for  # noqa: F401,E402

SPIN = os.path.join(BUILD, "tests", "cuda_compute_share")
MIB = 1 << 20
SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')


def scrape(where):
    """{(name, labels): value} of every sample at a port of this host or a URL; the labels as the text has
    them ("" for none)."""
    url = where if isinstance(where, str) else f"http://127.0.0.1:{where}"
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = SAMPLE.match(line)
        assert m, "not a sample line: " + line
        samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return samples


class ServerMetrics(unittest.TestCase):
    def setUp(self):
        # Port 0: the server picks one and logs it (a port chosen here could be taken by another test meanwhile).
        self.cluster = Cluster(servers=1, ttl="30s", memory=GIB, server_args=["--sim-kernels", KERNELS, "--metrics", "127.0.0.1:0"])
        self.children = []
        said = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.cluster.log("sim0"))
        self.assertIsNotNone(said, self.cluster.log("sim0"))
        self.port = int(said.group(1))

    def tearDown(self):
        for p in self.children:
            if p.poll() is None:
                p.kill()
            p.communicate()
        self.cluster.close()

    def test_a_shares_memory_device_time_and_waits_are_shown_while_it_runs(self):
        c = self.cluster
        before = scrape(self.port)
        self.assertEqual(before[("gpool_server_info", '{backend="sim"}')], 1)
        self.assertEqual(before[("gpool_server_clients", "")], 0)
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        share = lease["shares"][0]
        env = c.client_env(share)
        go = os.path.join(c.dir, "go")
        holder = subprocess.Popen([MEMCAP, "hold", str(64 * MIB), go], env=env, stdout=subprocess.PIPE, text=True)
        self.children.append(holder)
        self.assertEqual(holder.stdout.readline().split()[0], "HELD")
        spin = subprocess.run([SPIN, "1", "1000"], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(spin.returncode, 0, spin.stdout + spin.stderr)

        self.assertTrue(wait_for(lambda: scrape(self.port)[("gpool_server_clients", "")] == 1, timeout=10),
                        "the kernel loop's worker is still counted")  # (the holder's is left)
        m = scrape(self.port)
        labels = f'{{lease="{lease["id"]}",share="0",device="{share["device"]}"}}'
        self.assertEqual(m[("gpool_lease_workers", f'{{lease="{lease["id"]}"}}')], 1)
        self.assertGreater(m[("gpool_lease_kernel_launches_total", f'{{lease="{lease["id"]}"}}')], 100, "the ended worker's count")
        self.assertEqual(m[("gpool_share_fraction", labels)], 0.25)
        self.assertEqual(m[("gpool_share_memory_bytes", labels)], 64 * MIB)
        self.assertEqual(m[("gpool_share_memory_limit_bytes", labels)], share["memory"])
        busy, held = m[("gpool_share_device_seconds_total", labels)], m[("gpool_share_held_back_seconds_total", labels)]
        print(f"1 s of a kernel loop at a quarter share: {busy:.3f} s on the device, {held:.3f} s held back", file=sys.stderr)
        self.assertGreater(busy, 0.1)  # (not timed assertions: it ran, and it was paced)
        self.assertGreater(held, 0.1)

        # The server's heartbeats carry the same figures to the allocator: `gpool status` shows them.
        def use():
            found = [x for x in c.status()["leases"] if x["id"] == lease["id"]]
            return found[0].get("use", {}) if found else {}
        # (/metrics writes 15 digits: a margin for the last)
        self.assertTrue(wait_for(lambda: use().get("device_seconds", 0) >= busy - 0.001, timeout=10), use())
        self.assertEqual(use()["memory"], 64 * MIB)
        self.assertGreaterEqual(use()["held_back_seconds"], held - 0.001)
        out, _ = c.gpool("status").communicate(timeout=30)
        self.assertRegex(out, lease["id"] + r".*\n\s+uses 0\.0625 GiB; its kernels ran \d+\.\d s on the GPU and waited \d+\.\d s for its share\n")

        # And the allocator's /metrics sums them per user.
        users = scrape(c.leader)
        self.assertEqual(users[("gpool_user_gpus", '{user="u"}')], 0.25)
        self.assertEqual(users[("gpool_user_memory_bytes", '{user="u"}')], 64 * MIB)
        self.assertGreaterEqual(users[("gpool_user_device_seconds", '{user="u"}')], busy - 0.001)

        refused = subprocess.run([MEMCAP, str(GIB)], env=c.client_env(share, token=forged(share["token"])),
                                 capture_output=True, text=True, timeout=60)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("does not verify", refused.stdout + refused.stderr)
        self.assertEqual(scrape(self.port)[("gpool_server_clients_refused_total", '{reason="lease"}')],
                         m[("gpool_server_clients_refused_total", '{reason="lease"}')] + 1)

        open(go, "w").close()
        holder.communicate(timeout=30)
        self.assertTrue(wait_for(lambda: ("gpool_lease_workers", f'{{lease="{lease["id"]}"}}') not in scrape(self.port), timeout=10),
                        "the lease's figures outlived its last worker")

    def test_two_shares_of_one_lease_on_one_gpu_are_paced_apart(self):
        # `-n 2 -p 0.5` on one GPU: two devices, each with half the GPU's time of its own (the server keeps a
        # pace per share, not one per device). A kernel loop on each at once: two series, each paced.
        c = self.cluster
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "n": 2, "p": 0.5})
        first, second = lease["shares"]
        self.assertEqual((first["server"], first["device"]), (second["server"], second["device"]), "both on one GPU")
        go = os.path.join(c.dir, "go2")
        holders = []
        for share in (first, second):  # (keep each share's figures after its loop ends)
            holders.append(subprocess.Popen([MEMCAP, "hold", str(MIB), go], env=c.client_env(share), stdout=subprocess.PIPE, text=True))
            self.children.append(holders[-1])
            self.assertEqual(holders[-1].stdout.readline().split()[0], "HELD")
        loops = [subprocess.Popen([SPIN, "1", "1000"], env=c.client_env(share), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for share in (first, second)]
        self.children += loops
        for p in loops:
            out, _ = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, out)
        m = scrape(self.port)
        for n in ("0", "1"):
            labels = f'{{lease="{lease["id"]}",share="{n}",device="{first["device"]}"}}'
            busy, held = m[("gpool_share_device_seconds_total", labels)], m[("gpool_share_held_back_seconds_total", labels)]
            print(f"share {n} at 0.5, beside the other: {busy:.3f} s on the device, {held:.3f} s held back", file=sys.stderr)
            self.assertGreater(busy, 0.1)
            self.assertEqual(m[("gpool_share_memory_bytes", labels)], MIB)
        open(go, "w").close()
        for p in holders:
            p.communicate(timeout=30)

    def test_a_port_in_use_stops_the_server_naming_it(self):
        taken = f"127.0.0.1:{self.port}"  # the cluster's server holds it
        run = subprocess.run([os.path.join(BUILD, "server", "gpool-server"), "--backend", "sim", "--listen", "127.0.0.1:0",
                              "--metrics", taken], capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertIn(f"cannot serve --metrics on {taken}", run.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[2:], verbosity=2)
