#!/usr/bin/env python3
"""A lease's compute share, end to end: a real allocator, a sim gpool-server, and `gpool run -p F` of a
program whose processes launch kernels that keep the device busy (tests/cuda_programs/compute_share.cu).
Its fraction is its share of the device's time, across all its processes together.
usage: compute_share_test.py BUILD_DIR [unittest args]"""
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, GIB, KERNELS, Cluster, setUpModule, tearDownModule, wait_for  # noqa: F401,E402

PROGRAM = os.path.join(BUILD, "tests", "cuda_compute_share")


class ComputeShares(unittest.TestCase):
    def setUp(self):
        # --compute-audit 0.5: a lease more than half a second of the device's time past its share is ended
        # (gpool-server reads what the driver counts: server/src/compute_audit.h). Those kept to their share by
        # their workers' pacing never come near it.
        self.cluster = Cluster(servers=1, ttl="1s", memory=GIB, server_args=["--sim-kernels", KERNELS, "--compute-audit", "0.5"])

    def tearDown(self):
        self.cluster.close()

    def run_program(self, fraction, *args):
        p = self.cluster.gpool("run", "-p", fraction, "--", PROGRAM, *args)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, out + err + self.cluster.log("sim0"))
        return out, err

    def test_the_processes_of_a_quarter_lease_together_keep_the_device_busy_a_quarter_of_the_time(self):
        out, err = self.run_program("0.25", "2", "1000", "0.25", "2")  # two processes, checked against 0.25 together
        self.assertIn("ALL PASSED", out)
        print(out.strip(), file=sys.stderr)
        self.assertNotIn("--compute-audit", self.cluster.log("sim0"))  # at its share: never named, nor ended
        log = self.cluster.log("sim0")
        paced = re.findall(r"compute share 0\.25: the client's kernels ran ([\d.]+) s on the device; its launches waited ([\d.]+) s", log)
        self.assertEqual(len(paced), 2, log)  # each worker says what it enforced
        self.assertTrue(all(float(waited) > 0 for _, waited in paced), paced)
        # gpool run says so at the end, from what the server last reported to the allocator.
        said = re.search(r"gpool: lease L[0-9a-f]+: in \S+ its kernels ran ([\d.]+) s on the GPU, and its processes' launches waited "
                         r"([\d.]+) s in all for its 0\.25 share of the GPU's time \(as its servers last reported\); with a larger -p it would wait less", err)
        self.assertIsNotNone(said, err)
        print(said.group(0), file=sys.stderr)
        self.assertGreater(float(said.group(2)), 0)

    def test_one_kernel_longer_than_the_compute_audit_allows_is_ended(self):
        # A quarter of the GPU, and kernels of 2 s: the first keeps the device for 1.5 s past the lease's share
        # (its worker can only make it wait that off afterwards), more than --compute-audit's 0.5 s.
        p = self.cluster.gpool("run", "-p", "0.25", "--", PROGRAM, "30", "2000000")
        out, err = p.communicate(timeout=120)
        log = self.cluster.log("sim0")
        self.assertNotEqual(p.returncode, 0, out + err)
        self.assertRegex(log, r"lease L[0-9a-f]+: its processes took 1\.\d s of device 0's time past its share of 0\.25, as the "
                              r"driver counts it, more than the 0\.5 s --compute-audit allows")
        # The program is told why: its worker's last frame (gpool-server's SIGTERM carried the reason).
        self.assertRegex(err, r"gpool: error: lost the connection to gpool-server at \S+ \(the worker ended the connection: "
                              r"gpool-server ended it: its lease's processes \(a client without a lease: its own\) kept the GPU busy "
                              r"further past their share of its time than --compute-audit allows")
        print(err.strip()[-600:], file=sys.stderr)

    def test_a_whole_gpu_is_not_paced(self):
        out, err = self.run_program("1", "1", "1000")  # (its share, about 0.95 here, is printed, not checked: no timed assertions)
        print(out.strip(), file=sys.stderr)
        self.assertRegex(out, r"\d+ kernels of 1000 us")
        # (the worker's last line: what it said before is in the server's log by then, relayed in order)
        self.assertTrue(wait_for(lambda: "module images:" in self.cluster.log("sim0"), timeout=10), self.cluster.log("sim0"))
        self.assertNotIn("compute share", self.cluster.log("sim0"))
        self.assertNotIn("waited", err)  # a whole GPU is not held back


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[2:], verbosity=2)
