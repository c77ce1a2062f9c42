#!/usr/bin/env python3
"""Multi-GPU leases end to end (issue 12): a real allocator, two sim gpool-servers, and `gpool run -n 2`
running a CUDA program (tests/cuda_programs/multi_device.cu) that uses both devices together.
usage: multi_gpu_test.py BUILD_DIR [unittest args]"""
import json
import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402
from cluster import BUILD, GIB, GPOOL, KERNELS, LIB, Cluster, setUpModule, tearDownModule, wait_for  # noqa: E402,F401

PROGRAM = os.path.join(BUILD, "tests", "cuda_multi_device")
NCCL_PROGRAM = os.path.join(BUILD, "tests", "cuda_nccl_all_reduce")
LIST_DEVICES = os.path.join(BUILD, "tests", "list_devices")

# Run under one `gpool run` (one lease): lists the devices each CUDA_VISIBLE_DEVICES value shows, as JSON
# {value: [uuid, ...] or "NO DEVICE <error>", "stderr " + value: what gpool said}. The values come from
# argv; "UUID1"/"UUID0" in one are replaced by the device's UUID read with the variable unset, and
# "UUID1[:N]" by its first N characters. A value written "hold:VALUE" keeps its devices for 60 s.
LIST_UNDER_VALUES = r"""
import json, os, re, subprocess, sys
def devices(value, hold=False):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if hold:
        env["LIST_DEVICES_HOLD_S"] = "60"
    if value is not None:
        env["CUDA_VISIBLE_DEVICES"] = value
    run = subprocess.run([sys.argv[1]], env=env, capture_output=True, text=True, timeout=120)
    lines = run.stdout.split("\n")
    found = [l.split()[2] for l in lines if l.startswith("DEVICE ")]
    return (found or [l for l in lines if l.startswith("NO DEVICE")][0]), run.stderr
uuids, _ = devices(None)
out = {"all": uuids}
for value in sys.argv[2:]:
    real = re.sub(r"UUID(\d)(\[:(\d+)\])?", lambda m: uuids[int(m.group(1))][: int(m.group(3)) if m.group(3) else None], value)
    out[value], out["stderr " + value] = devices(real.removeprefix("hold:"), real.startswith("hold:"))
print(json.dumps(out))
"""


