#!/usr/bin/env python3
"""Allocator replicas on etcd (issue 16): a real three-member etcd cluster on loopback, three
gpool-allocator replicas sharing it, two sim gpool-servers and real `gpool run` launchers given all three
replicas (GPOOL_ALLOCATOR=URL,URL,URL). SIGKILL the leader: a standby leads within 5 s; every launcher
finishes with its command's status; no GPU is held by two commands at once (each command records the
share its server serves it); queued requests keep their order; granted leases stay granted. Killing an
etcd member changes nothing.
usage: replicas_test.py BUILD_DIR [unittest args]"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ALLOCATOR, BUILD, GIB, KERNELS, Cluster, setUpModule, tearDownModule, wait_for  # noqa: F401,E402
from etcd_cluster import EtcdCluster  # noqa: E402

PROGRAM = os.path.join(BUILD, "tests", "cuda_launch_loop")  # a CUDA program: its server checks its lease token


class Replicas(unittest.TestCase):
    def setUp(self):
        self.etcd = EtcdCluster(3)
        self.cluster = Cluster(servers=2, ttl="10s", memory=GIB, store=self.etcd.url(), replicas=3,
                               server_args=["--sim-kernels", KERNELS])
        self.children = []

    def tearDown(self):
        for p in self.children:  # gpool run passes SIGTERM on to its command, which holds the pipes too
            if p.poll() is None:
                p.terminate()
            try:
                p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.cluster.close()
        self.etcd.close()

    def run_(self, *cmd):
        p = self.cluster.gpool("run", "-n", "1", "-p", "1", "--", *cmd)
        self.children.append(p)
        return p

    def hold(self):
        """A launcher whose command holds its lease until the file `go` appears; returned once granted."""
        p = self.run_("sh", "-c", f"until [ -f {self.cluster.dir}/go ]; do sleep 0.05; done")
        self.assertTrue(wait_for(lambda: len(self.granted()) == 1))
        return p

    def let_go(self, holder):
        """Ends the command of hold()'s launcher, which must then exit with 0; returns what it printed."""
        open(f"{self.cluster.dir}/go", "w").close()
        _, err = holder.communicate(timeout=60)
        self.assertEqual(holder.returncode, 0, err)
        return err

    def kill_leader(self):
        """SIGKILLs the replica that leads; returns the seconds until another serves."""
        c = self.cluster
        old = c.leading()
        self.assertIsNotNone(old)
        c.allocators[old].send_signal(signal.SIGKILL)
        c.allocators[old].wait()
        start = time.monotonic()
        self.assertTrue(wait_for(lambda: c.leading() not in (None, old), timeout=15, step=0.05))
        took = time.monotonic() - start
        print(f"replica {old} killed; replica {c.leading()} leads after {took:.2f} s", file=sys.stderr)
        return took

    def granted(self):
        return {lease["id"]: lease for lease in self.cluster.status()["leases"]}

    def test_launchers_ride_through_the_leaders_death_and_an_etcd_members(self):
        c = self.cluster
        log = os.path.join(c.dir, "shares.log")
        # Each command records the share it was given, its start and its end; some also run CUDA work.
        script = ('echo "start $(date +%s.%N) $GPOOL_SHARES" >> {log}; {work}; '
                  'echo "{end} $(date +%s.%N) $GPOOL_SHARES" >> {log}; exit {code}')
        results, stop, lock = [], threading.Event(), threading.Lock()

        def stream(k):
            n = 0
            while not stop.is_set():
                code = (k * 7 + n) % 5
                cuda = n % 3 == 0
                work = f"{PROGRAM} 1 > /dev/null" if cuda else "sleep 0.3"
                p = self.run_("sh", "-c", script.format(log=log, work=work, code=code, end="end-cuda" if cuda else "end"))
                out, err = p.communicate(timeout=120)
                with lock:
                    results.append((code, p.returncode, err))
                n += 1

        threads = [threading.Thread(target=stream, args=(k,)) for k in range(4)]  # 4 streams, 2 GPUs: some wait
        for t in threads:
            t.start()
        time.sleep(4)
        took = self.kill_leader()
        time.sleep(4)
        self.etcd.kill(self.etcd.names[0])  # the member every replica asked first
        time.sleep(4)
        stop.set()
        for t in threads:
            t.join(180)
        self.assertLess(took, 5.0, "a new leader must serve within 5 s")
        self.assertGreater(len(results), 12, results)
        for code, rc, err in results:
            self.assertEqual(rc, code, err)  # every launcher finished with its command's status
        self.assertEqual(self.granted(), {})  # every lease was released, at whichever leader
        for name in ("sim0", "sim1"):  # no worker was stopped while it served a lease still in use
            # (a release that reaches a server before it has reaped the worker of a command that just ended
            # is logged as a revocation too: that worker serves nobody, and says nothing of the kind)
            self.assertNotRegex(c.log(name), r"closing connection to .*: its lease ended at the allocator")
        notes = sorted({line for _, _, err in results for line in err.splitlines() if "retry" in line or "replica" in line})
        print("what launchers said during the failover:\n  " + "\n  ".join(notes[:6]), file=sys.stderr)
        # No GPU served two commands at once: each server:device's intervals do not overlap.
        spans = {}
        with open(log) as f:
            for line in f:
                what, at, share = line.split(" ", 2)
                gpu = " ".join(share.split()[:2])
                # A lease whose last CUDA client exits ends at once (its server tells the allocator), a
                # few ms before its shell records the end: its end is taken as 50 ms earlier. Commands
                # given one GPU twice would overlap by the 0.3 s or more they run.
                spans.setdefault(gpu, []).append((float(at) - (0.05 if what == "end-cuda" else 0), what))
        self.assertEqual(len(spans), 2, spans.keys())
        for gpu, events in spans.items():
            inside = 0
            for _, what in sorted(events):
                inside += 1 if what == "start" else -1
                self.assertLessEqual(inside, 1, f"{gpu} served two commands at once")

    def test_queued_requests_keep_their_order_and_granted_leases_stay(self):
        c = self.cluster
        holders = [self.run_("sh", "-c", f"until [ -f {c.dir}/go{i} ]; do sleep 0.05; done") for i in range(2)]
        self.assertTrue(wait_for(lambda: len(self.granted()) == 2))
        held = set(self.granted())
        waiting = []
        for i in range(3):
            waiting.append(self.run_("sh", "-c", f"echo {i} >> {c.dir}/order"))
            self.assertTrue(wait_for(lambda: len(c.status()["queue"]) == i + 1))
        queue = [q["id"] for q in c.status()["queue"]]
        self.kill_leader()
        time.sleep(2)  # past the servers' timeout (1 s here): the failover must not count against them
        self.assertEqual(set(self.granted()), held)  # not lost, not granted again
        self.assertTrue(all(s["up"] for s in c.status()["servers"]))
        self.assertEqual([q["id"] for q in c.status()["queue"]], queue)
        open(f"{c.dir}/go0", "w").close()  # one GPU frees: the three take it in turn, in their order
        for p in [holders[0]] + waiting:
            _, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
        with open(f"{c.dir}/order") as f:
            self.assertEqual(f.read().split(), ["0", "1", "2"])
        open(f"{c.dir}/go1", "w").close()
        _, err = holders[1].communicate(timeout=60)
        self.assertEqual(holders[1].returncode, 0, err)

    def test_a_leader_stopped_past_its_lease_writes_nothing_and_stands_by(self):
        # The attack on a deposed leader: it wakes with a stale view (a lease it thinks is granted, a GPU
        # it thinks is free) and is asked to grant. It must neither answer with a grant nor change etcd.
        c = self.cluster
        alice = c.bearer("alice")  # issued by the leader before the attack: the probe below is the attack
        holder = self.hold()
        held = list(self.granted())[0]
        old = c.leading()
        c.allocators[old].send_signal(signal.SIGSTOP)
        self.assertTrue(wait_for(lambda: c.leading() not in (None, old), timeout=20, step=0.2))
        self.let_go(holder)  # released at the new leader; the stopped one still sees it held
        c.allocators[old].send_signal(signal.SIGCONT)
        status, out = c._try_http(c.urls[old], "POST", "/v1/leases", {"n": 1, "p": 1.0, "request_key": "stale-leader-probe-0001"},
                                  headers=alice)
        self.assertNotIn(status, (201, 202), out)
        self.assertTrue(wait_for(lambda: "gpool_allocator_leader 0" in (c._try_http(c.urls[old], "GET", "/metrics")[1] or ""),
                                 timeout=15), c.log(f"allocator{old or ''}"))
        # (its metrics say so as it steps down; the line follows once it has)
        self.assertTrue(wait_for(lambda: "starting again as a standby" in c.log(f"allocator{old or ''}"), timeout=15),
                        c.log(f"allocator{old or ''}"))
        self.assertEqual(self.granted(), {})  # at the leader, from etcd: nothing the stale one did
        self.assertEqual(c.lease(held)["state"], "ended")

    def test_servers_slow_to_find_the_new_leader_keep_their_leases(self):
        # A server may need a while to find the new leader (its back-off, a busy host): the failover must
        # not count against it, nor against the leases it serves (the servers' timeout here is 1 s).
        c = self.cluster
        holder = self.hold()
        held = set(self.granted())
        for p in c.servers.values():
            p.send_signal(signal.SIGSTOP)
        self.kill_leader()
        time.sleep(1.5)
        for p in c.servers.values():
            p.send_signal(signal.SIGCONT)
        time.sleep(1.5)
        self.assertEqual(set(self.granted()), held)
        self.assertTrue(all(s["up"] for s in c.status()["servers"]), c.status()["servers"])
        self.let_go(holder)

    def test_a_launcher_holding_a_lease_through_a_failover_says_so_once_and_when_it_ends(self):
        p = self.hold()
        self.kill_leader()
        time.sleep(1)  # its long poll reaches the new leader
        err = self.let_go(p)
        away = [line for line in err.splitlines() if "retrying until it answers" in line]
        back = [line for line in err.splitlines() if "the allocator answers again" in line]
        self.assertEqual(len(away), 1, err)  # one line for the whole failover, not one per try
        self.assertIn("no allocator replica leads now", away[0])
        self.assertEqual(len(back), 1, err)

    def test_a_release_made_while_no_replica_leads_still_frees_the_share(self):
        c = self.cluster
        p = self.hold()
        old = c.leading()
        c.allocators[old].send_signal(signal.SIGKILL)
        c.allocators[old].wait()
        open(f"{c.dir}/go", "w").close()  # the command ends, and gpool run releases, before a standby leads
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertTrue(wait_for(lambda: c.leading() not in (None, old), timeout=15))
        # Freed at once, not when the lease's heartbeats time out (10 s here).
        self.assertTrue(wait_for(lambda: self.granted() == {}, timeout=3), err)

    def test_a_store_that_stalls_counts_against_no_server(self):
        # While etcd cannot commit (its members fail over, its disk stalls), every answer waits for the
        # write under way, servers' heartbeats' included: that wait must not make the leader take a
        # server for dead (its timeout is 1 s here) and end the leases on it.
        c = self.cluster
        holder = self.hold()
        held = set(self.granted())
        for p in self.etcd.procs.values():
            p.send_signal(signal.SIGSTOP)
        try:
            waiting = self.run_("true")  # a change, whose write waits for etcd
            time.sleep(2)
        finally:
            for p in self.etcd.procs.values():
                p.send_signal(signal.SIGCONT)
        _, err = waiting.communicate(timeout=60)
        self.assertEqual(waiting.returncode, 0, err)
        self.assertTrue(held <= set(self.granted()), c.status()["leases"])
        self.assertTrue(all(s["up"] for s in c.status()["servers"]), c.status()["servers"])
        self.let_go(holder)

    def test_gpool_status_names_the_leader_and_each_replica_says_whether_it_leads(self):
        c = self.cluster
        p = c.gpool("status")
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        leader = c.leading()
        self.assertIn(f"allocator leader: {c.urls[leader]}", out)
        self.kill_leader()
        p = c.gpool("status")
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn(f"allocator leader: {c.urls[c.leading()]}", out)

    def test_a_replica_started_again_keeps_no_descriptor_of_its_former_image(self):
        # A deposed replica marks its descriptors close-on-exec and starts again; a connection that one of
        # its threads accepted in between would outlive the exec, and its client would wait for nothing.
        c = self.cluster
        mine, inherited = socket.socketpair()
        log = os.path.join(c.dir, "restarted.log")
        with open(log, "w") as f:
            p = subprocess.Popen([ALLOCATOR, "--listen", "127.0.0.1:0", "--db", os.path.join(c.dir, "alloc.db"), "--store",
                                  self.etcd.url()], env={**os.environ, "GPOOL_ALLOCATOR_RESTARTED": "1"},
                                 pass_fds=[inherited.fileno()], stderr=f)
        inherited.close()
        try:
            mine.settimeout(20)
            self.assertEqual(mine.recv(1), b"")  # closed by the new image (a timeout here: still held open)
        finally:
            mine.close()
            self.assertTrue(stops(p), open(log).read())


    def test_a_replica_with_another_token_key_does_not_start(self):
        c = self.cluster
        other = os.path.join(c.dir, "other.token.pem")
        p = c.gpool("status")  # (anything, so that the first replicas have recorded theirs)
        p.communicate(timeout=30)
        r = subprocess.run([ALLOCATOR, "--listen", "127.0.0.1:0", "--db", os.path.join(c.dir, "alloc.db"), "--store", self.etcd.url(),
                            "--token-key", other], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("give every replica a copy of the same --token-key file", r.stderr)


def stops(allocator):
    """Whether `allocator` exits within 30 s of SIGTERM (killed otherwise, so that it holds no test's pipes)."""
    allocator.terminate()
    try:
        allocator.wait(timeout=30)
        return True
    except subprocess.TimeoutExpired:
        allocator.kill()
        allocator.wait()
        return False


class Stopping(unittest.TestCase):
    def test_an_allocator_told_to_stop_while_it_waits_for_etcd_exits(self):
        # A replica started again (after losing its lead) waits for etcd before it serves; SIGTERM used to
        # wait for it too, blocked until the allocator served, so a replica whose etcd was gone could not
        # be stopped but with SIGKILL.
        with socket.socket() as closed:  # a port nothing listens on
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
        d = tempfile.mkdtemp(prefix="gpool-stopping-")
        log = os.path.join(d, "allocator.log")
        with open(log, "w") as f:
            p = subprocess.Popen([ALLOCATOR, "--listen", "127.0.0.1:0", "--db", os.path.join(d, "alloc.db"), "--store",
                                  f"etcd://127.0.0.1:{port}"], env={**os.environ, "GPOOL_ALLOCATOR_RESTARTED": "1"}, stderr=f)
        try:
            self.assertTrue(wait_for(lambda: "waiting for etcd" in open(log).read(), timeout=20), open(log).read())
            self.assertTrue(stops(p), open(log).read())
            self.assertEqual(p.returncode, 0)
            self.assertIn("signal 15 while starting: exiting", open(log).read())
        finally:
            if p.poll() is None:
                p.kill()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
