#!/usr/bin/env python3
"""Queues with guarantees end to end (issue 14): a real gpool-allocator, real gpool-servers (sim backend)
and real `gpool run` launchers. Borrowing, preemption with notice (the file, SIGTERM, the grace period),
requeue, non-preemptible leases, elastic fractions, and weights measured over a run.
usage: fair_share_flow_test.py BUILD_DIR [unittest args]"""
import json
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import subprocess  # noqa: E402

from cluster import GIB, GPOOL, LIB, MEMCAP, SANITIZED, Cluster, setUpModule, tearDownModule, wait_for  # noqa: F401,E402

GRACE_S = 2.0
POLICY = """
[settings]
lease_ttl = "{ttl}"
server_timeout = "1s"
preemption_grace = "2s"

[pools.default]
fractions = [1.0, 0.5, 0.25]

[queues.vision]
guarantee = {{ gpus = VISION }}
weight = 1
members = ["ann"]

[queues.speech]
guarantee = {{ gpus = SPEECH }}
weight = 3
members = ["bob"]
"""

# A command that, on SIGTERM, keeps the notice file and the time, then keeps running (stamping `alive`)
# until gpool stops it when its GPUs are revoked.
STUBBORN = ("trap 'cat \"$GPOOL_PREEMPT_FILE\" > {d}/notice-$GPOOL_LEASE; date +%s.%N > {d}/term-$GPOOL_LEASE' TERM; "
            "while :; do date +%s.%N > {d}/.alive-$GPOOL_LEASE; mv {d}/.alive-$GPOOL_LEASE {d}/alive-$GPOOL_LEASE; "
            "sleep 0.05; done")  # (renamed into place: SIGKILL never leaves it half written)


def read(path):
    with open(path) as f:
        return f.read().strip()


