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
from cluster import BUILD, GIB, KERNELS, Cluster, setUpModule, tearDownModule  # noqa: F401,E402

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


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
