"""A real etcd cluster of N members on loopback for tests (issue 16): Debian's etcd-server, each member in
a temporary directory of its own, stopped and removed by close()."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdCluster:
    def __init__(self, members=3):
        if not os.path.exists(ETCD):
            raise RuntimeError("etcd is not installed: apt-get install etcd-server (.ci/run does)")
        self.dir = tempfile.mkdtemp(prefix="gpool-etcd-")
        self.names = [f"m{i}" for i in range(members)]
        self.client = {n: f"127.0.0.1:{_free_port()}" for n in self.names}
        peer = {n: f"http://127.0.0.1:{_free_port()}" for n in self.names}
        initial = ",".join(f"{n}={peer[n]}" for n in self.names)
        self.procs = {}
        for n in self.names:
            with open(os.path.join(self.dir, n + ".log"), "w") as log:  # (the member writes to its own copy)
                self.procs[n] = self._start(n, log, peer, initial)
        deadline = time.time() + 30
        while not all(self.healthy(n) for n in self.names):
            if time.time() > deadline:
                raise RuntimeError("etcd did not start: " + self.log(self.names[0]))
            time.sleep(0.1)

    def _start(self, n, log, peer, initial):
        return subprocess.Popen(
            [ETCD, "--name", n, "--data-dir", os.path.join(self.dir, n), "--listen-client-urls", "http://" + self.client[n],
             "--advertise-client-urls", "http://" + self.client[n], "--listen-peer-urls", peer[n],
             "--initial-advertise-peer-urls", peer[n], "--initial-cluster", initial, "--initial-cluster-state", "new",
             "--initial-cluster-token", os.path.basename(self.dir), "--max-txn-ops", "10000"],
            stdout=log, stderr=log)

    def url(self):
        """What gpool-allocator --store takes: every member's client address."""
        return "etcd://" + ",".join(self.client[n] for n in self.names)

    def healthy(self, name):
        try:
            req = urllib.request.Request(f"http://{self.client[name]}/v3/maintenance/status", data=b"{}", method="POST")
            with urllib.request.urlopen(req, timeout=1) as r:
                return "leader" in json.loads(r.read().decode())
        except OSError:
            return False

    def kill(self, name):
        self.procs[name].kill()
        self.procs[name].wait()

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log"), errors="replace") as f:
            return f.read()[-3000:]

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
