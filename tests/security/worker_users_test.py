#!/usr/bin/env python3
"""What a gpool-worker taken over by its client can reach (server/src/worker_users.h, docs/security.md
"Workers"). A real allocator and a sim gpool-server whose --worker is tests/security/taken_over_worker.py:
the real worker for every client but the one the test picks, whose worker then acts as its client would
after taking it over, with the user and descriptors a worker has.
- Without --worker-uids, every worker runs as the server. In its sandbox (server/worker/worker_sandbox.h,
  Landlock) it reads neither the server's key nor another worker's memory or environment, nor traces or
  signals it (Landlock ABI 6); with --no-worker-sandbox it reaches all of that. Either way it no longer reaches their
  launch counts (a page per lease; one page of every worker's slots let it rewrite them all), nor writes
  lines of the server's log (what it writes there is logged as its words: server/src/worker_log.h).
- With --worker-uids (root only), each lease's workers are a user of their own: it reaches none of that, and
  what it leaves running is killed when its lease has no worker left.
usage: worker_users_test.py BUILD_DIR [unittest args]"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
import ctypes

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "allocator"))
from cluster import BUILD, GIB, KERNELS, NVML_QUERY, SERVER, Cluster, setUpModule, tearDownModule, wait_for  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
TAKEN_OVER = os.path.join(HERE, "taken_over_worker.py")
WORKER = os.path.join(BUILD, "server", "gpool-worker")
LOOP = os.path.join(BUILD, "tests", "cuda_launch_loop")  # launches kernels for N seconds
IPC = os.path.join(BUILD, "tests", "cuda_ipc")            # a parent and its child process share memory by IPC
JIT = os.path.join(BUILD, "tests", "cuda_jit_link")       # loads and links PTX, which the driver compiles
UIDS = "61100-61131"
NOT_ROOT = os.geteuid() != 0
SANDBOXED_AS_WORKER = os.path.join(BUILD, "tests", "sandboxed_as_worker")
# The kernel's Landlock ABI (landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION); 444 on x86-64
# and arm64); 0 without Landlock, where workers run unsandboxed.
LANDLOCK_ABI = max(ctypes.CDLL(None, use_errno=True).syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)), 0)


def uid_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Uid:")).split()[1])


def lingered(path):
    """(pid, uid) of the process a taken-over worker left running, as it wrote them to `path`."""
    def written():
        try:
            with open(path) as f:
                return len(f.read().split()) == 2
        except OSError:
            return False
    assert wait_for(written, timeout=10), "the process the worker left wrote nothing"
    with open(path) as f:
        pid, uid = f.read().split()
    return int(pid), int(uid)


def gone(pid):
    """Ended: not in the process table, or a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class TakenOverWorker(unittest.TestCase):
    server_args = []

    def setUp(self):
        self.drop = tempfile.mkdtemp(prefix="gpool-takeover-")
        os.chmod(self.drop, 0o777)  # the taken-over worker writes its report here as its lease's user
        os.environ.update(GPOOL_TEST_TAKEOVER=os.path.join(self.drop, "take-over-next"), GPOOL_TEST_REAL_WORKER=WORKER,
                          GPOOL_TEST_SANDBOXED_AS_WORKER=SANDBOXED_AS_WORKER, HOST_SECRET="a secret in gpool-server's environment")
        self.cluster = Cluster(servers=1, ttl="30s", memory=GIB, server_args=[
            "--worker", TAKEN_OVER, "--sim-kernels", KERNELS, "--metrics", "127.0.0.1:0", *self.server_args])
        os.chmod(self.cluster.server_key("sim0"), 0o600)  # as gpool-server makes its own
        self.children = []

    def tearDown(self):
        for p in self.children:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.cluster.close()
        os.environ.pop("HOST_SECRET", None)
        if os.path.exists("/dev/shm/gpool-ipc-0/forged"):  # (what the worker taken over as root filed)
            os.unlink("/dev/shm/gpool-ipc-0/forged")

    def lease(self, user):
        status, lease = self.cluster.http("POST", "/v1/leases", {"user": user, "p": 0.5})
        self.assertEqual(status, 201, lease)
        return lease

    def run_on(self, lease, *argv):
        p = subprocess.Popen(list(argv), env=self.cluster.client_env(lease["shares"][0]), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        self.children.append(p)
        return p

    def workers_of(self, lease):
        return [int(pid) for pid, lid in re.findall(r"→ worker (\d+) on device \d+ for lease (L[0-9a-f]+)", self.cluster.log("sim0"))
                if lid == lease["id"]]

    def metric(self, name, labels):
        """The value of a sample of gpool-server's /metrics (0 when absent)."""
        port = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", self.cluster.log("sim0")).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        m = re.search("^" + re.escape(name + labels) + r" (\d+)", text, re.M)
        return int(m.group(1)) if m else 0

    def launches(self, lease):
        return self.metric("gpool_lease_kernel_launches_total", '{lease="' + lease["id"] + '"}')

    def take_over(self, victim_pid, **plan):
        """Starts a lease whose worker is taken over; returns its report, the lease and its program."""
        report = os.path.join(self.drop, "report.json")
        victim_uid = uid_of(victim_pid)
        records = f"/dev/shm/gpool-ipc-{victim_uid}"  # as the victim's first IPC export makes it
        os.makedirs(records, exist_ok=True)
        os.chown(records, victim_uid, victim_uid)
        os.chmod(records, 0o700)
        with open(os.environ["GPOOL_TEST_TAKEOVER"], "w") as f:
            json.dump(dict(plan, victim=victim_pid, victim_uid=victim_uid, report=report, server_key=self.cluster.server_key("sim0")), f)
        attacker = self.lease("mallory")
        prog = self.run_on(attacker, LOOP, "1")
        self.assertTrue(wait_for(lambda: os.path.exists(report), timeout=20), self.cluster.log("sim0"))
        with open(report) as f:
            return json.load(f), attacker, prog

    def lingering(self, **plan):
        """Takes over a worker that leaves a process running (`plan`: how); returns that process, the
        attacker's lease and program."""
        victim, prog, worker = self.start_victim()
        self.victim_prog = prog
        linger = os.path.join(self.drop, "linger.pid")
        report, attacker, attacker_prog = self.take_over(worker, linger=linger, **plan)
        return lingered(linger)[0], attacker, attacker_prog

    def start_victim(self):
        victim = self.lease("victim")
        prog = self.run_on(victim, LOOP, "60")  # (killed at the end: it runs all through the test, however slow)
        self.assertTrue(wait_for(lambda: self.launches(victim) > 0, timeout=20), self.cluster.log("sim0"))
        return victim, prog, self.workers_of(victim)[0]


@unittest.skipUnless(os.path.exists(LOOP), "cuda_launch_loop is built only with nvcc")
class WithoutWorkerUsers(TakenOverWorker):
    @unittest.skipUnless(LANDLOCK_ABI, "this kernel has no Landlock: workers are not sandboxed")
    def test_a_taken_over_worker_in_its_sandbox_reaches_neither_the_server_nor_other_workers(self):
        victim, prog, worker = self.start_victim()
        report, _, _ = self.take_over(worker, forks=10)
        print("taken over, as the server's user, sandboxed:", report, file=sys.stderr)
        self.assertEqual(report["uid"], os.getuid())
        self.assertEqual(report["server key"], "EACCES")
        self.assertEqual(report["memory"], "EACCES")
        self.assertEqual(report["environment"], "EACCES")
        self.assertEqual(report["signal"], "EPERM" if LANDLOCK_ABI >= 6 else "reached")
        # Still: its user's IPC records (by name: shared by the user's workers). Not what the server's
        # environment held but for what workers read (before, all of it). No process of its own (before, as
        # many as it asked for: no_new_processes.h).
        self.assertEqual(report["records"], "reached")
        self.assertEqual(report["server's environment"], "absent")
        self.assertEqual(report["forks"], 0)
        self.assertIsNone(prog.poll(), "the victim still runs")
        self.assertIn("workers are sandboxed (Landlock ABI", self.cluster.log("sim0"))

    @unittest.skipUnless(LANDLOCK_ABI, "this kernel has no Landlock: workers are not sandboxed")
    @unittest.skipUnless(os.path.exists(JIT), "cuda_jit_link is built only with nvcc")
    def test_a_taken_over_worker_plants_nothing_in_another_users_jit_cache(self):
        # Each lease's workers keep what the driver compiled of PTX in their lease's user's JIT cache; the
        # driver would load an entry there in place of compiling. One taken over by mallory's client writes
        # its own user's cache, and cannot plant an entry in the victim's.
        victim, prog, worker = self.start_victim()
        compiled = self.run_on(victim, JIT)  # (a second process of the victim's lease)
        out, _ = compiled.communicate(timeout=60)
        self.assertEqual(compiled.returncode, 0, out)
        cache = os.path.join(self.cluster.dir, "jit", "victim")
        entries = os.listdir(os.path.join(cache, "sim-ComputeCache"))
        self.assertTrue(entries, "the victim's driver kept nothing in its user's JIT cache")
        self.assertEqual(os.stat(cache).st_mode & 0o777, 0o700)
        self.assertNotIn("cannot keep a JIT cache entry", self.cluster.log("sim0"))
        report, _, _ = self.take_over(worker, victim_jit=cache)
        print("taken over, sandboxed, at another user's JIT cache:", report, file=sys.stderr)
        self.assertEqual(report["victim's JIT cache"], "EACCES")
        self.assertEqual(report["own JIT cache"], "reached")
        self.assertEqual(sorted(os.listdir(os.path.join(cache, "sim-ComputeCache"))), sorted(entries))
        self.assertFalse(os.path.exists(os.path.join(cache, "planted")))
        self.assertTrue(os.path.isdir(os.path.join(self.cluster.dir, "jit", "mallory")))
        self.assertIsNone(prog.poll(), "the victim still runs")

    def test_a_record_a_taken_over_worker_forges_in_another_workers_name_charges_nothing(self):
        # It files an export record naming the victim's worker, as the server's own child, and holds it as an
        # importer would. When the victim's worker ends, the server takes over only its own records (they carry
        # the seal it gave that worker): the victim's lease is not kept charged for the forged 600 MiB.
        victim, prog, worker = self.start_victim()
        report, _, _ = self.take_over(worker, forge_record=600 << 20, stay=30)
        self.assertEqual(report["forged record"], "reached")  # (filed: the records are the user's)
        prog.kill()
        prog.wait()
        self.assertTrue(wait_for(lambda: gone(worker), timeout=20), self.cluster.log("sim0"))
        time.sleep(0.5)
        self.assertNotRegex(self.cluster.log("sim0"), rf"worker {worker} ended while other processes hold")

    def test_what_a_taken_over_worker_writes_to_its_log_is_logged_as_its_words(self):
        # A line that reads as the server's own, then terminal escapes (clear the screen, set its title): the
        # server logs both as the words of the worker it started, for the lease it serves, made printable.
        victim, prog, worker = self.start_victim()
        forged = ("2026-12-02 10:00:00.000 info gpool-server[1] lease LF0E6ED ended at the allocator; stopping its worker 1\n"
                  "\x1b[2J\x1b]0;owned\x07 cleared the admin's screen\n")
        report, attacker, _ = self.take_over(worker, log=forged)
        self.assertEqual(report["log"], "written")
        self.assertTrue(wait_for(lambda: "cleared the admin" in self.cluster.log("sim0"), timeout=10), self.cluster.log("sim0"))
        log = self.cluster.log("sim0")
        (taken,) = self.workers_of(attacker)
        said = [line for line in log.splitlines() if "LF0E6ED" in line or "cleared the admin" in line]
        self.assertEqual(len(said), 2, said)
        for line in said:
            self.assertRegex(line, rf"^\S+ \S+ \S+ gpool-server\[\d+\] worker {taken} \(lease {attacker['id']}\): ")
        self.assertNotIn("\x1b", log)
        self.assertIn("\\x1b[2J\\x1b]0;owned\\x07 cleared the admin's screen", log)
        self.assertIsNone(prog.poll(), "the victim still runs")

    def test_a_taken_over_worker_starts_nothing_and_ends_with_its_server_killed_with_sigkill(self):
        # In its sandbox it can neither undo PR_SET_PDEATHSIG nor start a process that would lack it, nor
        # ignore the signal (SIGKILL): when gpool-server is killed with kill -9, and so stops no worker
        # itself, the kernel ends every worker (no_new_processes.h). Before, one taken over ran on, the GPU in
        # hand, outside any lease.
        victim, prog, worker = self.start_victim()
        report, attacker, _ = self.take_over(worker, deaf=True, forks=5, linger=os.path.join(self.drop, "linger.pid"), stay=120)
        self.assertEqual(report["parent's end"], "heard")
        self.assertEqual(report["forks"], 0)
        self.assertEqual(report["linger"], "EPERM")
        (taken,) = self.workers_of(attacker)
        server = self.cluster.servers["sim0"]
        server.kill()
        server.wait(10)
        self.assertTrue(wait_for(lambda: gone(taken), timeout=5), f"worker {taken} runs on after its server")
        self.assertTrue(wait_for(lambda: gone(worker), timeout=5), f"worker {worker} runs on after its server")

    def test_a_taken_over_worker_holding_past_its_lease_as_the_driver_counts_is_ended(self):
        # Memory it allocated itself, around its ledger: the driver's count (here the sim device's) says so,
        # and gpool-server's audit ends the worker within a few seconds. The other lease goes on (600 MiB
        # leave it room on the 1 GiB device; past that, its allocations would fail until the audit ended
        # the worker, as on a GPU).
        victim, prog, worker = self.start_victim()
        report, attacker, attacker_prog = self.take_over(worker, device_bytes=600 << 20, stay=60)
        self.assertEqual(report["device memory"], "held")
        (taken,) = self.workers_of(attacker)
        self.assertTrue(wait_for(lambda: gone(taken), timeout=15), self.cluster.log("sim0"))
        self.assertRegex(self.cluster.log("sim0"), rf"lease {attacker['id']}: its processes hold 6\d\d MiB of device memory "
                         rf"as the driver counts it, past the \d+ MiB of its cap and its workers' contexts .*ending {taken}")
        self.assertEqual(self.metric("gpool_server_memory_overruns_total", ""), 1)
        self.assertIsNone(prog.poll(), "the victim still runs")
        self.assertEqual(attacker_prog.wait(30) != 0, True)


@unittest.skipUnless(os.path.exists(LOOP), "cuda_launch_loop is built only with nvcc")
class WithoutWorkerUsersNorSandbox(TakenOverWorker):
    server_args = ["--no-worker-sandbox"]

    def test_a_taken_over_worker_reaches_the_server_but_no_other_leases_launch_count(self):
        victim, prog, worker = self.start_victim()
        report, _, _ = self.take_over(worker, forks=100, stay=30,  # (it stays: its count is read with every heartbeat)
                                      victim_jit=os.path.join(self.cluster.dir, "jit", "victim"))
        print("taken over, as the server's user:", report, file=sys.stderr)
        self.assertEqual(report["launch counters"], "overwritten")
        # Its own page only: the victim's count stays what its kernels made it (before: 2**62 and more).
        self.assertLess(self.launches(victim), 1 << 40)
        self.assertIsNone(prog.poll(), "the victim still runs")
        # And the server's heartbeats are still taken with its own lease's count absurd: past the allocator's
        # server timeout (1 s), the victim runs on (before, every heartbeat was refused for the count, and the
        # server, down at the allocator, lost every lease).
        time.sleep(3)
        self.assertNotIn("allocator refused", self.cluster.log("sim0"))
        self.assertIsNone(prog.poll(), "the victim still runs, its server's heartbeats taken")
        # What --worker-uids is for: as the server's user, a worker reaches all of this.
        self.assertEqual(report["uid"], os.getuid())
        for what in ("server key", "signal", "memory", "environment", "records", "victim's JIT cache", "own JIT cache"):
            self.assertEqual(report[what], "reached", what)
        self.assertEqual(report["server's environment"], "absent")  # (a worker inherits only what workers read)
        self.assertEqual(report["forks"], 100, "as many processes as it asks for")


    def test_what_a_taken_over_worker_leaves_running_is_killed_once_it_ends(self):
        # gpool-server is its workers' subreaper: the process, left when its worker ends, is the server's
        # child, and killed (before, it ran on as init's, as the server's user, out of any lease).
        left, attacker, attacker_prog = self.lingering()
        attacker_prog.wait(60)  # its worker ended
        self.assertTrue(wait_for(lambda: gone(left), timeout=10), f"process {left} still runs")
        self.assertRegex(self.cluster.log("sim0"), rf"process {left} \(sleep\), which a worker left running, is killed")
        self.assertIsNone(self.victim_prog.poll(), "the victim still runs")

    def test_what_a_taken_over_worker_starts_apart_is_killed_while_it_runs(self):
        # setsid and a second fork: its parent gone at once, the process is the server's child while the
        # worker still runs, and is killed at the next memory audit (every second).
        left, attacker, _ = self.lingering(apart=True, stay=30)
        self.assertTrue(wait_for(lambda: gone(left), timeout=10), f"process {left} still runs")
        (taken,) = self.workers_of(attacker)
        self.assertFalse(gone(taken), "the worker itself runs on (its memory is within its lease)")
        self.assertIsNone(self.victim_prog.poll(), "the victim still runs")

    def test_a_taken_over_worker_deaf_to_signals_ends_with_its_server(self):
        # A worker ends with its server (PR_SET_PDEATHSIG), but one its client took over outside the sandbox
        # may undo that and ignore SIGTERM. gpool-server, stopped, kills what still runs of its workers itself: none runs on
        # with the GPU, outside any lease, once the server that answers for it is gone.
        victim, prog, worker = self.start_victim()
        report, attacker, _ = self.take_over(worker, deaf=True, stay=120)
        self.assertEqual(report["parent's end"], "ignored")
        (taken,) = self.workers_of(attacker)
        server = self.cluster.servers["sim0"]
        server.terminate()  # the first signal: no new clients, the workers finish with their clients
        self.assertTrue(wait_for(lambda: "no new clients" in self.cluster.log("sim0"), timeout=10), self.cluster.log("sim0"))
        server.terminate()  # the second: the workers are stopped now
        server.wait(10)
        self.assertTrue(wait_for(lambda: gone(taken), timeout=5), f"worker {taken} runs on after its server")
        self.assertTrue(wait_for(lambda: gone(worker), timeout=5), f"worker {worker} runs on after its server")
        self.assertRegex(self.cluster.log("sim0"), r"stopping 2 workers")


@unittest.skipUnless(os.path.exists(LOOP), "cuda_launch_loop is built only with nvcc")
class WithComputeAudit(TakenOverWorker):
    server_args = ["--compute-audit", "1"]

    def test_a_taken_over_worker_taking_more_than_its_share_as_the_driver_counts_is_ended(self):
        # It keeps the GPU busy around its lease's pacing (the driver's count, here the sim device's, says so):
        # half a second past its share of 0.5 each second, it is named past half the limit, then ended past
        # it. The other lease, at its share all along, is never named and goes on.
        victim, prog, worker = self.start_victim()
        report, attacker, attacker_prog = self.take_over(worker, device_time=60)
        self.assertEqual(report["device time"], "taking")
        (taken,) = self.workers_of(attacker)
        self.assertTrue(wait_for(lambda: gone(taken), timeout=20), self.cluster.log("sim0"))
        log = self.cluster.log("sim0")
        said = rf"lease {attacker['id']}: its processes took [\d.]+ s of device 0's time past its share of 0\.50, as the driver counts it"
        self.assertRegex(log, said + r"; past 1 s \(--compute-audit\) they are ended")
        self.assertRegex(log, said + rf", more than the 1 s --compute-audit allows .*; ending {taken}")
        self.assertEqual(self.metric("gpool_server_compute_overruns_total", ""), 1)
        self.assertNotIn(f"lease {victim['id']}: its processes took", log)
        self.assertIsNone(prog.poll(), "the victim still runs")
        self.assertNotEqual(attacker_prog.wait(30), 0)
        # The victim's standing, as /metrics shows it: at its share, nothing ahead to speak of.
        port = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            ahead = re.search(r'^gpool_lease_compute_ahead_seconds\{lease="' + victim["id"] + r'"\} (\S+)', r.read().decode(), re.M)
        self.assertIsNotNone(ahead)
        self.assertLess(float(ahead.group(1)), 0.5)


@unittest.skipIf(NOT_ROOT, "--worker-uids needs gpool-server to run as root")
@unittest.skipUnless(os.path.exists(LOOP), "cuda_launch_loop is built only with nvcc")
class WithWorkerUsers(TakenOverWorker):
    server_args = ["--worker-uids", UIDS, "--max-threads-per-lease", "64"]

    def test_each_leases_workers_are_a_user_of_their_own(self):
        first, second = self.lease("ann"), self.lease("bob")
        progs = [self.run_on(first, LOOP, "60"), self.run_on(first, LOOP, "60"), self.run_on(second, LOOP, "60")]
        self.assertTrue(wait_for(lambda: len(self.workers_of(first)) == 2 and len(self.workers_of(second)) == 1, timeout=20))
        # (each becomes its user first thing, just after gpool-server started it as root)
        self.assertTrue(wait_for(lambda: 0 not in {uid_of(w) for w in self.workers_of(first) + self.workers_of(second)}))
        users = {lid: {uid_of(w) for w in self.workers_of(lease)} for lid, lease in (("first", first), ("second", second))}
        self.assertEqual(len(users["first"]), 1, "one lease's processes are one user")
        self.assertNotEqual(users["first"], users["second"])
        for uid in users["first"] | users["second"]:
            self.assertIn(uid, range(61100, 61132))
        self.assertEqual(self.metric("gpool_server_worker_uids", '{state="in_use"}'), 2)
        self.assertEqual(self.metric("gpool_server_worker_uids", '{state="total"}'), 32)
        for w in self.workers_of(first) + self.workers_of(second):  # --max-threads-per-lease, in each worker
            with open(f"/proc/{w}/limits") as f:
                self.assertRegex(f.read(), r"Max processes\s+64\s+64\s")
        for p in progs:
            self.assertIsNone(p.poll())  # (all ran while their users were read; killed at the end)

    def test_a_taken_over_worker_reaches_nothing_of_the_server_or_other_leases(self):
        victim, prog, worker = self.start_victim()
        victim_jit = os.path.join(self.cluster.dir, "jit", "victim")
        report, _, _ = self.take_over(worker, forks=100, victim_jit=victim_jit)
        print("taken over, with --worker-uids:", report, file=sys.stderr)
        # Each user's JIT cache is lent to their lease's uid: its own is its to write, the victim's is not.
        self.assertEqual(report["own JIT cache"], "reached")
        self.assertEqual(report["victim's JIT cache"], "EACCES")
        self.assertFalse(os.path.exists(os.path.join(victim_jit, "planted")))
        self.assertEqual(os.stat(victim_jit).st_uid, uid_of(worker), "the victim's cache is its lease's uid's")
        self.assertEqual(os.stat(victim_jit).st_mode & 0o777, 0o700)
        self.assertNotIn(report["uid"], (0, uid_of(worker)))
        self.assertEqual(report["server key"], "EACCES")
        self.assertEqual(report["signal"], "EPERM")
        self.assertEqual(report["memory"], "EACCES")
        self.assertEqual(report["environment"], "EACCES")
        self.assertEqual(report["records"], "EACCES")
        self.assertEqual(report["server's environment"], "absent")
        # No process of its own (no_new_processes.h; --max-threads-per-lease bounds the lease's user's threads,
        # and its processes where workers run unsandboxed).
        self.assertEqual(report["forks"], 0)
        self.assertLess(self.launches(victim), 1 << 40)
        self.assertIsNone(prog.poll(), "the victim still runs")

    @unittest.skipUnless(os.path.exists(JIT), "cuda_jit_link is built only with nvcc")
    def test_a_users_jit_cache_is_lent_to_one_lease_at_a_time_and_closed_between_them(self):
        # What the driver compiled of PTX for ann's first lease is her next lease's, on another uid; while no
        # lease of hers runs, it is the server's (closed), so the uid's next lease, bob's, reaches none of it.
        cache = os.path.join(self.cluster.dir, "jit", "ann")
        first = self.lease("ann")
        run = self.run_on(first, JIT)
        out, _ = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 0, out + self.cluster.log("sim0"))
        entries = os.listdir(os.path.join(cache, "sim-ComputeCache"))
        self.assertTrue(entries, "ann's driver kept nothing in her JIT cache")
        self.assertRegex(self.cluster.log("sim0"), "JIT caches: one for each lease's user, lent to one of their leases' uids")
        first_uid = os.stat(cache).st_uid
        self.assertIn(first_uid, range(61100, 61132))
        self.assertEqual(self.cluster.http("DELETE", "/v1/leases/" + first["id"])[0], 200)
        self.assertTrue(wait_for(lambda: os.stat(cache).st_uid == 0, timeout=20), "given back when her lease left")
        self.assertEqual(os.stat(cache).st_mode & 0o777, 0o700)
        carol = self.lease("carol")
        holder = self.run_on(carol, LOOP, "60")  # (takes the uid ann's first lease had)
        self.assertTrue(wait_for(lambda: self.workers_of(carol), timeout=20))
        second = self.lease("ann")
        again = self.run_on(second, JIT)
        out, _ = again.communicate(timeout=60)
        self.assertEqual(again.returncode, 0, out)
        ann_uid = os.stat(cache).st_uid
        self.assertIn(ann_uid, range(61100, 61132))
        self.assertNotEqual(ann_uid, first_uid, "another uid this time")
        self.assertEqual(sorted(os.listdir(os.path.join(cache, "sim-ComputeCache"))), sorted(entries), "the same entries, loaded")
        for name in entries:
            self.assertEqual(os.stat(os.path.join(cache, "sim-ComputeCache", name)).st_uid, ann_uid)
        self.assertNotIn("cannot keep a JIT cache entry", self.cluster.log("sim0"))
        self.assertIsNone(holder.poll())

    @unittest.skipUnless(os.path.exists(JIT), "cuda_jit_link is built only with nvcc")
    def test_a_users_leases_running_at_once_each_keep_a_jit_cache(self):
        # dan's first lease holds his cache; his second, running meanwhile on another uid, gets one of its
        # own (dan+2), which its driver fills, instead of compiling PTX at each load.
        first = self.lease("dan")
        holder = self.run_on(first, LOOP, "60")
        self.assertTrue(wait_for(lambda: self.workers_of(first), timeout=20))
        second = self.lease("dan")
        run = self.run_on(second, JIT)
        out, _ = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 0, out + self.cluster.log("sim0"))
        caches = os.path.join(self.cluster.dir, "jit")
        self.assertTrue(os.listdir(os.path.join(caches, "dan+2", "sim-ComputeCache")), "the second lease's driver kept nothing")
        uids = {os.stat(os.path.join(caches, name)).st_uid for name in ("dan", "dan+2")}
        self.assertEqual(len(uids), 2, "each lent to its own lease's uid")
        self.assertTrue(uids <= set(range(61100, 61132)), uids)
        self.assertNotIn("compile PTX at each load", self.cluster.log("sim0"))
        self.assertIsNone(holder.poll())