class FairShareFlow(unittest.TestCase):
    def setUp(self):
        self.cluster = None
        self.children = []

    def tearDown(self):
        for p in self.children:  # each launcher leads a session of its own: its command goes with it
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.communicate()
        if self.cluster:
            self.cluster.close()

    def make(self, servers, vision=1, speech=2):
        policy = POLICY.replace("VISION", str(vision)).replace("SPEECH", str(speech))
        self.cluster = Cluster(servers=servers, ttl="30s", policy=policy)
        return self.cluster

    def launch(self, *args, user):
        p = self.cluster.gpool("run", *args, user=user, start_new_session=True)
        self.children.append(p)
        return p

    def granted(self, user):
        return [lease for lease in self.cluster.status()["leases"] if lease["request"]["user"] == user]

    def test_borrowed_gpus_are_preempted_with_notice_and_the_guarantee_granted_at_once(self):
        c = self.make(servers=4)
        ann = []
        for _ in range(4):  # vision is guaranteed 1 GPU and borrows the 3 others
            ann.append(self.launch("--", "sh", "-c", STUBBORN.format(d=c.dir), user="ann"))
            self.assertTrue(wait_for(lambda: len(self.granted("ann")) == len(ann)), c.status())
        vision = [q for q in c.status()["queues"] if q["name"] == "vision"][0]
        self.assertEqual((vision["held_gpus"], vision["borrowed_gpus"]), (4, 3))
        ann_leases = sorted(self.granted("ann"), key=lambda lease: lease["granted_ms"])
        # Each command runs, its trap set, before the notice can come (a lease is granted before its
        # command starts; under load, a SIGTERM before the trap ended one silently).
        for lease in ann_leases:
            self.assertTrue(wait_for(lambda: os.path.exists(f"{c.dir}/alive-{lease['id']}")), lease["id"])
        bob = self.launch("-n", "2", "--", "sh", "-c", f"date +%s.%N > {c.dir}/bob-started", user="bob")
        out, err = bob.communicate(timeout=30)
        self.assertEqual(bob.returncode, 0, err)
        # Exactly enough (two), the most recently granted first; the others never heard of it.
        noticed = [lease["id"] for lease in ann_leases if os.path.exists(f"{c.dir}/term-{lease['id']}")]
        self.assertEqual(noticed, [lease["id"] for lease in ann_leases[2:]])
        ended = [c.lease(i) for i in noticed]
        for lease in ended:
            self.assertEqual(lease["state"], "ended")
            self.assertIn("preempted: queue 'speech' took back its guarantee", lease["end_reason"])
            notice = json.loads(read(f"{c.dir}/notice-{lease['id']}"))  # the file was there at SIGTERM
            self.assertEqual(notice["lease"], lease["id"])
            self.assertAlmostEqual(notice["grace_s"], GRACE_S, delta=0.5)
            # The grace period was honoured: the command ran on after SIGTERM until its GPUs were revoked.
            ran_on = float(read(f"{c.dir}/alive-{lease['id']}")) - float(read(f"{c.dir}/term-{lease['id']}"))
            self.assertGreater(ran_on, GRACE_S - 0.5)
        bob_lease = c.lease(re.search(r"gpool: lease (\S+): 2 x 1 GPU", err).group(1))
        # Granted by the very tick that revoked the last of them (the allocator's clock: no wall-clock bound).
        self.assertEqual(bob_lease["granted_ms"], max(lease["ended_ms"] for lease in ended))
        for p in ann[2:]:  # without --requeue: the documented status
            _, err = p.communicate(timeout=10)
            self.assertEqual(p.returncode, 75, err)
            self.assertIn("is being preempted for request " + bob_lease["id"], err)
        for p in ann[:2]:
            self.assertIsNone(p.poll())  # the first granted: untouched

    def test_a_wrapper_scripts_job_gets_its_notice_and_is_stopped_when_the_gpus_are_revoked(self):
        # The command is a shell that runs the job without exec: SIGTERM ends the shell at once. The job must
        # still get SIGTERM and its grace period, and SIGKILL when its GPUs are revoked (not 10 s later).
        c = self.make(servers=2)
        job = os.path.join(c.dir, "job.sh")
        with open(job, "w") as f:
            f.write(STUBBORN.format(d=c.dir) + "\n")
        self.launch("--", "sleep", "60", user="ann")  # within vision's guarantee
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 1))
        wrapper = self.launch("--", "sh", "-c", f"sh {job}; echo the wrapper went on", user="ann")  # borrowed
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 2))
        borrowed = max(self.granted("ann"), key=lambda lease: lease["granted_ms"])["id"]
        bob = self.launch("--", "true", user="bob")
        _, err = wrapper.communicate(timeout=30)
        self.assertEqual(wrapper.returncode, 75, err)
        self.assertNotIn("the wrapper went on", err)
        self.assertIn("left 1 process running", err)
        term, alive = float(read(f"{c.dir}/term-{borrowed}")), float(read(f"{c.dir}/alive-{borrowed}"))
        self.assertGreater(alive - term, GRACE_S - 1.0)  # its grace period, less the shell's end
        self.assertLess(alive - term, GRACE_S + 2.0)  # stopped at the revocation
        time.sleep(0.3)
        self.assertEqual(float(read(f"{c.dir}/alive-{borrowed}")), alive)  # and gone
        _, err = bob.communicate(timeout=30)
        self.assertEqual(bob.returncode, 0, err)

    def test_a_lease_with_a_time_limit_gives_notice_then_ends_and_gpool_exits_124(self):
        c = self.make(servers=1)
        p = self.launch("--time", "4s", "--requeue", "--", "sh", "-c", STUBBORN.format(d=c.dir), user="ann")
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 1))
        lease = self.granted("ann")[0]
        self.assertEqual(lease["request"]["time_limit_ms"], 4000)
        self.assertLessEqual(lease["ends_in_ms"], 4000)
        out, _ = c.gpool("status", user="ann").communicate(timeout=30)
        self.assertRegex(out, lease["id"] + r" .*\(ends in [0-4]s\)")
        self.assertTrue(wait_for(lambda: os.path.exists(f"{c.dir}/term-{lease['id']}"), timeout=10))
        out, _ = c.gpool("status", user="ann").communicate(timeout=30)
        self.assertRegex(out, lease["id"] + r" .*\(time-limit notice: revoked in [0-2]s\)")
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 124, err)  # not requeued: a time limit is not a preemption
        self.assertIn(f"lease {lease['id']}: 1 x 1 GPU on sim0:0", err)
        self.assertRegex(err, r"GPU on sim0:0 \([0-9.:]+\); time limit 4s\n")  # said at the start
        self.assertIn(f"lease {lease['id']} is being stopped at its time limit (4s)", err)
        self.assertIn("reached the lease's time limit", err)
        ended = c.lease(lease["id"])
        self.assertEqual(ended["end_reason"], "reached its time limit (4s)")
        notice = json.loads(read(f"{c.dir}/notice-{lease['id']}"))  # the file, then SIGTERM, the grace before
        self.assertAlmostEqual(notice["grace_s"], GRACE_S, delta=0.5)
        ran = float(read(f"{c.dir}/alive-{lease['id']}")) - float(read(f"{c.dir}/term-{lease['id']}"))
        self.assertGreater(ran, GRACE_S - 0.5)  # it ran on after SIGTERM until the limit
        held_s = (ended["ended_ms"] - ended["granted_ms"]) / 1000
        self.assertGreater(held_s, 3.9)
        self.assertLess(held_s, 6)

    def test_a_requeued_job_is_preempted_and_runs_to_completion_afterwards(self):
        c = self.make(servers=2, vision=1, speech=1)
        first = self.launch("--", "sleep", "60", user="ann")
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 1))
        # Checkpoints on SIGTERM (here: notes it and exits 7), resumes when run again.
        job = ('echo "$GPOOL_RESTARTS ${GPOOL_LAST_EXIT:-none}" >> ' + c.dir + '/runs; '
               'if [ "$GPOOL_RESTARTS" = 0 ]; then trap "exit 7" TERM; while :; do sleep 0.05; done; fi')
        requeued = self.launch("--requeue", "--", "sh", "-c", job, user="ann")
        self.assertTrue(wait_for(lambda: os.path.exists(c.dir + "/runs")))
        bob = self.launch("--", "sleep", "1", user="bob")  # within speech's guarantee: takes the borrowed GPU
        _, err = bob.communicate(timeout=30)
        self.assertEqual(bob.returncode, 0, err)
        _, err = requeued.communicate(timeout=30)
        self.assertEqual(requeued.returncode, 0, err)  # the second run's status
        self.assertEqual(read(c.dir + "/runs").splitlines(), ["0 none", "1 7"])
        self.assertIn("requeued, restart 1", err)
        self.assertIsNone(first.poll())  # within vision's guarantee: untouched

    @unittest.skipIf(SANITIZED, "a Python program cannot load the sanitizer-built client library")
    def test_a_program_that_leased_through_the_client_library_gets_notice_too(self):
        # Only GPOOL_ALLOCATOR set: the library's `gpool lease` helper holds the lease for the program, and
        # passes notice on to it as gpool run does (the file, SIGTERM, SIGKILL when the GPUs are revoked).
        c = self.make(servers=2, vision=1, speech=1)
        first = self.launch("--", "sleep", "60", user="ann")  # within vision's guarantee
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 1))
        program = ("import ctypes, signal, sys, time\n"
                   "assert ctypes.CDLL('libcuda.so.1').cuInit(0) == 0\n"
                   "def term(*_):\n"
                   "    open(sys.argv[1] + '/term', 'w').write(open(sys.argv[1] + '/notice').read())\n"
                   "signal.signal(signal.SIGTERM, term)\n"
                   "open(sys.argv[1] + '/started', 'w').close()\n"
                   "while True: time.sleep(0.05)\n")
        env = dict(os.environ, GPOOL_ALLOCATOR=c.url, GPOOL_BIN=GPOOL, LD_LIBRARY_PATH=LIB, GPOOL_PREEMPT_FILE=c.dir + "/notice",
                   GPOOL_SERVICE_KEY_FILE=c.account("ann"))
        for name in ("GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_SHARES", "GPOOL_CA_FILE"):
            env.pop(name, None)
        borrower = subprocess.Popen([sys.executable, "-c", program, c.dir], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.children.append(borrower)
        self.assertTrue(wait_for(lambda: os.path.exists(c.dir + "/started"), timeout=20), c.status())
        self.assertEqual(len(self.granted("ann")), 2)  # the second one borrowed
        bob = self.launch("--", "true", user="bob")  # within speech's guarantee: takes the borrowed GPU back
        _, err = bob.communicate(timeout=30)
        self.assertEqual(bob.returncode, 0, err)
        _, err = borrower.communicate(timeout=10)
        self.assertEqual(borrower.returncode, -signal.SIGKILL, err)  # stopped when its GPUs were revoked
        notice = json.loads(read(c.dir + "/term"))  # the file was there when SIGTERM came
        self.assertAlmostEqual(notice["grace_s"], GRACE_S, delta=0.5)  # what was left when the notice was read
        self.assertIn("is being preempted for request", err)
        self.assertIn("SIGTERM to process %d" % borrower.pid, err)
        self.assertIsNone(first.poll())

    def test_a_non_preemptible_lease_is_never_touched(self):
        c = self.make(servers=2, vision=1, speech=2)
        fixed = self.launch("--non-preemptible", "--", "sh", "-c", STUBBORN.format(d=c.dir), user="ann")
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 1))
        beyond = c.gpool("run", "--non-preemptible", "--wait", "0", "--", "true", user="ann")
        _, err = beyond.communicate(timeout=10)
        self.assertEqual(beyond.returncode, 3, err)  # it would borrow, and could never be taken back
        self.assertIn("a non-preemptible request is granted only within its queue's guarantee", err)
        borrowing = self.launch("--", "sh", "-c", STUBBORN.format(d=c.dir), user="ann")
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 2))
        ids = {lease["request"]["preemptible"]: lease["id"] for lease in self.granted("ann")}
        # Two GPUs within speech's guarantee: only one can be taken back, so nothing is (it would not help).
        both = self.launch("-n", "2", "--wait", "1m", "--", "true", user="bob")
        time.sleep(1.0)
        self.assertFalse(any(os.path.exists(f"{c.dir}/term-{i}") for i in ids.values()))
        self.assertEqual(c.lease(ids[True])["state"], "granted")
        os.killpg(both.pid, signal.SIGTERM)  # gives up; its request ends with it
        both.communicate(timeout=10)
        bob = self.launch("--wait", "1m", "--", "true", user="bob")  # one GPU: the borrowed one is taken back
        _, err = borrowing.communicate(timeout=30)
        self.assertEqual(borrowing.returncode, 75, err)
        _, err = bob.communicate(timeout=30)
        self.assertEqual(bob.returncode, 0, err)
        self.assertFalse(os.path.exists(f"{c.dir}/term-{ids[False]}"))
        self.assertEqual(c.lease(ids[False])["state"], "granted")
        self.assertNotIn("preempt_at_ms", c.lease(ids[False]))
        self.assertIsNone(fixed.poll())

    def test_elastic_requests_take_less_under_load_and_a_whole_gpu_when_free(self):
        c = self.make(servers=1)
        half = self.launch("-p", "0.5", "--", "sleep", "60", user="ann")
        self.assertTrue(wait_for(lambda: len(self.granted("ann")) == 1))
        told = 'echo "$GPOOL_FRACTION $GPOOL_MEMORY"; exec "$0" "$GPOOL_MEMORY"'  # and cuMemGetInfo says the same
        elastic = c.gpool("run", "-p", "1", "--min-fraction", "0.25", "--", "sh", "-c", told, MEMCAP, user="bob")
        out, err = elastic.communicate(timeout=30)
        self.assertEqual(elastic.returncode, 0, out + err)
        self.assertEqual(out.splitlines()[0], f"0.5 {4 * GIB}")
        self.assertIn("ALL PASSED", out)
        self.assertIn("elastic: asked for 1, took what was free", err)
        tight = c.gpool("run", "-p", "1", "--min-fraction", "0.75", "--wait", "0", "--", "true", user="bob")
        _, err = tight.communicate(timeout=10)
        self.assertEqual(tight.returncode, 3, err)  # never less than the minimum
        half.terminate()  # gpool passes it on and releases the lease
        half.communicate()
        # Free once its server says the elastic run's worker is gone too (a released share drains till then).
        self.assertTrue(wait_for(lambda: c.status()["servers"][0]["gpus"][0]["used_fraction"] == 0, timeout=10), c.status())
        whole = c.gpool("run", "-p", "1", "--min-fraction", "0.25", "--", "sh", "-c", 'echo "$GPOOL_FRACTION"', user="bob")
        out, err = whole.communicate(timeout=30)
        self.assertEqual(out.strip(), "1", err)

    def test_weights_divide_leftover_capacity_in_proportion(self):
        # No guarantees; 4 GPUs in quarters; each user keeps 16 short jobs asking (more than all of them),
        # and asks again as each ends. What each queue holds is sampled over the run.
        c = self.make(servers=4, vision=0, speech=0)
        owner, release_at = {}, {}

        def ask(user):
            status, lease = c.http("POST", "/v1/leases", {"user": user, "p": 0.25, "wait": 120})
            self.assertIn(status, (201, 202), lease)
            owner[lease["id"]] = user

        for _ in range(16):
            ask("ann")
            ask("bob")
        held = {"vision": 0.0, "speech": 0.0}
        start = time.time()
        while time.time() < start + 7:
            now = time.time()
            status = c.status()
            for lease in status["leases"]:
                release_at.setdefault(lease["id"], now + 0.3)
            if now > start + 1:  # past the first grants
                for q in status["queues"]:
                    held[q["name"]] += q["held_gpus"]
            for lease_id, at in list(release_at.items()):
                if now >= at:
                    c.http("DELETE", "/v1/leases/" + lease_id)
                    del release_at[lease_id]
                    ask(owner.pop(lease_id))
            time.sleep(0.05)
        ratio = held["speech"] / held["vision"]
        self.assertGreater(ratio, 2.4, held)  # weights 3 : 1
        self.assertLess(ratio, 3.6, held)
        print(f"speech/vision held over the run: {ratio:.2f} (weights 3/1)", file=sys.stderr)
    def test_admins_change_queues_at_run_time(self):
        c = self.make(servers=2)

        def admin(*args):
            p = c.gpool("admin", "queue", *args)
            out, err = p.communicate(timeout=10)
            return p.returncode, out, err

        rc, out, err = admin("set", "research", "--guarantee", "0.5", "--weight", "2", "--member", "carol", "--member", "@lab")
        self.assertEqual(rc, 0, err)
        self.assertIn("queue research set", out)
        row = [ln.split() for ln in out.splitlines() if ln.startswith("research")]
        self.assertEqual(row, [["research", "0.5", "-", "2", "0", "0", "0"]], out)
        rc, out, err = admin("set", "research", "--weight", "5")  # the other settings stay
        q = {q["name"]: q for q in c.status()["queues"]}["research"]
        self.assertEqual((q["guarantee_gpus"], q["weight"]), (0.5, 5))
        self.assertIn("members = [ 'carol', '@lab' ]", c.http("GET", "/v1/policy")[1])  # the policy in force says so
        _, lease = c.http("POST", "/v1/leases", {"user": "carol", "p": 1.0})
        q = {q["name"]: q for q in c.status()["queues"]}["research"]
        self.assertEqual((q["held_gpus"], q["borrowed_gpus"]), (1, 0.5))  # charged to it at once
        rc, _, err = admin("set", "team", "--parent", "nowhere")
        self.assertEqual(rc, 5, err)
        self.assertIn("queues.team.parent 'nowhere' is not a queue", err)
        rc, _, err = admin("set", "bad", "--guarantee", "2", "--limit", "1")
        self.assertIn("exceeds the limit", err)
        rc, out, err = admin("delete", "research")
        self.assertEqual(rc, 0, err)
        self.assertNotIn("research", [q["name"] for q in c.status()["queues"]])
        rc, _, err = admin("delete", "research")
        self.assertEqual(rc, 5)
        self.assertIn("there is no queue 'research'", err)
        p = c.gpool("admin", "queue", "set", "x", "--weight", "2", user="ann", env={"GPOOL_KEY_FILE": ""})  # not an admin
        _, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 5, err)
        self.assertIn("admin", err)
        self.assertNotIn("x", [q["name"] for q in c.status()["queues"]])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
