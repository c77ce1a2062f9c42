"""A real etcd cluster of N members on loopback for tests (issue 16): Debian's etcd-server, each member in
a temporary directory of its own, stopped and removed by close()."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

from ports import free_port

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class EtcdCluster:
    def __init__(self, members=3, tls=False, extra_args=()):
        """tls: clients must use HTTPS and a client certificate (etcd's --client-cert-auth); the files are
        self.ca, self.client_cert and self.client_key. extra_args: more flags for every member."""
        if not os.path.exists(ETCD):
            raise RuntimeError("etcd is not installed: apt-get install etcd-server (.ci/run does)")
        self.dir = tempfile.mkdtemp(prefix="gpool-etcd-")
        self.tls = tls
        self.extra_args = list(extra_args)
        self.procs = {}
        if tls:
            self._make_certificates()
        self.names = [f"m{i}" for i in range(members)]
        try:
            for attempt in range(3):
                if self._form():
                    return
                if not self._lost_a_port() or attempt == 2:
                    raise RuntimeError("etcd did not start: " + self.log(self.names[0]))
                self._stop_members()  # another process bound a port between our choice and etcd's bind: new ports
        except BaseException:
            self.close()  # the members already started go too
            raise

    def _form(self):
        """Starts every member on ports of its own and waits for all to be healthy; False after 30 s."""
        self.client = {n: f"127.0.0.1:{free_port()}" for n in self.names}
        peer = {n: f"http://127.0.0.1:{free_port()}" for n in self.names}
        initial = ",".join(f"{n}={peer[n]}" for n in self.names)
        for n in self.names:
            with open(os.path.join(self.dir, n + ".log"), "w") as log:  # (the member writes to its own copy)
                self.procs[n] = self._start(n, log, peer, initial)
        deadline = time.time() + 30
        while not all(self.healthy(n) for n in self.names):
            if time.time() > deadline or self._lost_a_port():
                return False
            time.sleep(0.1)
        return True

    def _lost_a_port(self):
        return any(self.procs[n].poll() is not None and "address already in use" in self.log(n) for n in self.names)

    def _make_certificates(self):
        d = self.dir
        self.ca, self.client_cert, self.client_key = f"{d}/ca.pem", f"{d}/client.pem", f"{d}/client.key"
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{d}/ca.key",
                 "-out", self.ca, "-days", "1", "-subj", "/CN=gpool test etcd CA")
        # (etcd's own JSON gateway dials its client port with the server's certificate: clientAuth too)
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
                          ("client", "extendedKeyUsage=clientAuth")):
            with open(f"{d}/{name}.ext", "w") as f:
                f.write(ext + "\n")
            _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{d}/{name}.key",
                     "-out", f"{d}/{name}.csr", "-subj", f"/CN=gpool-{name}")
            _openssl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", self.ca, "-CAkey", f"{d}/ca.key", "-CAcreateserial",
                     "-out", f"{d}/{name}.pem", "-days", "1", "-extfile", f"{d}/{name}.ext")

    def _scheme(self):
        return "https://" if self.tls else "http://"

    def _start(self, n, log, peer, initial):
        tls = (["--cert-file", f"{self.dir}/server.pem", "--key-file", f"{self.dir}/server.key", "--trusted-ca-file", self.ca,
                "--client-cert-auth"] if self.tls else [])
        return subprocess.Popen(
            [ETCD, "--name", n, "--data-dir", os.path.join(self.dir, n), "--listen-client-urls", self._scheme() + self.client[n],
             "--advertise-client-urls", self._scheme() + self.client[n], *tls, "--listen-peer-urls", peer[n],
             "--initial-advertise-peer-urls", peer[n], "--initial-cluster", initial, "--initial-cluster-state", "new",
             "--initial-cluster-token", os.path.basename(self.dir), "--max-txn-ops", "10000", *self.extra_args],
            stdout=log, stderr=log)

    def url(self):
        """What gpool-allocator --store takes: every member's client address."""
        return "etcd://" + ",".join(self.client[n] for n in self.names)

    def healthy(self, name):
        try:
            req = urllib.request.Request(f"{self._scheme()}{self.client[name]}/v3/maintenance/status", data=b"{}", method="POST")
            context = None
            if self.tls:
                import ssl
                context = ssl.create_default_context(cafile=self.ca)
                context.load_cert_chain(self.client_cert, self.client_key)
            with urllib.request.urlopen(req, timeout=1, context=context) as r:
                return "leader" in json.loads(r.read().decode())
        except OSError:
            return False

    def call(self, path, body, token=None):
        """POSTs body (a dict) to the first member's JSON gateway (plain HTTP); returns (status, answer)."""
        req = urllib.request.Request(f"http://{self.client[self.names[0]]}{path}", data=json.dumps(body).encode(), method="POST")
        if token:
            req.add_header("Authorization", token)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read().decode() or "{}")

    def token(self, user, password):
        status, answer = self.call("/v3/auth/authenticate", {"name": user, "password": password})
        assert status == 200, answer
        return answer["token"]

    def enable_auth(self, user, password, prefix="/gpool/"):
        """Turns etcd's authentication on, as an admin would with etcdctl: a root user (its password is
        returned), and `user`, whose one role may read and write keys under `prefix`."""
        b64 = lambda text: base64.b64encode(text.encode()).decode()  # noqa: E731
        root = "root-" + os.path.basename(self.dir)
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        for path, body in (("/v3/auth/user/add", {"name": "root", "password": root}),
                           ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
                           ("/v3/auth/role/add", {"name": "gpool"}),
                           ("/v3/auth/role/grant", {"name": "gpool", "perm": {"permType": "READWRITE", "key": b64(prefix),
                                                                               "range_end": b64(end)}}),
                           ("/v3/auth/user/add", {"name": user, "password": password}),
                           ("/v3/auth/user/grant", {"user": user, "role": "gpool"}),
                           ("/v3/auth/enable", {})):
            status, answer = self.call(path, body)
            assert status == 200, (path, answer)
        return root

    def kill(self, name):
        self.procs[name].kill()
        self.procs[name].wait()

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log"), errors="replace") as f:
            return f.read()[-3000:]

    def _stop_members(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = {}
        for n in self.names:
            shutil.rmtree(os.path.join(self.dir, n), ignore_errors=True)

    def close(self):
        self._stop_members()
        shutil.rmtree(self.dir, ignore_errors=True)
