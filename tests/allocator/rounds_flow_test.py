#!/usr/bin/env python3
"""Rounds end to end (issue 15): a real gpool-allocator whose pool divides time by max-min fairness in
10-second rounds, a real gpool-server (sim backend) with one GPU, and two real `gpool run --requeue`
launchers whose jobs checkpoint. The GPU takes turns between them: each is stopped with notice at a round,
runs again later from its checkpoint, and both finish.
usage: rounds_flow_test.py BUILD_DIR [unittest args]"""
import os
import re
import signal
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, setUpModule, tearDownModule, wait_for  # noqa: F401,E402

POLICY = """
[settings]
lease_ttl = "{ttl}"
server_timeout = "1s"
preemption_grace = "1s"

[pools.default]
order = "max-min"
round = "10s"
"""

STEPS = 50  # at 0.2 s a step: 10 s of work, longer than a round

# A job that does STEPS steps, keeping how far it got in its checkpoint file; on SIGTERM (the round's
# notice) it stops at once with status 7; run again, it goes on from its checkpoint.
JOB = ('f={d}/{name}.steps; n=$(cat $f 2>/dev/null || echo 0); trap "exit 7" TERM; '
       'while [ $n -lt {steps} ]; do sleep 0.2; n=$((n+1)); echo $n > $f.tmp; mv $f.tmp $f; done')


class RoundsFlow(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(servers=1, ttl="30s", policy=POLICY)
        self.children = []

    def tearDown(self):
        for p in self.children:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
        self.cluster.close()

    def test_two_jobs_take_turns_on_one_gpu_and_both_finish(self):
        c = self.cluster
        for name in ("a", "b"):
            p = c.gpool("run", "--requeue", "--", "sh", "-c", JOB.format(d=c.dir, name=name, steps=STEPS), user="ann",
                        start_new_session=True)
            self.children.append(p)
            if name == "a":
                self.assertTrue(wait_for(lambda: os.path.exists(c.dir + "/a.steps")))
        errs = []
        for p in self.children:
            _, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            errs.append(err)
        for name in ("a", "b"):
            with open(f"{c.dir}/{name}.steps") as f:
                self.assertEqual(int(f.read()), STEPS)
        # One GPU, two jobs of 10 s each in 10-s rounds: the first was stopped for the second's turn.
        turn = "is being preempted by its pool's round: other jobs' turn in pool 'default' this round (max-min)"
        self.assertIn(turn, errs[0])
        self.assertIn("requeued, restart 1", errs[0])
        stopped = re.search(r"gpool: lease (\S+) " + re.escape(turn), errs[0]).group(1)
        self.assertEqual(c.lease(stopped)["state"], "ended")  # (released: its job stopped within the grace)
        metrics = c.http("GET", "/metrics")[1]
        rotated = re.search(r"^gpool_leases_rotated_total (\d+)", metrics if isinstance(metrics, str) else "", re.M)
        self.assertTrue(rotated and int(rotated.group(1)) >= 1, metrics)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
