#!/usr/bin/env python3
"""Progress reports end to end (issue 15): a command run by `gpool run --kind` writes how far it got to
GPOOL_PROGRESS_FILE; gpool's heartbeats carry it to the allocator, which measures the kind's throughput on
the GPU's type (shown in /v1/status). A heartbeat with a progress that is not a count is refused.
usage: progress_flow_test.py BUILD_DIR [unittest args]"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, setUpModule, tearDownModule  # noqa: F401,E402

# 20 steps a second for about 3 s, each written as the count so far (renamed into place, as a job would).
JOB = ('i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo $i > "$GPOOL_PROGRESS_FILE.tmp"; '
       'mv "$GPOOL_PROGRESS_FILE.tmp" "$GPOOL_PROGRESS_FILE"; sleep 0.05; done')


class ProgressFlow(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(servers=1, ttl="1s")

    def tearDown(self):
        self.cluster.close()

    def test_progress_written_by_the_command_becomes_its_kinds_throughput(self):
        c = self.cluster
        p = c.gpool("run", "--kind", "counter", "--", "sh", "-c", JOB, user="ann")
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        measured = c.status()["measured_throughput"]["counter"]["sim"]
        self.assertGreaterEqual(measured["samples"], 2)
        # 20 steps a second at most (sleep 0.05 plus the loop's own time), and not far below it.
        self.assertGreater(measured["per_second"], 4)
        self.assertLess(measured["per_second"], 21)

    def test_a_progress_that_is_not_a_count_is_refused(self):
        c = self.cluster
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        path = f"/v1/leases/{lease['id']}/heartbeat"
        for bad in (-1, "12", 1e300, None):
            status, out = c.http("POST", path, {"progress": bad})
            self.assertEqual(status, 400, out)
            self.assertIn("progress must be a number from 0 to 1e15", out["error"])
        status, out = c.http("POST", path, {"progress": 5})
        self.assertEqual((status, out["state"]), (200, "granted"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