@unittest.skipIf(NOT_ROOT, "--worker-uids needs gpool-server to run as root")
@unittest.skipUnless(os.path.exists(LOOP), "cuda_launch_loop is built only with nvcc")
class WithWorkerUsersNorSandbox(TakenOverWorker):
    server_args = ["--worker-uids", UIDS, "--no-worker-sandbox"]  # (in its sandbox, a worker starts no process)

    def test_what_a_taken_over_worker_leaves_running_is_killed_with_its_lease_gone_from_the_server(self):
        victim, prog, worker = self.start_victim()
        linger = os.path.join(self.drop, "linger.pid")
        report, attacker, attacker_prog = self.take_over(worker, linger=linger)
        left, uid = lingered(linger)
        self.assertEqual(uid, report["uid"])
        attacker_prog.wait(60)  # its worker ended: the lease has no worker here
        # Killed by gpool-server (not this test): gone from the process table once reaped by init.
        self.assertTrue(wait_for(lambda: gone(left), timeout=10), f"process {left} of uid {report['uid']} still runs")
        self.assertFalse(os.path.exists(f"/dev/shm/gpool-ipc-{report['uid']}"), "its records are gone too")
        self.assertIsNone(prog.poll(), "the victim, another lease, still runs")


@unittest.skipIf(NOT_ROOT, "--worker-uids needs gpool-server to run as root")
class WorkerUsersServe(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(NVML_QUERY), "nvml_query is built with the tests")
    def test_a_program_is_served_by_a_worker_of_its_leases_user(self):
        # (no nvcc needed: this one runs under the sanitizers too, the worker's change of user included)
        c = Cluster(servers=1, ttl="30s", server_args=["--worker-uids", UIDS])  # (8 GiB: nvml_query takes 1 GiB)
        try:
            status, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            self.assertEqual(status, 201, lease)
            run = subprocess.run([NVML_QUERY], env=c.client_env(lease["shares"][0]), capture_output=True, text=True, timeout=120)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr + c.log("sim0"))
            self.assertRegex(c.log("sim0"), r"→ worker \d+ on device 0 for lease " + lease["id"] + r", as uid 611\d\d")
        finally:
            c.close()

    @unittest.skipUnless(os.path.exists(IPC), "cuda_ipc is built only with nvcc")
    def test_processes_of_one_lease_share_memory_by_ipc(self):
        c = Cluster(servers=1, ttl="30s", memory=GIB, server_args=["--worker-uids", UIDS, "--sim-kernels", KERNELS])
        try:
            status, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            self.assertEqual(status, 201, lease)
            run = subprocess.run([IPC], env=c.client_env(lease["shares"][0]), capture_output=True, text=True, timeout=120)
            self.assertIn("ALL PASSED", run.stdout, run.stdout + run.stderr + c.log("sim0"))
        finally:
            c.close()

    @unittest.skipUnless(os.path.exists(LOOP), "cuda_launch_loop is built only with nvcc")
    def test_a_lease_past_the_range_is_refused_naming_it(self):
        c = Cluster(servers=1, ttl="30s", memory=GIB, server_args=["--worker-uids", "61140", "--sim-kernels", KERNELS])
        try:
            _, first = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
            _, second = c.http("POST", "/v1/leases", {"user": "v", "p": 0.5})
            holder = subprocess.Popen([LOOP, "60"], env=c.client_env(first["shares"][0]), stdout=subprocess.DEVNULL)
            try:
                self.assertTrue(wait_for(lambda: "→ worker" in c.log("sim0"), timeout=20))
                run = subprocess.run([LOOP, "1"], env=c.client_env(second["shares"][0]), capture_output=True, text=True, timeout=60)
                self.assertNotEqual(run.returncode, 0)
                self.assertIn("every uid of --worker-uids 61140 serves another lease", run.stdout + run.stderr)
            finally:
                holder.kill()
                holder.wait(60)
        finally:
            c.close()

    def test_a_range_with_an_accounts_uid_is_refused_at_start(self):
        run = subprocess.run([SERVER, "--listen", "127.0.0.1:0", "--backend", "sim", "--worker-uids", "65530-65534"],
                             capture_output=True, text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("uid 65534 is user 'nobody'", run.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:])