class MultiGpu(unittest.TestCase):
    def setUp(self):
        self.cluster = Cluster(servers=2, ttl="30s", memory=GIB, server_args=["--sim-kernels", KERNELS])

    def tearDown(self):
        self.cluster.close()

    def run_program(self, *args, env=None):
        p = self.cluster.gpool("run", *args, "--", PROGRAM, env=env or {})
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("ALL PASSED", out, out + err)
        self.assertNotIn("FAIL", out)
        where = re.search(r"lease L[0-9a-f]+: 2 x [0-9.]+ GPU on (.*)", err)
        self.assertIsNotNone(where, err)
        return out, re.findall(r"(sim\d):\d+", where.group(1)), err

    def test_two_halves_land_on_one_server_and_are_two_devices(self):
        out, servers, err = self.run_program("-n", "2", "-p", "0.5", env={"GPOOL_LOG_LEVEL": "debug"})
        self.assertEqual(len(servers), 2)
        self.assertEqual(len(set(servers)), 1, "two halves fit one server's GPU: " + str(servers))
        self.assertIn("PASS  cudaGetDeviceCount is the lease's 2 shares", out)
        # One host: large copies go between the workers through CUDA IPC; the workers send what IPC cannot
        # share (small allocations on sim) to each other over a link.
        self.assertRegex(err, r"copies from device 1's allocation at 0x[0-9a-f]+ to device 0: direct, between the workers")
        self.assertRegex(err, r"copies from device 0's allocation at 0x[0-9a-f]+ to device 1: not through CUDA IPC")
        self.assertIn("copies from device 0 to device 1 that CUDA IPC cannot make: between the servers", err)
        self.assertIn("copies from device 1 to device 0 that CUDA IPC cannot make: between the servers", err)
        self.assertTrue(wait_for(lambda: self.cluster.status()["leases"] == [], timeout=5), "the lease was not released")

    def test_two_whole_gpus_land_on_two_servers(self):
        out, servers, _ = self.run_program("-n", "2", "-p", "1")
        self.assertEqual(sorted(servers), ["sim0", "sim1"], "each server has one GPU")
        self.assertIn("PASS  device 1 waits for device 0's event, copies, launches: values in order", out)

    def test_servers_that_make_no_links_leave_copies_to_the_client(self):
        self.cluster.close()
        self.cluster = Cluster(servers=2, ttl="30s", memory=GIB, server_args=["--sim-kernels", KERNELS, "--no-peer-links"])
        out, servers, err = self.run_program("-n", "2", "-p", "1", env={"GPOOL_LOG_LEVEL": "debug"})
        self.assertEqual(sorted(servers), ["sim0", "sim1"])
        self.assertRegex(err, r"copies from device 0 to device 1 that CUDA IPC cannot make: relayed through this process; no link between the servers \(801\)")

    def test_gpool_status_shows_a_leases_shares_together(self):
        p = self.cluster.gpool("run", "-n", "2", "-p", "1", "--", "sleep", "30")
        self.assertTrue(wait_for(lambda: len(self.cluster.status()["leases"]) == 1, timeout=10))
        out, _ = self.cluster.gpool("status").communicate(timeout=10)
        lease = json.loads(self.cluster.gpool("status", "--json").communicate(timeout=10)[0])["leases"][0]
        p.kill()
        p.communicate()
        first, second = (f"{s['server']}:{s['device']}" for s in lease["shares"])
        self.assertRegex(out, rf"{lease['id']}\s+\S+\s+{first} x 1, {second} x 1\n", "the lease's shares on its line:\n" + out)

    def test_a_program_with_only_the_allocator_address_gets_two_devices(self):
        env = dict(os.environ, GPOOL_ALLOCATOR=self.cluster.url, GPOOL_GPUS="2", LD_LIBRARY_PATH=LIB, GPOOL_BIN=GPOOL,
                   GPOOL_MUNGE_SOCKET=cluster.MUNGED.socket, GPOOL_LOG_LEVEL="info")
        for name in ("GPOOL_SERVER", "GPOOL_TOKEN", "GPOOL_SHARES"):
            env.pop(name, None)
        run = subprocess.run([PROGRAM], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("ALL PASSED", run.stdout)
        self.assertRegex(run.stderr, r"lease L[0-9a-f]+ from http://127\.0\.0\.1:\d+: 127\.0\.0\.1:\d+ device 0 and 1 more share")
        self.assertTrue(wait_for(lambda: self.cluster.status()["leases"] == [], timeout=5), "the lease was not released")

    def test_cuda_visible_devices_picks_among_the_lease_devices(self):
        env = {"CUDA_VISIBLE_DEVICES": "1"}
        p = self.cluster.gpool("run", "-n", "2", "-p", "1", "--", PROGRAM, env=env)
        out, err = p.communicate(timeout=120)
        self.assertIn("FAIL  cudaGetDeviceCount is the lease's 2 shares: 1 devices", out, out + err)

    def list_under(self, *values, env=None):
        p = self.cluster.gpool("run", "-n", "2", "-p", "0.5", "--", sys.executable, "-c", LIST_UNDER_VALUES, LIST_DEVICES, *values,
                               env=env or {})
        out, err = p.communicate(timeout=180)
        self.assertEqual(p.returncode, 0, out + err)
        return json.loads(out.strip().splitlines()[-1])

    def test_cuda_visible_devices_names_devices_by_uuid_as_cuda_does(self):
        # Two halves of one GPU: two devices whose UUIDs differ first in their third group ("-8" in the second).
        prefix = "UUID1[:19]"
        seen = self.list_under("UUID1", prefix + ",0", "1", "UUID0[:18]", "GPU-ffff,0", "1," + prefix)
        u0, u1 = seen["all"]
        self.assertNotEqual(u0, u1)
        self.assertEqual(u0[:18], u1[:18], "the two UUIDs start alike (the test's ambiguous prefix relies on it)")
        self.assertNotEqual(u0[:19], u1[:19])
        self.assertEqual(seen["UUID1"], [u1], "a whole UUID names its device")
        self.assertEqual(seen[prefix + ",0"], [u1, u0], "the start of one UUID names it, in the list's order")
        self.assertEqual(seen["1"], [u1], "a device shows the same UUID whichever others are visible")
        self.assertEqual(seen["UUID0[:18]"], "NO DEVICE 100", "the start of two UUIDs names neither")
        self.assertIn("hides every device of the lease", seen["stderr UUID0[:18]"])
        self.assertEqual(seen["GPU-ffff,0"], "NO DEVICE 100", "a UUID of no device ends the list")
        self.assertIn('CUDA_VISIBLE_DEVICES entry "GPU-ffff" names none of the lease\'s devices', seen["stderr GPU-ffff,0"])
        self.assertEqual(seen["1," + prefix], [u1], "a device named twice ends the list")

    def test_the_devices_a_uuid_list_leaves_out_are_let_go(self):
        # Every device is connected to learn its UUID; the one the list leaves out must not keep its worker
        # (and its share of the GPU's memory) while the program runs. Its worker says it was let go while
        # the program still holds the device it chose.
        p = self.cluster.gpool("run", "-n", "2", "-p", "0.5", "--", sys.executable, "-c", LIST_UNDER_VALUES, LIST_DEVICES, "hold:UUID1",
                               env={"GPOOL_LOG_LEVEL": "info"}, start_new_session=True)
        try:
            logs = lambda: self.cluster.log("sim0") + self.cluster.log("sim1")  # noqa: E731
            gone = lambda: logs().count("disconnected after")  # noqa: E731
            # The listing with the variable unset ends (two workers gone), then the one left out goes.
            self.assertTrue(wait_for(lambda: gone() >= 3, timeout=30), logs())
            self.assertIsNone(p.poll(), "the program holds its chosen device meanwhile")
            self.assertEqual(gone(), 3, "only the device left out was let go: " + logs())
        finally:
            os.killpg(p.pid, signal.SIGKILL)  # the program too, which holds its device for a minute
            p.communicate()

    @unittest.skipUnless(os.path.exists(NCCL_PROGRAM), "NCCL is not installed (the CUDA toolkit's libnccl)")
    def test_nccl_fails_at_once_with_one_line_saying_why(self):
        p = self.cluster.gpool("run", "-n", "2", "-p", "1", "--", NCCL_PROGRAM, env={"NCCL_DEBUG": "WARN"})
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, out + err)
        self.assertIn("ncclCommInitAll failed", out, out + err)
        self.assertIn("CUDA works after NCCL's failure", out)
        self.assertEqual(err.count("NCCL is not supported between gpool devices"), 1, err)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[2:], verbosity=2)
