#!/usr/bin/env python3
"""What gpool measures itself (issue 15): gpool-server counts the kernels each lease's workers launch and
reports them with its heartbeats; the allocator measures each job kind's launch rate per GPU type from
them, for kinds whose jobs report no progress. A real allocator, a sim gpool-server and `gpool run --kind`
of a CUDA program that launches kernels for three seconds (tests/cuda_programs/launch_loop.cu).
usage: launch_rate_test.py BUILD_DIR [unittest args]"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, GIB, KERNELS, POLICY, Cluster, setUpModule, tearDownModule  # noqa: F401,E402

PROGRAM = os.path.join(BUILD, "tests", "cuda_launch_loop")


class LaunchRate(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(servers=1, ttl="1s", memory=GIB, server_args=["--sim-kernels", KERNELS])

    def tearDown(self):
        self.cluster.close()

    def test_the_kernels_a_job_launches_become_its_kinds_launch_rate(self):
        c = self.cluster
        p = c.gpool("run", "--kind", "looper", "--", PROGRAM, "3")
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, out + err)
        launched = int(re.search(r"PASSED: (\d+) launches", out).group(1))
        status = c.status()
        rate = status["measured_launch_rate"]["looper"]["sim"]
        print(f"{launched} launches in 3 s; measured {rate}", file=sys.stderr)
        self.assertGreaterEqual(rate["samples"], 2, status["measured_launch_rate"])
        # Measured between heartbeats while it ran: about what it launched over its three seconds.
        self.assertGreater(rate["per_second"], launched / 3 / 4)
        self.assertLess(rate["per_second"], launched / 3 * 4)
        self.assertNotIn("looper", status["measured_throughput"])  # it reported no progress of its own


class IdleReclaim(unittest.TestCase):
    """A pool's idle_timeout, by what the servers count: a lease on whose GPU no kernel runs is reclaimed,
    one whose program launches kernels is not."""

    def setUp(self):
        policy = POLICY.replace("fractions = [1.0, 0.5, 0.25]", 'fractions = [1.0, 0.5, 0.25]\nidle_timeout = "2s"')
        self.cluster = Cluster(servers=1, ttl="1s", memory=GIB, server_args=["--sim-kernels", KERNELS], policy=policy)

    def tearDown(self):
        self.cluster.close()

    def test_a_lease_that_runs_no_kernel_is_reclaimed_and_one_that_launches_kernels_is_not(self):
        c = self.cluster
        busy = c.gpool("run", "-p", "0.5", "--", PROGRAM, "5")  # launches kernels for 5 s, past the timeout
        idle = c.gpool("run", "-p", "0.5", "--", "sleep", "7")  # holds its lease and runs nothing
        out, err = busy.communicate(timeout=120)
        self.assertEqual(busy.returncode, 0, out + err)
        self.assertRegex(out, r"PASSED: \d+ launches")
        _, idle_err = idle.communicate(timeout=60)
        leases = re.findall(r"gpool: lease (\S+): ", err + idle_err)
        ended = {i: c.lease(i) for i in leases}
        busy_id = re.search(r"gpool: lease (\S+): ", err).group(1)
        idle_id = re.search(r"gpool: lease (\S+): ", idle_err).group(1)
        self.assertEqual(ended[busy_id]["end_reason"], "released")
        self.assertEqual(ended[idle_id]["end_reason"], "reclaimed: no kernel ran on its GPUs for 2s (pool 'default' idle_timeout)")
        self.assertIn(f"gpool: lease {idle_id} ended: reclaimed", idle_err)
        self.assertNotIn("releasing lease", idle_err)  # (ended already: nothing more to say)
        held_s = (ended[idle_id]["ended_ms"] - ended[idle_id]["granted_ms"]) / 1000
        self.assertGreater(held_s, 1.9)
        self.assertLess(held_s, 4)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
