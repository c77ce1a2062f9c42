#!/usr/bin/env python3
"""Leases end to end: a real gpool-allocator (SQLite), real gpool-servers (sim backend), `gpool run`
launchers and CUDA client processes. usage: lease_flow_test.py BUILD_DIR [unittest args]"""
import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from cluster import (BUILD, GIB, GPOOL, KERNELS, LIB, MEMCAP, NVML_QUERY, POLICY, SANITIZED, SERVER_LOSS,  # noqa: F401
                     Cluster, ed25519_sign, forged, setUpModule, tearDownModule, wait_for)


class LeaseFlow(unittest.TestCase):
    def setUp(self):
        self.cluster = None
        self.children = []

    def tearDown(self):
        for p in self.children:
            if p.poll() is None:
                p.kill()
            p.communicate()
        if self.cluster:
            self.cluster.close()

    def make(self, **kw):
        self.cluster = Cluster(**kw)
        return self.cluster

    def test_halves_pack_a_third_waits_and_gets_the_gpu_within_a_second(self):
        c = self.make()
        marker = os.path.join(c.dir, "third-started")
        a = c.gpool("run", "-p", "0.5", "--", "sleep", "1.5")
        b = c.gpool("run", "-p", "0.5", "--", "sleep", "1.5")
        self.children += [a, b]
        self.assertTrue(wait_for(lambda: len(c.status()["leases"]) == 2), "two halves were not granted")
        shares = [l["shares"][0] for l in c.status()["leases"]]
        self.assertEqual({(s["server"], s["device"]) for s in shares}, {("sim0", 0)})  # packed on one GPU
        third = c.gpool("run", "-p", "0.5", "--wait", "30s", "--", "sh", "-c", f"date +%s.%N > {marker}")
        self.children.append(third)
        self.assertTrue(wait_for(lambda: len(c.status()["queue"]) == 1), "the third did not queue")
        a.wait(10)
        released_at = time.time()
        b.wait(10)
        out, err = third.communicate(timeout=10)
        self.assertEqual(third.returncode, 0, err)
        self.assertIn("position 1 in the queue", err)
        with open(marker) as f:
            started = float(f.read())
        self.assertLess(started - released_at, 1.0, f"the waiting launcher started {started - released_at:.2f} s after the release")

    def test_a_killed_launcher_loses_its_lease_after_the_heartbeat_timeout(self):
        c = self.make(ttl="1s")
        launcher = c.gpool("run", "--", "sleep", "30", start_new_session=True)
        self.children.append(launcher)
        self.assertTrue(wait_for(lambda: len(c.status()["leases"]) == 1))
        lease_id = c.status()["leases"][0]["id"]
        launcher.send_signal(signal.SIGKILL)
        killed_at = time.time()
        time.sleep(0.3)
        self.assertEqual(c.lease(lease_id)["state"], "granted")  # not before the timeout
        self.assertTrue(wait_for(lambda: c.lease(lease_id)["state"] == "ended", timeout=5))
        self.assertLess(time.time() - killed_at, 2.5)
        self.assertIn("expired", c.lease(lease_id)["end_reason"])
        os.killpg(launcher.pid, signal.SIGKILL)  # the orphaned `sleep`

    def test_signals_reach_the_command_and_the_lease_is_released(self):
        c = self.make(ttl="30s")
        marker = os.path.join(c.dir, "got-term")
        launcher = c.gpool("run", "--", "sh", "-c", f"trap 'echo term > {marker}; exit 7' TERM; sleep 30 >/dev/null 2>&1 & wait")
        self.children.append(launcher)
        self.assertTrue(wait_for(lambda: len(c.status()["leases"]) == 1))
        time.sleep(0.2)  # the command is running
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=10)
        self.assertEqual(launcher.returncode, 7, err)  # the command's status
        self.assertTrue(os.path.exists(marker))
        self.assertEqual(c.status()["leases"], [])

    def test_a_wrapper_scripts_program_gets_the_signal_and_keeps_its_lease_while_it_checkpoints(self):
        # `gpool run -- ./train.sh` where the script runs the program without exec: SIGTERM ends the shell
        # at once. The program must still be told, and its lease must last until it has exited.
        c = self.make(ttl="30s")
        program = os.path.join(c.dir, "train.py")
        with open(program, "w") as f:
            f.write("import os, signal, time\n"
                    "def checkpoint(*_):\n"
                    "    time.sleep(1.5)\n"
                    f"    open({c.dir!r} + '/checkpoint', 'w').write(os.environ['GPOOL_LEASE'])\n"
                    "    raise SystemExit(0)\n"
                    "signal.signal(signal.SIGTERM, checkpoint)\n"
                    f"open({c.dir!r} + '/ready', 'w').close()\n"
                    "time.sleep(60)\n")
        launcher = c.gpool("run", "--", "sh", "-c", f"python3 {program}; echo the shell went on")
        self.children.append(launcher)
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(c.dir, "ready")), timeout=20))
        lease_id = c.status()["leases"][0]["id"]
        launcher.send_signal(signal.SIGTERM)
        time.sleep(0.7)
        self.assertEqual(c.lease(lease_id)["state"], "granted")  # the program is checkpointing on it
        out, err = launcher.communicate(timeout=30)
        self.assertEqual(launcher.returncode, 128 + signal.SIGTERM, err)  # the command's (the shell's) status
        with open(os.path.join(c.dir, "checkpoint")) as f:
            self.assertEqual(f.read(), lease_id)
        self.assertIn("left 1 process running", err)
        self.assertEqual(c.lease(lease_id)["state"], "ended")

    def test_processes_the_command_leaves_running_end_before_its_lease_is_released(self):
        c = self.make(ttl="30s")
        pids = os.path.join(c.dir, "pids")
        # One job in the background, and one that left the session and ignores SIGTERM, as a daemon may.
        launcher = c.gpool("run", "--", "sh", "-c", f"sleep 300 >/dev/null 2>&1 & echo $! >> {pids}; "
                           f"setsid sh -c 'trap \"\" TERM; echo $$ >> {pids}; sleep 300; true' >/dev/null 2>&1 & sleep 0.5")
        self.children.append(launcher)
        out, err = launcher.communicate(timeout=60)
        self.assertEqual(launcher.returncode, 0, err)
        with open(pids) as f:
            left = [int(pid) for pid in f.read().split()]
        self.assertEqual(len(left), 2)
        for pid in left:
            self.assertRaises(ProcessLookupError, os.kill, pid, 0)
        self.assertIn("left 2 processes running", err)
        self.assertIn("SIGTERM now, SIGKILL in 10 s", err)
        self.assertIn("still running", err)  # the one that ignored SIGTERM
        self.assertEqual(c.status()["leases"], [])

    def test_a_launcher_stopped_with_its_command_keeps_the_lease(self):
        # Ctrl-Z stops gpool run and its command together, and a stopped gpool sends no heartbeat: `fg`
        # must still find the lease, and the program its GPU. (SIGSTOP: this group has no terminal, where
        # SIGTSTP would be discarded.)
        c = self.make(ttl="1s")
        go = os.path.join(c.dir, "go")
        launcher = c.gpool("run", "--", "sh", "-c", f"until [ -f {go} ]; do sleep 0.05; done; {NVML_QUERY}", start_new_session=True)
        self.children.append(launcher)
        self.assertTrue(wait_for(lambda: len(c.status()["leases"]) == 1))
        lease_id = c.status()["leases"][0]["id"]
        time.sleep(0.3)
        os.killpg(launcher.pid, signal.SIGSTOP)
        time.sleep(3.5)  # past the lease's ttl three times over
        self.assertEqual(c.lease(lease_id)["state"], "granted")
        open(go, "w").close()
        os.killpg(launcher.pid, signal.SIGCONT)
        out, err = launcher.communicate(timeout=30)
        self.assertEqual(launcher.returncode, 0, out + err)
        self.assertIn("gpool-sim", out)  # its CUDA program ran on the lease
        self.assertEqual(c.lease(lease_id)["end_reason"], "released")

    def test_a_cuda_visible_devices_meant_for_this_hosts_gpus_does_not_hide_the_lease(self):
        # A batch scheduler chose GPU 3 of the submit host; the lease has one device (0). Through the
        # inherited variable, CUDA would see none.
        c = self.make(ttl="30s")
        p = c.gpool("run", "--", NVML_QUERY, env={"CUDA_VISIBLE_DEVICES": "3,5"})
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("gpool-sim", out)
        self.assertIn("CUDA_VISIBLE_DEVICES=3,5 (inherited", err)
        # One that names a device of the lease is the user's choice among them: kept, silently.
        p = c.gpool("run", "--", "sh", "-c", f'echo "visible=$CUDA_VISIBLE_DEVICES"; {NVML_QUERY}', env={"CUDA_VISIBLE_DEVICES": "0"})
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("visible=0", out)
        self.assertIn("gpool-sim", out)
        self.assertNotIn("CUDA_VISIBLE_DEVICES", err)

    def test_gpu_types_are_shown_and_requests_run_only_on_theirs(self):
        c = self.make(ttl="30s")
        out, err = c.gpool("status").communicate(timeout=10)
        self.assertRegex(out, r"sim0:0\s+sim\s+gpool sim device", out + err)
        ok = c.gpool("run", "--gpu-type", "H100,SIM", "--", "true")  # any of them, in any case
        _, err = ok.communicate(timeout=20)
        self.assertEqual(ok.returncode, 0, err)
        refused = c.gpool("run", "--gpu-type", "H100", "--", "true")
        _, err = refused.communicate(timeout=20)
        self.assertEqual(refused.returncode, 3, err)
        self.assertIn("pool 'default' has no GPU of type H100 (its types: sim)", err)

    def test_a_signal_while_waiting_withdraws_the_request(self):
        # Ctrl-C (or SIGTERM from a job scheduler) while gpool waits in the queue: no command runs, the
        # request leaves the queue at once, and gpool exits with 128 + the signal.
        c = self.make(ttl="30s")
        holder = c.gpool("run", "--", "sleep", "30", start_new_session=True)
        self.children.append(holder)
        self.assertTrue(wait_for(lambda: len(c.status()["leases"]) == 1))
        marker = os.path.join(c.dir, "ran")
        for sig in (signal.SIGINT, signal.SIGTERM):
            waiting = c.gpool("run", "--", "touch", marker)
            self.children.append(waiting)
            self.assertTrue(wait_for(lambda: len(c.status()["queue"]) == 1), "it did not queue")
            waiting.send_signal(sig)
            _, err = waiting.communicate(timeout=10)
            self.assertEqual(waiting.returncode, 128 + sig, err)
            self.assertIn("while waiting for GPUs: request L", err)
            self.assertEqual(c.status()["queue"], [])
            self.assertFalse(os.path.exists(marker))
        os.killpg(holder.pid, signal.SIGKILL)

    @unittest.skipUnless(os.path.exists(SERVER_LOSS), "cuda_server_loss is built only with nvcc")
    def test_an_expired_lease_stops_the_worker_of_a_client_still_connected(self):
        c = self.make(ttl="1s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})  # and never heartbeated
        go = os.path.join(c.dir, "go")
        prog = subprocess.Popen([SERVER_LOSS, go], env=c.client_env(lease["shares"][0]), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        self.children.append(prog)
        self.assertEqual(prog.stdout.readline().strip(), "READY")
        self.assertTrue(wait_for(lambda: c.lease(lease["id"])["state"] == "ended", timeout=5))
        self.assertTrue(wait_for(lambda: "ended at the allocator; stopping its worker" in c.log("sim0"), timeout=5),
                        c.log("sim0"))
        open(go, "w").close()
        out, _ = prog.communicate(timeout=30)
        self.assertEqual(prog.returncode, 0, out)  # CUDA errors, not a dead program
        self.assertIn("lost the connection to gpool-server", out)

    def test_a_client_process_that_exits_releases_its_share_at_once(self):
        c = self.make(ttl="30s")
        status, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        self.assertEqual(status, 201, lease)
        run = subprocess.run([NVML_QUERY], env=c.client_env(lease["shares"][0]), capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        exited = time.time()
        self.assertTrue(wait_for(lambda: c.lease(lease["id"])["state"] == "ended", timeout=5))
        self.assertLess(time.time() - exited, 1.0)
        self.assertIn("client disconnected", c.lease(lease["id"])["end_reason"])

    def test_a_command_runs_one_cuda_process_after_another_on_its_lease(self):
        # `gpool run -- sh -c "nvidia-smi; python train.py"`: the first process leaving must not end the
        # lease under the second. The lease ends when the command does.
        c = self.make(ttl="30s")
        run = c.gpool("run", "-p", "0.5", "--", "sh", "-c", f"{NVML_QUERY} && sleep 1.5 && {NVML_QUERY}")
        out, err = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 0, out + err)
        self.assertEqual(out.count("ALL PASSED"), 2, out + err)
        self.assertTrue(wait_for(lambda: c.status()["leases"] == [], timeout=5), "the lease outlived its command")

    def test_a_process_that_starts_after_the_first_token_expired_still_connects(self):
        # A lease token admits connections for token_ttl (10 min by default) after its grant; a command may
        # start its CUDA process later (an hour of data preparation first, or an interactive shell). Its
        # launcher keeps fresh tokens where the client library reads them.
        # Here tokens last 8 s, so heartbeats come every 2 s (a quarter of token_ttl, shorter than a third of
        # lease_ttl) and renew them 2 s or more before they expire; the second process starts 9 s after the
        # grant, when the first tokens have expired.
        policy = POLICY.replace("[settings]\n", '[settings]\ntoken_ttl = "8s"\n')
        c = self.make(ttl="30s", policy=policy)
        run = c.gpool("run", "-p", "0.5", "--", "sh", "-c", f"{NVML_QUERY} && sleep 9 && {NVML_QUERY}")
        out, err = run.communicate(timeout=60)
        self.assertEqual(run.returncode, 0, out + err)
        self.assertEqual(out.count("ALL PASSED"), 2, out + err)

    def test_the_commands_own_options_are_never_taken_for_gpools(self):
        # As with sudo or env: gpool's options end where the command begins, `--` or not. (`-n 7` here
        # used to lease 7 GPUs, or fail, instead of reaching the command.)
        c = self.make(ttl="30s")
        show = 'echo "$GPOOL_FRACTION $GPOOL_SHARES|$1 $2"'
        out, err = c.gpool("run", "-p", "0.5", "sh", "-c", show, "sh", "-n", "7").communicate(timeout=30)
        fraction, args = out.strip().split("|")
        self.assertEqual(args, "-n 7", out + err)
        self.assertTrue(fraction.startswith("0.5 "), out + err)
        self.assertNotIn(",", fraction, "one share, as -n was not given to gpool")
        out, err = c.gpool("run", "--fraction=0.5", "--pool", "default", "--", "sh", "-c", show, "sh", "--pool", "x").communicate(timeout=30)
        self.assertEqual(out.strip().split("|")[1], "--pool x", out + err)
        p = c.gpool("run", "--gpus-typo", "2", "true")
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 2, "bad usage: gpool's own status 2")
        self.assertIn("--gpus-typo", err)

    def test_usage_names_the_command_and_a_fraction_is_more_than_0_and_at_most_1(self):
        # No allocator: all of this is decided before gpool asks one.
        env = dict(os.environ, GPOOL_ALLOCATOR="http://127.0.0.1:9")
        out = subprocess.run([GPOOL, "run", "--help"], env=env, capture_output=True, text=True, timeout=10).stdout
        self.assertIn("Usage: gpool run [OPTIONS]", out)
        for bad in ("0", "1.5", "-0.5", "half", "nan"):
            for flag in ("-p", "--min-fraction"):
                p = subprocess.run([GPOOL, "run", flag, bad, "--", "true"], env=env, capture_output=True, text=True, timeout=10)
                self.assertEqual(p.returncode, 2, (flag, bad, p.stderr))
                self.assertIn(f"'{bad}' is not a fraction of one GPU: give more than 0 and at most 1", p.stderr)

    def test_gpool_release_ends_a_lease_from_another_terminal(self):
        c = self.make(ttl="30s")
        holder = c.gpool("run", "--", "sleep", "30", start_new_session=True)
        self.children.append(holder)
        self.assertTrue(wait_for(lambda: len(c.status()["leases"]) == 1, timeout=10))
        lease = c.status()["leases"][0]["id"]
        p = c.gpool("release", lease, user="capped")  # not its owner
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 3, err)
        self.assertIn("is not yours", err)
        self.assertEqual(len(c.status()["leases"]), 1)
        p = c.gpool("release", "x/heartbeat")  # not an id: never a path of the API
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 2, err)
        p = c.gpool("release", lease)  # its owner, from another terminal
        out, err = p.communicate(timeout=30)
        self.assertEqual((p.returncode, out.strip()), (0, lease + " released"), err)
        self.assertEqual(c.status()["leases"], [])
        time.sleep(2)  # its launcher's long poll hears of it at once
        os.killpg(holder.pid, signal.SIGKILL)
        _, err = holder.communicate()
        self.assertIn(f"lease {lease} ended: released", err, "the launcher says so")
        out, _ = c.gpool("release", lease).communicate(timeout=30)
        self.assertEqual(out.strip(), lease + " had already ended")

    def test_gpool_usage_counts_each_users_gpu_time(self):
        c = self.make(ttl="30s")
        for fraction in ("0.5", "0.25"):
            run = c.gpool("run", "-p", fraction, "--", "sleep", "2")
            run.communicate(timeout=30)
            self.assertEqual(run.returncode, 0)
        c.gpool("run", "-p", "1", "--", "sleep", "2", user="capped").communicate(timeout=30)  # over its quota: no time
        u = json.loads(c.gpool("usage", "--json").communicate(timeout=30)[0])
        self.assertEqual(len(u["usage"]), 1, u)  # the refused request held nothing
        mine = u["usage"]
        self.assertEqual(mine[0]["leases"], 2)
        # 0.5 and 0.25 of a GPU for about 2 s each (whole seconds, the allocator's clock)
        self.assertGreaterEqual(mine[0]["gpu_seconds"], 0.75 * 1)
        self.assertLessEqual(mine[0]["gpu_seconds"], 0.75 * 4)
        # The allocator restarted: what it counted comes from its database.
        c.allocator.send_signal(signal.SIGKILL)
        c.allocator.wait()
        c.start_allocator()
        out, err = c.gpool("usage", "--since", "1h").communicate(timeout=30)
        self.assertRegex(out, r"USER\s+GROUP\s+LEASES\s+GPU-HOURS", err)
        self.assertRegex(out, rf"{re.escape(mine[0]['user'])}\s+\S+\s+2\s+0\.00\d", out)
        bad = c.gpool("usage", "--since", "forever")
        bad.communicate(timeout=30)
        self.assertEqual(bad.returncode, 2, "a bad duration is bad usage")

    def test_the_lease_file_is_its_users_alone(self):
        c = self.make(ttl="30s")
        out, err = c.gpool("run", "--", "sh", "-c", 'stat -c "%a" "$GPOOL_LEASE_FILE" "$(dirname "$GPOOL_LEASE_FILE")"; '
                           'cut -d" " -f3 "$GPOOL_LEASE_FILE"; echo "$GPOOL_TOKEN"').communicate(timeout=30)
        file_mode, dir_mode, token_in_file, token = out.split()
        self.assertEqual((file_mode, dir_mode), ("600", "700"), out + err)
        self.assertEqual(token_in_file, token)  # the shares, with the token the environment has

    def test_the_command_may_use_gpool_itself_and_its_cuda_uses_the_lease(self):
        # A job script that logs `gpool status`, or runs a sub-job with `gpool run`: the allocator is still
        # known in it, while its own CUDA processes use the lease it runs on, not one of their own.
        c = self.make(ttl="30s")
        script = (f'gpool_leases() {{ "{GPOOL}" status --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)[\'leases\']))"; }}; '
                  f'echo "leases $(gpool_leases)"; {NVML_QUERY} | tail -1; echo "leases $(gpool_leases)"')
        out, err = c.gpool("run", "-p", "0.5", "--", "sh", "-c", script).communicate(timeout=60)
        self.assertEqual(out.split("\n")[0], "leases 1", out + err)
        self.assertIn("ALL PASSED", out)
        self.assertEqual(out.strip().split("\n")[-1], "leases 1", "its CUDA process took no lease of its own: " + out + err)

    def test_the_command_finds_gpools_libcuda_first(self):
        c = self.make(ttl="30s")
        show = 'echo "$LD_LIBRARY_PATH|$TRITON_LIBCUDA_PATH"'
        out, err = c.gpool("run", "--", "sh", "-c", show, env={"LD_LIBRARY_PATH": "/opt/mine"}).communicate(timeout=30)
        ld, triton = out.strip().split("|")
        first = ld.split(":")[0]
        self.assertTrue(os.path.exists(os.path.join(first, "libcuda.so.1")), out + err)
        self.assertEqual(ld.split(":")[1:], ["/opt/mine"])
        self.assertEqual(triton, first, "Triton links its launchers against gpool's libcuda")
        out, _ = c.gpool("run", "--", "sh", "-c", show, env={"TRITON_LIBCUDA_PATH": "/opt/chosen"}).communicate(timeout=30)
        self.assertEqual(out.strip().split("|")[1], "/opt/chosen", "a path the user chose is kept")

    @unittest.skipUnless(os.path.exists(SERVER_LOSS), "cuda_server_loss is built only with nvcc")
    def test_a_lease_ends_with_its_last_client_not_its_first(self):
        # A program of several processes: one exiting must not end the lease under the others (issue 11).
        c = self.make(ttl="30s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        go = os.path.join(c.dir, "go")
        staying = subprocess.Popen([SERVER_LOSS, go], env=c.client_env(lease["shares"][0]), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        self.children.append(staying)
        self.assertEqual(staying.stdout.readline().strip(), "READY")
        run = subprocess.run([NVML_QUERY], env=c.client_env(lease["shares"][0]), capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        time.sleep(1.5)  # a lease whose client left ends within a second (the test above)
        self.assertEqual(c.lease(lease["id"])["state"], "granted")  # the first process left; the lease stays
        open(go, "w").close()
        staying.communicate(timeout=30)
        self.assertTrue(wait_for(lambda: c.lease(lease["id"])["state"] == "ended", timeout=5))  # the last one left

    def test_priorities_and_quotas_order_the_queue(self):
        c = self.make(ttl="30s")
        _, holder = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})
        _, low = c.http("POST", "/v1/leases", {"user": "v", "p": 1.0, "priority": "low", "wait": 60})
        _, high = c.http("POST", "/v1/leases", {"user": "w", "p": 1.0, "priority": "high", "wait": 60})
        self.assertEqual((low["state"], high["state"]), ("queued", "queued"))
        queue = c.status()["queue"]
        self.assertEqual([q["id"] for q in queue], [high["id"], low["id"]])
        c.http("DELETE", "/v1/leases/" + holder["id"])
        self.assertEqual(c.lease(high["id"])["state"], "granted")
        self.assertEqual(c.lease(low["id"])["state"], "queued")
        # a user at their quota waits, without holding back another user's request
        c.http("DELETE", "/v1/leases/" + high["id"])
        c.http("DELETE", "/v1/leases/" + low["id"])
        _, q1 = c.http("POST", "/v1/leases", {"user": "capped", "p": 0.5, "wait": 60})
        _, q2 = c.http("POST", "/v1/leases", {"user": "capped", "p": 0.25, "wait": 60})
        _, other = c.http("POST", "/v1/leases", {"user": "free", "p": 0.25, "wait": 60})
        self.assertEqual((q1["state"], q2["state"], other["state"]), ("granted", "queued", "granted"))
        self.assertIn("quota: user 'capped' holds 0.5 of 0.5 GPUs", q2["waiting_for"])

    def test_queues_show_guarantee_use_borrowing_and_their_limit(self):
        policy = POLICY + '\n[queues.vision]\nguarantee = {{ gpus = 0.5 }}\nlimit = {{ gpus = 1 }}\nweight = 2\nmembers = ["ann"]\n'
        c = self.make(ttl="30s", policy=policy)
        states = [c.http("POST", "/v1/leases", {"user": "ann", "p": p, "wait": 60})[1] for p in (0.5, 0.5, 0.25)]
        self.assertEqual([s["state"] for s in states], ["granted", "granted", "queued"])
        self.assertIn("quota: queue 'vision' holds 1 of its limit of 1 GPUs", states[2]["waiting_for"])
        q = c.status()["queues"]
        self.assertEqual(len(q), 1, q)
        self.assertEqual((q[0]["name"], q[0]["guarantee_gpus"], q[0]["limit_gpus"], q[0]["weight"]), ("vision", 0.5, 1, 2))
        self.assertEqual((q[0]["held_gpus"], q[0]["borrowed_gpus"], q[0]["waiting"]), (1, 0.5, 1))
        out, err = c.gpool("status").communicate(timeout=10)
        line = [ln for ln in out.splitlines() if ln.startswith("vision")]
        self.assertTrue(line, out + err)
        self.assertEqual(line[0].split()[1:], ["0.5", "1", "2", "1", "0.5", "1"], line)  # no parent: its column is empty
        metrics = urllib.request.urlopen(c.url + "/metrics").read().decode()
        for gauge in ('gpool_queue_guarantee_gpus{queue="vision"} 0.5', 'gpool_queue_held_gpus{queue="vision"} 1.0',
                      'gpool_queue_borrowed_gpus{queue="vision"} 0.5', 'gpool_queue_waiting{queue="vision"} 1'):
            self.assertIn(gauge, metrics)

    def test_a_request_sent_again_with_its_request_key_gets_the_same_lease(self):
        # A retry after a lost answer (the allocator died after writing the grant, a failover) must not make
        # a second lease: the same request_key names the same request.
        c = self.make(servers=2)
        body = {"user": "alice", "n": 1, "p": 0.5, "request_key": "retry-0123456789abcdef"}
        s1, first = c.http("POST", "/v1/leases", body)
        s2, again = c.http("POST", "/v1/leases", body)
        self.assertEqual((s1, s2), (201, 201), again)
        self.assertEqual((again["id"], again["lease_key"]), (first["id"], first["lease_key"]))
        self.assertEqual(again["shares"], first["shares"])
        self.assertEqual([x["id"] for x in c.status()["leases"] if x["request"]["user"] == "alice"], [first["id"]])
        s3, other = c.http("POST", "/v1/leases", dict(body, user="bob"))  # another user's key is another request
        self.assertEqual(s3, 201)
        self.assertNotEqual(other["id"], first["id"])
        s4, out = c.http("POST", "/v1/leases", dict(body, request_key="too-short"))
        self.assertEqual(s4, 400, out)
        c.http("DELETE", "/v1/leases/" + first["id"])
        s5, ended = c.http("POST", "/v1/leases", body)  # sent again after the release: the same, ended lease
        self.assertEqual((s5, ended["id"], ended["state"]), (202, first["id"], "ended"))

    def test_requests_that_can_never_fit_are_refused_with_the_reason(self):
        c = self.make()
        for args, reason in [(["-p", "0.3"], "offers fractions 1, 0.5, 0.25 of a GPU, not 0.3"),
                             (["-n", "2"], "asks for 2 GPUs; pool 'default' has 1"),
                             (["-m", "64GiB"], "the largest GPU in pool 'default' has 8 GiB"),
                             (["--pool", "nowhere"], "no pool named 'nowhere'")]:
            p = c.gpool("run", *args, "--", "true")
            out, err = p.communicate(timeout=10)
            self.assertEqual(p.returncode, 3, err)
            self.assertIn(reason, err)
        p = c.gpool("run", "-p", "1", "--", "true", user="capped")
        _, err = p.communicate(timeout=10)
        self.assertIn("over quota: user 'capped' may hold 0.5 GPUs", err)
        self.assertEqual(c.status()["leases"], [])

    def test_an_allocator_restart_keeps_every_lease_and_policy(self):
        c = self.make(ttl="30s")
        policy = os.path.join(c.dir, "new.toml")
        with open(policy, "w") as f:
            f.write(POLICY.format(ttl="30s").replace("[1.0, 0.5, 0.25]", "[1.0, 0.5, 0.125]\nisolation = \"spatial\""))
        out, err = c.gpool("admin", "policy", "apply", policy).communicate(timeout=10)
        self.assertIn("policy replaced", out, err)
        spatial = 'pools.default.isolation = "spatial": SM partitions are not built yet'
        self.assertIn("note: " + spatial, out, "a setting taken but not enforced is said")
        _, granted = c.http("POST", "/v1/leases", {"user": "u", "p": 0.125})
        _, queued = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0, "wait": 600})
        self.assertEqual((granted["state"], queued["state"]), ("granted", "queued"))
        c.allocator.send_signal(signal.SIGKILL)  # no chance to save anything on the way out
        c.allocator.wait()
        c.start_allocator()
        self.assertEqual(c.lease(granted["id"])["state"], "granted")
        self.assertEqual(c.lease(granted["id"])["shares"][0]["token"], granted["shares"][0]["token"])
        self.assertEqual(c.lease(queued["id"])["state"], "queued")
        self.assertIn("0.125", c.http("GET", "/v1/policy")[1])
        self.assertEqual(c.log("allocator").count("policy: " + spatial), 2, "logged as the allocator applies it, and loads it again")
        c.http("DELETE", "/v1/leases/" + granted["id"])
        # usage was restored, and released (once the server said which leases it still serves)
        self.assertTrue(wait_for(lambda: c.lease(queued["id"])["state"] == "granted"), c.lease(queued["id"]))

    def test_a_policy_the_allocator_refuses_is_a_usage_error_naming_the_key(self):
        c = self.make()
        before = c.http("GET", "/v1/policy")[1]
        bad = os.path.join(c.dir, "bad.toml")
        with open(bad, "w") as f:
            f.write('[settings]\nlease_ttl = "5 fortnights"\n')
        p = c.gpool("admin", "policy", "apply", bad)
        out, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 2, (out, err))
        self.assertIn("settings.lease_ttl", err, "the message names the key at fault")
        self.assertIn("5 fortnights", err)
        self.assertNotIn("policy replaced", out)
        self.assertEqual(c.http("GET", "/v1/policy")[1], before, "the policy in force is kept")

    def test_a_server_that_stops_heartbeating_has_its_gpus_withdrawn(self):
        c = self.make(servers=2, ttl="30s")
        _, first = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})
        silent = first["shares"][0]["server"]
        c.servers[silent].send_signal(signal.SIGSTOP)
        self.assertTrue(wait_for(lambda: not [s for s in c.status()["servers"] if s["name"] == silent][0]["up"], timeout=5))
        lease = c.lease(first["id"])
        self.assertEqual(lease["state"], "ended")
        self.assertIn(f"server {silent} stopped heartbeating", lease["end_reason"])
        _, second = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})
        self.assertNotEqual(second["shares"][0]["server"], silent)
        _, third = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})  # the silent one's GPU is not offered
        self.assertEqual(third.get("refused"), True)
        c.servers[silent].send_signal(signal.SIGCONT)
        self.assertTrue(wait_for(lambda: all(s["up"] for s in c.status()["servers"]), timeout=5))

    def test_the_server_refuses_forged_expired_and_misdirected_tokens(self):
        c = self.make(ttl="30s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        share = lease["shares"][0]

        def token(server, device, expiry, key=c.token_key):
            payload = f"{lease['id']}|{server}|{device}|{share['memory']}|0.5|{expiry}".encode()
            return "gpl2." + payload.hex() + "." + ed25519_sign(key, payload).hex()

        now = int(time.time())
        cases = [(forged(token("sim0", 0, now + 600)), "signature does not verify"), (token("sim0", 0, now + 600, key=c.server_key("sim0")), "does not verify"),
                 (token("sim0", 0, now - 5), "expired"),
                 (token("elsewhere", 0, now + 600), "names server 'elsewhere'"), (token("sim0", 3, now + 600), "is for device 3"),
                 ("", "only serves leases")]
        for tok, reason in cases:
            run = subprocess.run([NVML_QUERY], env=c.client_env(share, token=tok), capture_output=True, text=True, timeout=30)
            self.assertNotEqual(run.returncode, 0)
            self.assertTrue(wait_for(lambda: reason in c.log("sim0"), timeout=3), f"server log lacks '{reason}'")
        run = subprocess.run([NVML_QUERY], env=c.client_env(share, token=token("sim0", 0, now + 600)), capture_output=True,
                             text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)  # the same claims, signed with the token key: served

    def test_a_restarted_server_accepts_no_token_of_an_ended_lease(self):
        # The server knows which leases are live from the allocator, not from what it remembers: after a
        # restart, a token of a lease that ended meanwhile is refused (issue 11: it was served again).
        # The restart must not outlast the server timeout, or the allocator ends the live lease too (a
        # restart under the sanitizers took longer than the usual 1 s and failed the test now and then).
        c = self.make(ttl="30s", policy=POLICY.replace('server_timeout = "1s"', 'server_timeout = "20s"'))
        _, ended = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        _, live = c.http("POST", "/v1/leases", {"user": "v", "p": 0.5})
        self.assertEqual(c.http("DELETE", "/v1/leases/" + ended["id"])[0], 200)
        old = c.servers["sim0"]
        old.terminate()
        old.wait(10)
        c.start_server("sim0", 8 * GIB, listen=ended["shares"][0]["address"])  # the same address, restarted
        self.assertTrue(wait_for(lambda: "registered with allocator" in c.log("sim0"), timeout=10), c.log("sim0"))
        run = subprocess.run([NVML_QUERY], env=c.client_env(ended["shares"][0]), capture_output=True, text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertTrue(wait_for(lambda: f"lease {ended['id']} has ended" in c.log("sim0"), timeout=5), c.log("sim0"))
        run = subprocess.run([NVML_QUERY], env=c.client_env(live["shares"][0]), capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)  # a live lease is served at once after the restart

    def test_a_captured_signed_request_cannot_be_sent_again(self):
        # A heartbeat or admin change carries its time and a nonce under the signature: sent again it is
        # refused, as is one made long ago (issue 11: a replayed heartbeat kept a killed server "up").
        c = self.make(ttl="30s")
        path = "/v1/servers/sim0/heartbeat"
        captured = c.server_signature("sim0", "POST", path, b"")
        self.assertEqual(c.try_http("POST", path, b"", headers=captured)[0], 200)
        status, out = c.try_http("POST", path, b"", headers=captured)
        self.assertEqual(status, 401)
        self.assertIn("replayed", out["error"])
        old = c.server_signature("sim0", "POST", path, b"", at_ms=int(time.time() * 1000) - 10 * 60 * 1000)
        status, out = c.try_http("POST", path, b"", headers=old)
        self.assertEqual(status, 401)
        self.assertIn("stale or replayed", out["error"])
        no_key = dict(captured, **{"X-Gpool-Nonce": os.urandom(16).hex()})  # a fresh nonce without the key
        self.assertEqual(c.try_http("POST", path, b"", headers=no_key)[0], 401)
        admin = c.signature("POST", path, b"")  # the admin key does not speak for a server either
        self.assertEqual(c.try_http("POST", path, b"", headers=admin)[0], 401)

    @unittest.skipUnless(os.path.exists(SERVER_LOSS), "cuda_server_loss is built only with nvcc")
    def test_one_lease_cannot_take_every_connection_of_a_server(self):
        # Connections are counted per lease: one 0.25 token took all 64 slots of a server (issue 11).
        c = self.make(ttl="30s", server_args=["--max-clients-per-lease", "2"])
        _, greedy = c.http("POST", "/v1/leases", {"user": "g", "p": 0.5})
        _, other = c.http("POST", "/v1/leases", {"user": "o", "p": 0.5})
        go = os.path.join(c.dir, "go")
        for _ in range(2):
            prog = subprocess.Popen([SERVER_LOSS, go], env=c.client_env(greedy["shares"][0]), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            self.children.append(prog)
            self.assertEqual(prog.stdout.readline().strip(), "READY")
        run = subprocess.run([NVML_QUERY], env=c.client_env(greedy["shares"][0]), capture_output=True, text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0, run.stdout)
        self.assertTrue(wait_for(lambda: "already has 2 connections" in c.log("sim0"), timeout=5), c.log("sim0"))
        run = subprocess.run([NVML_QUERY], env=c.client_env(other["shares"][0]), capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)  # other leases are still served
        open(go, "w").close()

    def test_a_second_allocator_on_the_same_port_fails_naming_it(self):
        # httplib binds with SO_REUSEPORT: a second allocator on a port in use started, and the kernel split
        # the clients between two allocators with different state.
        import cluster
        c = self.make()
        run = subprocess.run([cluster.ALLOCATOR, "--listen", f"127.0.0.1:{c.port}", "--db", os.path.join(c.dir, "second.db"),
                              "--munge-socket", cluster.MUNGED.socket], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(run.returncode, 0, run.stderr)
        self.assertIn(f"cannot listen on 127.0.0.1:{c.port}", run.stderr)
        self.assertEqual(c.try_http("GET", "/v1/status")[0], 200)  # the first one still answers

    def test_a_program_cannot_allocate_past_its_memory_cap(self):
        c = self.make()
        p = c.gpool("run", "-m", "1GiB", "--", MEMCAP, str(GIB))
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("ALL PASSED", out)
        p = c.gpool("run", "-p", "0.25", "--", MEMCAP, str(2 * GIB))  # the fraction's share of 8 GiB
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, out + err)

    def test_a_leases_memory_cap_holds_across_all_its_processes(self):
        # One lease's processes share its cap, as they share a GPU's memory (issue 11: a second process
        # with the same token allocated a whole cap more); a process killed gives its part back.
        c = self.make(ttl="30s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5, "m": GIB})
        env = c.client_env(lease["shares"][0])
        go = os.path.join(c.dir, "go")

        def hold(nbytes):
            p = subprocess.Popen([MEMCAP, "hold", str(nbytes), go], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
            self.children.append(p)
            return p, p.stdout.readline().split()

        first, said = hold(3 * GIB // 4)
        self.assertEqual(said[0], "HELD", said)
        second, said = hold(3 * GIB // 4)
        self.assertEqual(said[0], "OOM", said)  # a second process of the lease
        self.assertEqual(int(said[1]), GIB // 4)  # and it sees what the first one left
        first.kill()
        first.wait()
        self.assertTrue(wait_for(lambda: hold(3 * GIB // 4)[1][0] == "HELD", timeout=5), "the killed process's part was not given back")
        open(go, "w").close()

    def test_two_shares_of_one_lease_on_one_gpu_each_get_their_own_memory(self):
        # `-n 2 -p 0.5` on one GPU is two devices of half its memory each. Their tokens named the same lease,
        # server and device, so the server kept one half for both: the second device's allocations failed
        # once the first held its half.
        c = self.make(ttl="30s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "n": 2, "p": 0.5})
        first, second = lease["shares"]
        self.assertEqual((first["server"], first["device"]), (second["server"], second["device"]), "both on one GPU")
        half = first["memory"]
        go = os.path.join(c.dir, "go")

        def hold(share, nbytes):
            p = subprocess.Popen([MEMCAP, "hold", str(nbytes), go], env=c.client_env(share), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            self.children.append(p)
            return p.stdout.readline().split()

        self.assertEqual(hold(first, 3 * half // 4)[0], "HELD")
        said = hold(second, 3 * half // 4)
        self.assertEqual(said[0], "HELD", said)  # the second device's half is its own
        said = hold(second, half // 2)
        self.assertEqual(said[0], "OOM", said)  # and no more than a half: its processes share it
        self.assertEqual(int(said[1]), half // 4)
        open(go, "w").close()

    def test_memory_another_process_imported_stays_charged_until_it_lets_go(self):
        # Memory one process exported (IPC) and another opened lives on while the importer holds it, also after
        # its exporter freed it or ended. It was then charged to no one: a lease could export, have its other
        # process open, free, and allocate its whole cap again, as often as it liked.
        c = self.make(ttl="60s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        share = lease["shares"][0]
        most = 3 * share["memory"] // 4

        def process():
            return self.commands(c, share)

        exporter, ex = process()
        importer, im = process()
        self.assertEqual(ex(f"alloc {most}"), "OK")
        handle = ex("export")
        self.assertEqual(im(f"open {handle}"), "OK")
        self.assertEqual(ex("free"), "OK")
        self.assertEqual(ex(f"alloc {most}"), "OOM", "freed by its exporter, the memory is still held by its importer")
        self.assertEqual(im("close"), "OK")
        self.assertEqual(ex(f"alloc {most}"), "OK", "the importer let go: the lease has its memory back")

        # An exporter that ends while its memory is imported: the lease stays charged (its worker stays) until
        # the importer lets go.
        handle = ex("export")
        self.assertEqual(im(f"open {handle}"), "OK")
        exporter.communicate(timeout=30)  # (its input ends: it exits)
        later, again = process()
        self.assertEqual(again(f"alloc {most}"), "OOM", "the exporter ended; its memory is still imported")
        self.assertEqual(im("close"), "OK")
        self.assertTrue(wait_for(lambda: again(f"alloc {most}") == "OK", timeout=10), "the importer let go")
        for p in (importer, later):
            p.communicate(timeout=30)

    def commands(self, c, share):
        """A CUDA process of `share`'s that allocates, exports and opens memory as told (memcap_probe commands),
        and a function that tells it one command and returns its answer."""
        log = open(os.path.join(c.dir, f"commands-{len(self.children)}.log"), "w")  # the client library's warnings
        p = subprocess.Popen([MEMCAP, "commands"], env=c.client_env(share), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=log, text=True)
        log.close()
        p.log = log.name
        self.children.append(p)

        def ask(line):
            p.stdin.write(line + "\n")
            p.stdin.flush()
            return p.stdout.readline().strip()
        return p, ask

    def two_processes_of_a_lease(self):
        """A cluster, a 0.25 lease's share, three quarters of its memory, and two of its processes that take
        commands (commands())."""
        c = self.make(ttl="60s")
        # (held past its processes, as `gpool run` holds one: a process that comes after the others left
        # must find it still granted, not ended with its last client a moment before)
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25, "ends_with_clients": False})
        share = lease["shares"][0]
        return c, share, 3 * share["memory"] // 4, self.commands(c, share), self.commands(c, share)

    def test_memory_one_process_freed_is_free_for_the_next_at_once(self):
        # cuMemFree returns once the memory is free, as CUDA's does: another process of the lease that it
        # then tells may allocate it. It used to be sent without waiting (and batched for up to 500 us), so
        # the other process's allocation could find the lease's memory still full.
        _, _, most, (one, a), (two, b) = self.two_processes_of_a_lease()
        for _ in range(20):
            self.assertEqual(a(f"alloc {most}"), "OK")
            self.assertEqual(a("free"), "OK")
            self.assertEqual(b(f"alloc {most}"), "OK", "the first process's memory was free when its cuMemFree returned")
            self.assertEqual(b("free"), "OK")
        one.communicate(timeout=30)
        two.communicate(timeout=30)

    def test_two_processes_that_imported_each_others_memory_both_end(self):
        # A worker whose client ended waits for the processes holding its memory; two that imported from each
        # other would wait for each other for ever, so each lets go of what its client imported first.
        c, share, most, (one, a), (two, b) = self.two_processes_of_a_lease()
        self.assertEqual(a(f"alloc {most // 2}"), "OK")
        self.assertEqual(b(f"alloc {most // 2}"), "OK")
        mine, theirs = a("export"), b("export")
        self.assertEqual(a(f"open {theirs}"), "OK")
        self.assertEqual(b(f"open {mine}"), "OK")
        one.communicate(timeout=30)
        two.communicate(timeout=30)
        later, again = self.commands(c, share)
        self.assertTrue(wait_for(lambda: again(f"alloc {most}") == "OK", timeout=10), c.log("sim0"))
        later.communicate(timeout=30)

    def end_a_lease_whose_memory_another_lease_imported(self, exporter_left_first):
        """Lease A's process exports memory that lease B's process opens, then A's lease ends (A's process
        having left first, or still connected). A's worker stays, with A's share held at the allocator, until
        B's process lets go."""
        import re
        c = self.make(ttl="60s")
        _, exporting = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        _, importing = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        (exporter, ex), (importer, im) = self.commands(c, exporting["shares"][0]), self.commands(c, importing["shares"][0])
        self.assertEqual(ex(f"alloc {exporting['shares'][0]['memory'] // 2}"), "OK")
        self.assertEqual(im("open " + ex("export")), "OK")
        if exporter_left_first:
            exporter.communicate(timeout=30)
        c.http("DELETE", "/v1/leases/" + exporting["id"])
        stopping = re.compile(f"lease {exporting['id']} ended at the allocator; stopping its worker (\\d+)")
        self.assertTrue(wait_for(lambda: stopping.search(c.log("sim0")), timeout=15), c.log("sim0"))
        pid = int(stopping.search(c.log("sim0")).group(1))
        if not exporter_left_first:
            stopped = re.compile(f"worker {pid} \\(lease {exporting['id']}\\): closing connection to .*: its lease ended at the allocator")
            self.assertTrue(wait_for(lambda: stopped.search(c.log("sim0")), timeout=10), c.log("sim0"))
            self.assertNotEqual(ex("alloc 1"), "OK", "the ended lease's process is served no more")
            with open(exporter.log) as f:  # and the program's CUDA library says why
                self.assertRegex(f.read(), r"lost the connection to gpool-server at 127\.0\.0\.1:\d+ \(the worker ended the "
                                 r"connection: its lease ended at the allocator \(released, expired, preempted or past its "
                                 r"time limit\)\); CUDA calls now fail with CUDA_ERROR_DEVICE_UNAVAILABLE")
        time.sleep(0.5)
        with open(f"/proc/{pid}/stat") as f:
            self.assertNotIn(f.read().split()[2], ("Z", "X"), "the worker stays while its memory is imported")
        self.assertEqual(c.lease(exporting["id"])["state"], "ended")

        def held():  # what the allocator counts on the GPU for ended leases, and `gpool status` says of it
            return [d["lease"] for d in c.status()["servers"][0]["ended_leases_held"]]
        self.assertTrue(wait_for(lambda: held() == [exporting["id"]], timeout=10), c.status())
        out, _ = c.gpool("status").communicate(timeout=30)
        self.assertIn(f"sim0:0: 25% held by ended lease {exporting['id']} until its last worker there ends", out)
        self.assertEqual(im("close"), "OK")
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=10), "the importer let go: it ends")
        self.assertTrue(wait_for(lambda: held() == [], timeout=10), c.status())
        importer.communicate(timeout=30)
        exporter.communicate(timeout=30)

    def test_a_worker_holding_memory_for_another_lease_stays_past_its_leases_end(self):
        # The memory lives on while another lease's process holds it: the exporter's worker stays, and keeps
        # its lease's share held at the allocator, also once that lease has ended.
        self.end_a_lease_whose_memory_another_lease_imported(exporter_left_first=True)

    def test_a_lease_ended_while_its_process_runs_keeps_memory_another_lease_imported_held(self):
        # The lease ends while its process is still connected: its worker stops serving that process, and
        # stays as above. It used to die at once (SIGTERM), and the memory the importer kept was then
        # counted for no lease.
        self.end_a_lease_whose_memory_another_lease_imported(exporter_left_first=False)

    def test_a_worker_whose_process_left_keeps_only_the_memory_another_lease_holds(self):
        # A's process leaves while B's process holds memory A exported. A's worker stays for it, but frees the
        # rest of A's memory, and closes the memory of B's that A had opened, which it used to keep mapped
        # (and alive) after B's worker no longer counted it held (client_departure.cpp).
        import re
        c = self.make(ttl="60s")
        _, a = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        _, b = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        (pa, ask_a), (pb, ask_b) = self.commands(c, a["shares"][0]), self.commands(c, b["shares"][0])
        mib = 1 << 20
        self.assertEqual(ask_a(f"alloc {8 * mib}"), "OK")
        exported = ask_a("export")
        self.assertEqual(ask_a(f"alloc {24 * mib}"), "OK")  # A's own, which nobody else holds
        self.assertEqual(ask_b(f"alloc {4 * mib}"), "OK")
        self.assertEqual(ask_a("open " + ask_b("export")), "OK")
        self.assertEqual(ask_b("open " + exported), "OK")

        def memory(lease):
            return self.lease_memory(c, lease)
        self.assertTrue(wait_for(lambda: memory(a) == 32 * mib, timeout=10), memory(a))

        def worker(lease):
            return self.worker_of(c, lease)

        def memfds(pid, size):  # the sim's device memory that a worker maps: {inode} of mappings of `size` bytes
            found = set()
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    fields = line.split()
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    if len(fields) > 5 and "gpool-sim-memory" in fields[5] and end - start == size:
                        found.add(fields[4])
            return found
        worker_a, worker_b = worker(a), worker(b)
        b_own = memfds(worker_b, 4 * mib)
        self.assertEqual(len(b_own), 1)
        self.assertEqual(memfds(worker_a, 4 * mib), b_own, "A's worker maps what A opened of B's")

        pa.communicate(timeout=30)
        self.assertTrue(wait_for(lambda: memory(a) == 8 * mib, timeout=10),
                        f"only what B holds stays counted: {memory(a)}\n" + c.log("sim0"))
        self.assertTrue(os.path.exists(f"/proc/{worker_a}"), "A's worker stays for what B holds")
        self.assertEqual(memfds(worker_a, 4 * mib), set(), "and no longer maps B's memory")
        left = re.compile(rf"worker {worker_a} \(lease L[0-9a-f]+\): the client left; freed \d+ bytes of its device memory "
                          rf"no other process holds, kept {8 * mib} bytes")  # (the server relays the worker's lines: soon)
        self.assertTrue(wait_for(lambda: left.search(c.log("sim0")), timeout=10), c.log("sim0"))
        self.assertEqual(ask_b("close"), "OK")
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{worker_a}"), timeout=10), "B let go: A's worker ends")
        pb.communicate(timeout=30)

    @staticmethod
    def lease_memory(c, lease):
        """What the lease's workers count, as the allocator shows it."""
        found = [x for x in c.status()["leases"] if x["id"] == lease["id"]]
        return found[0].get("use", {}).get("memory") if found else None

    @staticmethod
    def worker_of(c, lease):
        """The pid of the (first) worker gpool-server started for the lease."""
        return int(re.search(r"→ worker (\d+) on device 0 for lease " + lease["id"], c.log("sim0")).group(1))

    def test_memory_another_lease_holds_stays_charged_after_its_exporters_worker_was_killed(self):
        # A worker that ends before its importers let go (killed, crashed, or ended by its bound 10 s after
        # its lease: revocation.h) leaves memory that another process holds alive. It was charged to no lease
        # from then on; gpool-server now keeps the exporter's lease charged for it, and its share held at the
        # allocator once the lease ended, until the importer lets go (held_exports.h).
        c = self.make(ttl="60s")
        _, a = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        _, b = c.http("POST", "/v1/leases", {"user": "u", "p": 0.25})
        (pa, ask_a), (pb, ask_b) = self.commands(c, a["shares"][0]), self.commands(c, b["shares"][0])
        mib, cap = 1 << 20, a["shares"][0]["memory"]
        self.assertEqual(ask_a(f"alloc {8 * mib}"), "OK")
        self.assertEqual(ask_b("open " + ask_a("export")), "OK")
        self.assertEqual(ask_a(f"alloc {24 * mib}"), "OK")
        self.assertTrue(wait_for(lambda: self.lease_memory(c, a) == 32 * mib, timeout=10), self.lease_memory(c, a))
        worker = self.worker_of(c, a)
        os.kill(worker, signal.SIGKILL)
        self.assertTrue(wait_for(lambda: self.lease_memory(c, a) == 8 * mib, timeout=10),
                        f"what B holds stays counted: {self.lease_memory(c, a)}\n" + c.log("sim0"))
        self.assertIn(f"worker {worker} ended while other processes hold {8 * mib} bytes of memory it exported; lease "
                      f"{a['id']} stays charged for them until they let go", c.log("sim0"))
        later, again = self.commands(c, a["shares"][0])
        self.assertEqual(again(f"alloc {cap - 4 * mib}"), "OOM", "A's next process has A's memory but what B holds")
        self.assertEqual(again(f"alloc {cap - 8 * mib}"), "OK")
        later.communicate(timeout=30)

        c.http("DELETE", "/v1/leases/" + a["id"])

        def held():  # ended leases whose share the allocator still holds on the GPU
            return [d["lease"] for d in c.status()["servers"][0]["ended_leases_held"]]
        self.assertTrue(wait_for(lambda: held() == [a["id"]], timeout=10), c.status())
        self.assertEqual(ask_b("close"), "OK")
        self.assertTrue(wait_for(lambda: held() == [], timeout=10), c.log("sim0"))
        self.assertIn(f"the other processes let go of the memory worker {worker} exported; lease {a['id']} no longer pays "
                      "for it", c.log("sim0"))
        for p in (pa, pb):
            p.communicate(timeout=30)

    @unittest.skipUnless(os.path.exists(os.path.join(BUILD, "tests", "cuda_compute_share")),
                         "no cuda_compute_share in this build (the sanitizer build has no CUDA programs)")
    def test_a_worker_inside_a_kernel_that_does_not_end_ends_a_while_after_its_lease(self):
        # Ending its lease stops a worker once the call it is in returns, but no later than its bound
        # (revocation.h, kStopGraceMs): a kernel that runs on does not keep the GPU from the next lease.
        import re
        c = self.make(ttl="60s", server_args=["--sim-kernels", KERNELS])
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})
        spinning = subprocess.Popen([os.path.join(BUILD, "tests", "cuda_compute_share"), "120", str(100 * 10**6)],
                                    env=c.client_env(lease["shares"][0]), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)  # 100-second kernels
        self.children.append(spinning)
        worker = re.compile(r"→ worker (\d+) on device 0 for lease " + lease["id"])
        self.assertTrue(wait_for(lambda: worker.search(c.log("sim0")), timeout=10), c.log("sim0"))
        pid = int(worker.search(c.log("sim0")).group(1))
        time.sleep(1)  # inside the first kernel
        c.http("DELETE", "/v1/leases/" + lease["id"])
        ended = time.monotonic()
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30), c.log("sim0"))
        self.assertGreater(time.monotonic() - ended, 5, "it had its bound to return from the kernel")
        self.assertTrue(wait_for(lambda: "still inside a driver call 10000 ms after SIGTERM; ending now" in c.log("sim0"), timeout=10),
                        c.log("sim0"))  # (its last line, relayed by the server once it ended)
        _, after = c.http("POST", "/v1/leases", {"user": "v", "p": 1.0, "wait": 10})
        self.assertTrue(wait_for(lambda: c.lease(after["id"])["state"] == "granted", timeout=10), c.lease(after["id"]))
        spinning.communicate(timeout=30)

    def test_an_ended_leases_share_is_not_granted_again_while_its_worker_runs(self):
        # The allocator holds an ended lease's share until its server reports the worker gone, and names the
        # lease in every heartbeat answer until then (issue 11: revocations were sent once, and the share
        # was granted again at once, while the revoked worker still ran).
        import re
        c = self.make(ttl="1s")
        _, a = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})  # never heartbeated: it expires
        go = os.path.join(c.dir, "go")
        holder = subprocess.Popen([MEMCAP, "hold", str(GIB // 4), go], env=c.client_env(a["shares"][0]), stdout=subprocess.PIPE,
                                  text=True)
        self.children.append(holder)
        self.assertEqual(holder.stdout.readline().split()[0], "HELD")
        worker = int(re.search(r"→ worker (\d+) on device 0 for lease " + a["id"], c.log("sim0")).group(1))
        os.kill(worker, signal.SIGSTOP)  # it cannot stop when told to
        _, b = c.http("POST", "/v1/leases", {"user": "v", "p": 1.0, "wait": 60})
        waiting = lambda: c.lease(b["id"])["state"] == "queued"  # noqa: E731 (its owner's polls keep it queued)
        self.assertTrue(wait_for(lambda: waiting() and c.lease(a["id"])["state"] == "ended", timeout=5))
        self.assertTrue(wait_for(lambda: waiting() and c.log("sim0").count(f"lease {a['id']} ended at the allocator") >= 2,
                                 timeout=5), "the revocation was not sent again")
        self.assertEqual(c.lease(b["id"])["state"], "queued")  # the GPU is still taken by a's worker
        os.kill(worker, signal.SIGCONT)  # now it stops
        self.assertTrue(wait_for(lambda: c.lease(b["id"])["state"] == "granted", timeout=5))
        open(go, "w").close()

    def test_a_client_that_leaves_while_its_lease_is_confirmed_gets_no_worker(self):
        c = self.make(ttl="30s")
        _, lease = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        c.allocator.send_signal(signal.SIGSTOP)  # the server cannot confirm the new lease for now
        try:
            client = subprocess.Popen([NVML_QUERY], env=c.client_env(lease["shares"][0]), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            self.assertTrue(wait_for(lambda: "waits for the allocator" in c.log("sim0") or "→ worker" in c.log("sim0"), timeout=5))
            if "→ worker" in c.log("sim0"):
                self.skipTest("the server learnt of the lease before the allocator stopped")
            client.kill()
            client.wait()
        finally:
            c.allocator.send_signal(signal.SIGCONT)
        self.assertTrue(wait_for(lambda: "left before its lease" in c.log("sim0"), timeout=10), c.log("sim0"))
        self.assertNotIn("→ worker", c.log("sim0"))

    def test_malformed_requests_get_clear_errors_and_nothing_is_lost(self):
        c = self.make(ttl="30s")
        _, kept = c.http("POST", "/v1/leases", {"user": "u", "p": 0.5})
        for body, reason in [(b"{not json", "must be a JSON object"), ({"user": "u", "n": 0}, "n must be an integer"),
                             ({"user": "u", "p": 2}, "p must be a number in (0, 1]"), ({"user": "u", "m": -1}, "m must be"),
                             ({"user": "u", "m": "lots"}, "not a size"), ({"p": 0.5}, "who is asking?"),
                             ({"user": "u", "gpus": 1}, "unknown field 'gpus'"), ({"user": "u", "wait": [1]}, "wait must be"),
                             ({"user": "u", "n": 10**12}, "n must be")]:
            status, out = c.http("POST", "/v1/leases", body)
            self.assertIn(status, (400, 401, 422), (body, out))
            self.assertIn(reason, out["error"], body)
        status, out = c.http("POST", "/v1/leases", {"user": "u" * 100}, signed=True)  # an admin, for another user
        self.assertEqual(status, 422, out)
        self.assertIn("short names", out["error"])
        self.assertEqual(c.http("PUT", "/v1/policy", "[pools.default]\n")[0], 401)  # admin changes are signed
        self.assertEqual(c.http("POST", "/v1/servers/sim0/drain", {"drain": True})[0], 401)
        status, out = c.http("PUT", "/v1/policy", "[pools.default]\nfractions = [7]\n", signed=True)
        self.assertEqual(status, 400)
        self.assertIn("pools.default.fractions: 7", out["error"])
        self.assertEqual(c.http("GET", "/v1/leases/nosuchlease")[0], 404)
        self.assertEqual(c.http("POST", "/v1/servers", {"name": "x", "address": "1:2", "gpus": []})[0], 401)  # unsigned
        for bad, reason in [({"name": "sim0", "address": "", "gpus": [{"index": 0, "memory": 1}]}, "an address"),
                            ({"name": "sim0", "address": "1:2", "gpus": [{"index": 0, "memory": -5}]}, "non-negative")]:
            body = json.dumps(bad).encode()
            status, out = c.try_http("POST", "/v1/servers", body, headers=c.server_signature("sim0", "POST", "/v1/servers", body))
            self.assertEqual(status, 400, out)
            self.assertIn(reason, out["error"])
        self.assertEqual(c.http("DELETE", "/v1/leases/nosuchlease")[0], 404)
        self.assertEqual([l["id"] for l in c.status()["leases"]], [kept["id"]])
        self.assertIn("0.25", c.http("GET", "/v1/policy")[1])  # the bad policy changed nothing
        metrics = urllib.request.urlopen(c.url + "/metrics").read().decode()
        self.assertIn('gpool_lease_requests_total{outcome="granted"} 1', metrics)
        self.assertIn("gpool_shares_in_use 1", metrics)

    def test_a_chunked_body_is_refused_before_it_is_read(self):
        # The body limit (1 MiB) holds however a body is encoded: a chunked one is refused from its headers,
        # not read (issue 11: 1 GiB was read, 1.2 GB of memory).
        import http.client
        c = self.make(ttl="30s")
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
        chunk = b"[" + b" " * (1 << 20)

        def chunks():
            for _ in range(64):
                yield chunk

        try:
            conn.request("POST", "/v1/leases", body=chunks(), headers={"Content-Type": "application/json"}, encode_chunked=True)
            r = conn.getresponse()
            status, text = r.status, r.read().decode()
        except (ConnectionError, BrokenPipeError):
            status, text = 0, ""  # closed before we finished sending: also not read
        finally:
            conn.close()
        self.assertIn(status, (0, 411, 413), text)
        if status:
            self.assertIn("Content-Length", text)
        self.assertEqual(c.http("GET", "/v1/status")[0], 200)  # and it still answers

    def test_names_with_control_characters_are_refused(self):
        # Names reach logs and `gpool status`: a terminal escape or a newline in one is refused at the door.
        c = self.make(ttl="30s")
        for field in ("user", "group", "pool", "priority"):
            body = {"user": "eve", "p": 0.5, field: "eve\x1b[2J\nforged"}
            status, out = c.http("POST", "/v1/leases", body)
            self.assertEqual(status, 400, field)
            self.assertIn(f"{field} must be printable", out["error"])
        self.assertEqual(c.status()["leases"], [])

    def test_a_program_with_only_the_allocator_address_gets_its_lease_at_cuinit(self):
        c = self.make(ttl="30s")
        env = dict(os.environ, GPOOL_ALLOCATOR=c.url, GPOOL_FRACTION="0.5", LD_LIBRARY_PATH=LIB, GPOOL_LOG_LEVEL="info",
                   GPOOL_BIN=GPOOL, GPOOL_MUNGE_SOCKET=cluster.MUNGED.socket, GPOOL_TIME_LIMIT="90m")
        env.pop("GPOOL_SERVER", None)
        env.pop("GPOOL_TOKEN", None)
        run = subprocess.run([NVML_QUERY], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("4096, 0, gpool-sim", run.stdout)  # half of the 8 GiB sim GPU: the lease's cap
        got = re.search(r"lease (L[0-9a-f]+) from http://127\.0\.0\.1:\d+: 127\.0\.0\.1:\d+ device 0", run.stderr)
        self.assertIsNotNone(got, run.stderr)
        self.assertEqual(c.lease(got.group(1))["request"]["time_limit_ms"], 90 * 60 * 1000)  # GPOOL_TIME_LIMIT
        exited = time.time()
        self.assertTrue(wait_for(lambda: c.status()["leases"] == [], timeout=5), "the lease was not released")
        self.assertLess(time.time() - exited, 1.0)

    @unittest.skipIf(SANITIZED, "a Python program cannot load the sanitizer-built client library")
    def test_a_lease_helper_that_answers_nonsense_grants_nothing(self):
        # The client library reads what `gpool lease` (GPOOL_BIN) prints: fields that are not text, or no JSON,
        # are no lease: cuInit fails with a message, and the program goes on (no exception out of the library).
        import tempfile
        d = tempfile.mkdtemp(prefix="gpool-fake-helper-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", d]))
        helper = os.path.join(d, "fake-gpool")
        program = "import ctypes, sys; sys.exit(ctypes.CDLL('libcuda.so.1').cuInit(0))\n"
        for answer in ('{"GPOOL_SERVER": 5, "GPOOL_TOKEN": "t"}', '{"GPOOL_SERVER": "h:1", "GPOOL_TOKEN": ["t"]}',
                       '{"GPOOL_SERVER": "h:1", "GPOOL_TOKEN": "t", "GPOOL_SHARES": 7}', 'not json', ''):
            with open(helper, "w") as f:
                f.write("#!/bin/sh\necho '%s'\ncat > /dev/null\n" % answer)
            os.chmod(helper, 0o755)
            env = dict(os.environ, GPOOL_ALLOCATOR="http://127.0.0.1:9", LD_LIBRARY_PATH=LIB, GPOOL_BIN=helper)
            for name in ("GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_SHARES", "GPOOL_LEASE_FILE"):
                env.pop(name, None)
            run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=30)
            self.assertGreater(run.returncode, 0, answer + ": " + run.stderr)  # a CUresult, not a signal or 0
            self.assertNotIn("terminate called", run.stderr, answer)
            self.assertRegex(run.stderr, r"did not grant a lease|GPOOL_SHARES", answer)

    @unittest.skipIf(SANITIZED, "a Python program cannot load the sanitizer-built client library")
    def test_processes_a_program_starts_share_the_lease_it_got_at_cuinit(self):
        # One whole GPU: a child given a lease of its own would wait for its parent's to end, forever. The
        # child starts after the lease's first tokens expired (token_ttl 8 s): it reads renewed ones.
        c = self.make(ttl="30s", policy=POLICY.replace("[settings]\n", '[settings]\ntoken_ttl = "8s"\n'))
        env = dict(os.environ, GPOOL_ALLOCATOR=c.url, LD_LIBRARY_PATH=LIB, GPOOL_LOG_LEVEL="info", GPOOL_WAIT="3s",
                   GPOOL_BIN=GPOOL, GPOOL_MUNGE_SOCKET=cluster.MUNGED.socket)
        for name in ("GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_SHARES", "GPOOL_LEASE_FILE"):
            env.pop(name, None)
        parent = ("import ctypes, subprocess, sys\n"
                  "assert ctypes.CDLL('libcuda.so.1').cuInit(0) == 0\n"
                  "import time; time.sleep(9)\n"
                  "sys.exit(subprocess.run([sys.argv[1]]).returncode)\n")
        run = subprocess.run([sys.executable, "-c", parent, NVML_QUERY], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("ALL PASSED", run.stdout)
        self.assertEqual(len(re.findall(r"lease L[0-9a-f]+ from", run.stderr)), 1, "one lease for both: " + run.stderr)
        self.assertTrue(wait_for(lambda: c.status()["leases"] == [], timeout=5), "the lease was not released")

    def test_random_requests_never_take_the_allocator_down(self):
        import random
        c = self.make(ttl="30s")
        rng = random.Random(1234)
        values = [None, True, -1, 0, 1, 2**63, -2**63, 1e308, -0.0, 0.5, "", "x" * 5000, "16GiB", "-3GiB", "1e99", [], {},
                  [1, 2], {"a": 1}, "../../etc", "\u0000", "forever"]
        fields = ["n", "p", "m", "user", "group", "pool", "priority", "wait", "name", "address", "gpus", "index", "memory"]
        statuses = set()
        for i in range(400):
            body = {rng.choice(fields): rng.choice(values) for _ in range(rng.randint(0, 5))}
            if rng.random() < 0.5:
                body["user"] = "fuzz"
            kind = rng.randrange(5)
            if kind == 0:
                status, _ = c.try_http("POST", "/v1/leases", body, headers=c.bearer("fuzz"))
            elif kind == 1:
                body["name"] = "sim0"
                data = json.dumps(body).encode()
                status, _ = c.try_http("POST", "/v1/servers", data, headers=c.server_signature("sim0", "POST", "/v1/servers", data))
            elif kind == 2:
                status, _ = c.try_http("PUT", "/v1/policy", rng.choice(["", "[", "[pools.x]\nfractions=[0]", "a=1", "\u0000" * 3,
                                                                        "[pools.default]\nservers=[1]"]), signed=True)
            elif kind == 3:
                status, _ = c.try_http("POST", "/v1/leases", bytes(rng.randrange(256) for _ in range(rng.randrange(64))))
            else:
                status, _ = c.try_http("GET", "/v1/leases/" + "".join(rng.choice("abcL0123%/.") for _ in range(rng.randrange(30))))
            self.assertNotEqual(status, 0, f"the allocator stopped answering after request {i}: {body}")
            self.assertLess(status, 500, f"request {i} (kind {kind}) caused a server error: {body}: {c.log('allocator')[-400:]}")
            statuses.add(status)
        self.assertEqual(c.allocator.poll(), None)
        self.assertTrue({400, 422}.issubset(statuses) or {400, 409}.issubset(statuses), statuses)
        self.assertEqual(c.http("GET", "/v1/status")[0], 200)

    def test_gpool_status_and_drain(self):
        c = self.make(servers=2)
        out, err = c.gpool("admin", "drain", "sim1").communicate(timeout=10)
        self.assertIn("sim1 drained", out, err)
        s = c.gpool("status")
        out, _ = s.communicate(timeout=10)
        self.assertRegex(out, r"sim1\s+127\.0\.0\.1:\d+\s+default\s+drain")
        j = json.loads(c.gpool("status", "--json").communicate(timeout=10)[0])
        self.assertEqual([x["drain"] for x in j["servers"]], [False, True])
        _, a = c.http("POST", "/v1/leases", {"user": "u", "p": 1.0})
        self.assertEqual(a["shares"][0]["server"], "sim0")


    def test_the_users_jit_caches_past_jit_cache_max_go_least_recently_used_first(self):
        import shutil
        import tempfile
        jit = tempfile.mkdtemp(prefix="gpool-jit-")
        try:
            for user, age in (("stale", 7200), ("older", 3600), ("recent", 60)):  # 4000 bytes each
                os.makedirs(os.path.join(jit, user, "sim-ComputeCache"))
                with open(os.path.join(jit, user, "sim-ComputeCache", "entry"), "wb") as f:
                    f.write(b"x" * 4000)
                os.utime(os.path.join(jit, user), (time.time() - age,) * 2)
            c = self.make(jit_cache=jit, server_args=["--jit-cache-max", "5000"])
            self.assertEqual(os.listdir(jit), ["recent"])
            self.assertRegex(c.log("sim0"), r"JIT caches past --jit-cache-max \(\d+ MiB\): removed \d+ MiB, the caches of 2 "
                             r"user\(s\) unused longest: stale, older")
        finally:
            shutil.rmtree(jit)


class SimHostMemory(unittest.TestCase):
    """On sim the device's memory is host memory: the server holds --sim-memory in all, not per worker
    (issue 11: 64 workers could each take that much)."""

    def test_the_sim_device_memory_is_one_budget_for_every_client(self):
        import tempfile
        import shutil
        from cluster import SERVER, free_port
        d = tempfile.mkdtemp(prefix="gpool-sim-memory-")
        port = free_port()
        with open(os.path.join(d, "server.log"), "w") as log:
            server = subprocess.Popen([SERVER, "--listen", f"127.0.0.1:{port}", "--backend", "sim", "--sim-memory", str(GIB),
                                       "--module-cache", "none"], stderr=log)
        go = os.path.join(d, "go")
        env = dict(os.environ, GPOOL_SERVER=f"127.0.0.1:{port}", LD_LIBRARY_PATH=LIB)
        procs = []
        try:
            self.assertTrue(wait_for(lambda: "listening on" in open(os.path.join(d, "server.log")).read(), timeout=10))

            def hold(nbytes):
                p = subprocess.Popen([MEMCAP, "hold", str(nbytes), go], env=env, stdout=subprocess.PIPE, text=True)
                procs.append(p)
                return p.stdout.readline().split()

            self.assertEqual(hold(3 * GIB // 4)[0], "HELD")
            said = hold(3 * GIB // 4)
            self.assertEqual(said[0], "OOM", said)  # another client, another worker: the same device
            self.assertEqual(int(said[1]), GIB // 4)
            self.assertEqual(hold(GIB // 8)[0], "HELD")
        finally:
            open(go, "w").close()
            for p in procs:
                p.wait(10)
            server.terminate()
            server.wait(10)
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
