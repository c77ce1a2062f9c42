"""The test harness of gpool's control plane: a real munged, a real gpool-allocator (SQLite) and real
gpool-servers (sim backend) in a temporary directory, and the ways a caller proves who it is.
Used by tests/allocator/lease_flow_test.py and tests/security/*_test.py."""
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from ports import free_port

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
ALLOCATOR = os.path.join(BUILD, "allocator", "gpool-allocator")
SERVER = os.path.join(BUILD, "server", "gpool-server")
GPOOL = os.path.join(BUILD, "tools", "gpool", "gpool")
NVML_QUERY = os.path.join(BUILD, "tests", "nvml_query")
MEMCAP = os.path.join(BUILD, "tests", "memcap_probe")
SERVER_LOSS = os.path.join(BUILD, "tests", "cuda_server_loss")
LIB = os.path.join(BUILD, "lib", "gpool")
KERNELS = os.path.join(BUILD, "tests", "libgpool_test_sim_kernels.so")  # the test kernels, for --sim-kernels
GIB = 1 << 30


def _sanitized():
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return any(line.startswith("GPOOL_SANITIZE:") and line.strip().split("=", 1)[1] for line in f)
    except OSError:
        return False


# Built with sanitizers (scripts/test.sh's second pass): an uninstrumented program (Python) cannot load
# the client library, whose sanitizer runtime must come first.
SANITIZED = _sanitized()

POLICY = """
[settings]
lease_ttl = "{ttl}"
server_timeout = "1s"

[pools.default]
fractions = [1.0, 0.5, 0.25]

[quotas.users.capped]
gpus = 0.5
"""


class Munged:
    """A real munged with a key of its own, its socket in a directory every user can reach (tests run
    clients as other users too)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gpool-munge-")
        os.chmod(self.dir, 0o711)
        key = os.path.join(self.dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        self.socket = os.path.join(self.dir, "munge.socket")
        daemon = shutil.which("munged") or "/usr/sbin/munged"
        if not os.path.exists(daemon):
            raise RuntimeError("munged is not installed: apt-get install munge libmunge-dev (.ci/run does)")
        self.proc = subprocess.Popen([daemon, "-F", "--force", f"--key-file={key}", f"--socket={self.socket}",
                                      f"--pid-file={self.dir}/munged.pid", f"--seed-file={self.dir}/munged.seed",
                                      f"--log-file={self.dir}/munged.log"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_for(lambda: os.path.exists(self.socket), timeout=10):
            raise RuntimeError("munged did not start")

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


MUNGED = None


def setUpModule():
    global MUNGED
    MUNGED = Munged()


def tearDownModule():
    if MUNGED:
        MUNGED.close()


def as_user(uid, gid):
    """preexec_fn: run a child as another user (tests run as root in CI)."""
    def switch():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return switch


NOBODY = 65534


def ed25519_sign(key_file, message):
    """An Ed25519 signature of `message` (bytes) with the PEM private key in `key_file`, by openssl."""
    with tempfile.NamedTemporaryFile() as m:
        m.write(message)
        m.flush()
        return subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", key_file, "-rawin", "-in", m.name],
                              check=True, capture_output=True).stdout




def forged(token):
    """`token` with the last hex digit of its signature changed: it no longer verifies (a fixed ending would
    leave the token as it was whenever the signature happened to end that way)."""
    return token[:-1] + ("1" if token[-1] == "0" else "0")


def policy_of(size):
    """The test policy with an admin's comments, `size` bytes or more in all: /v1/policy answers it."""
    return POLICY + ("# " + "x" * 1022 + "\n") * (size // 1024 + 1)


def read_answer(f):
    """Reads one HTTP answer whole from `f` (a socket's file, binary): its status line, its headers (names in
    lower case) and its body (as long as its Content-Length says)."""
    status, headers = f.readline(), {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, f.read(int(headers.get("content-length", 0)))


def wait_for(predicate, timeout=10.0, step=0.02):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return None


class Cluster:
    """An allocator and N single-GPU sim servers in a temporary directory."""

    def __init__(self, servers=1, ttl="1s", memory=8 * GIB, server_args=(), policy=POLICY, tls=False, store=None, replicas=1,
                 allocator_args=(), backend="sim", jit_cache=None):
        self.backend = backend  # gpool-server --backend: sim, or cuda on a GPU machine (tests/gpu/)
        self.server_args = list(server_args)
        self.allocator_args = list(allocator_args)
        self.store = store  # gpool-allocator --store (etcd://...); None: SQLite in the directory
        self.dir = tempfile.mkdtemp(prefix="gpool-lease-test-")
        self.jit_cache = jit_cache or os.path.join(self.dir, "jit")  # the servers' --jit-cache
        os.chmod(self.dir, 0o711)  # the allocator's local socket is reached by other users too
        self.socket = os.path.join(self.dir, "allocator.sock")
        self.accounts = {}    # service account name -> its key file
        self.lease_keys = {}  # lease id -> the lease key its request got
        self.ports = [free_port() for _ in range(replicas)]  # allocator replicas sharing `store` (one leads)
        self.port = self.ports[0]
        self.urls = [f"{'https' if tls else 'http'}://127.0.0.1:{p}" for p in self.ports]
        self.url = ",".join(self.urls)  # what clients and servers are given
        self.leader = self.urls[0]      # where this harness's own requests go first
        self.tls = tls
        if tls:  # a self-signed certificate for 127.0.0.1, which is also the CA clients trust
            self.cert, self.tls_key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                            "-keyout", self.tls_key, "-out", self.cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        with open(os.path.join(self.dir, "policy.toml"), "w") as f:
            f.write(policy.format(ttl=ttl))
        self.key_file = os.path.join(self.dir, "alloc.db.key")            # the admin key
        self.token_key = os.path.join(self.dir, "alloc.db.token.pem")     # signs lease tokens (allocator only)
        self.token_pub = os.path.join(self.dir, "alloc.db.token.pub")     # verifies them (GPU hosts)
        self.procs = []
        self.allocators = [None] * replicas
        for i in range(replicas):
            self.start_allocator(i)
        self.servers = {}
        for i in range(servers):
            self.start_server(f"sim{i}", memory)
        assert wait_for(lambda: len([s for s in self.status()["servers"] if s["up"]]) == servers), "servers did not register"

    def start_allocator(self, i=0):
        """Replica i (its log: allocator.log, allocatorI.log for the others); returns once one leads."""
        name = "allocator" + (str(i) if i else "")
        with open(os.path.join(self.dir, name + ".log"), "a") as log:
            p = subprocess.Popen(
                [ALLOCATOR, "--listen", f"127.0.0.1:{self.ports[i]}", "--db", os.path.join(self.dir, "alloc.db"),
                 *(["--store", self.store] if self.store else []),
                 "--config", os.path.join(self.dir, "policy.toml"), "--log-level", "debug",
                 *(["--socket", self.socket] if i == 0 else []),
                 "--munge-socket", MUNGED.socket, *self.allocator_args]
                + (["--tls-cert", self.cert, "--tls-key", self.tls_key] if self.tls else []),
                stderr=log)
        self.allocators[i] = p
        if i == 0:
            self.allocator = p
        self.procs.append(p)
        assert wait_for(lambda: self.try_http("GET", "/v1/status")[0] == 200), "allocator did not start: " + self.log(name)

    def leading(self):
        """The index of the replica that leads (by its /metrics), or None."""
        for i, url in enumerate(self.urls):
            try:
                with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
                    if "gpool_allocator_leader 1" in r.read().decode():
                        return i
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
        return None

    def server_key(self, name):
        """Server `name`'s private key file, made and enrolled on first use (as an admin would)."""
        path = os.path.join(self.dir, f"{name}.pem")
        if not os.path.exists(path):
            subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", path], check=True, capture_output=True)
            pub = subprocess.run(["openssl", "pkey", "-in", path, "-pubout"], check=True, capture_output=True, text=True).stdout
            status, out = self.http("PUT", f"/v1/servers/{name}/key", pub, signed=True)
            assert status == 200, out
        return path

    def start_server(self, name, memory, listen="127.0.0.1:0"):
        key = self.server_key(name)
        with open(os.path.join(self.dir, f"{name}.log"), "w") as log:
            p = subprocess.Popen([SERVER, "--listen", listen, "--backend", self.backend, "--sim-memory", str(memory),
                                  "--allocator", self.url, "--token-key", self.token_pub, "--server-key", key, "--name", name,
                                  "--module-cache", "none", "--jit-cache", self.jit_cache,
                                  *(["--allocator-ca", self.cert] if self.tls else []),
                                  *self.server_args], stderr=log)
        self.procs.append(p)
        self.servers[name] = p

    def log(self, name):
        with open(os.path.join(self.dir, name + ".log"), errors="replace") as f:
            return f.read()

    def signature(self, method, path, data, at_ms=None, nonce=None):
        """The headers of an admin request (docs/api.md): its time, a nonce, and the HMAC over both."""
        with open(self.key_file) as f:
            key = f.read().strip().encode()
        at = str(int(time.time() * 1000) if at_ms is None else at_ms)
        nonce = nonce or os.urandom(16).hex()
        message = f"{method} {path}\n{at}\n{nonce}\n".encode() + (data or b"")
        return {"X-Gpool-Time": at, "X-Gpool-Nonce": nonce, "X-Gpool-Signature": hmac.new(key, message, hashlib.sha256).hexdigest()}

    def server_signature(self, name, method, path, data, at_ms=None, nonce=None, key=None):
        """The headers of server `name`'s request, signed with its key (or `key`, a PEM private key file)."""
        at = str(int(time.time() * 1000) if at_ms is None else at_ms)
        nonce = nonce or os.urandom(16).hex()
        message = f"{method} {path}\n{at}\n{nonce}\n".encode() + (data or b"")
        return {"X-Gpool-Time": at, "X-Gpool-Nonce": nonce, "X-Gpool-Server": name,
                "X-Gpool-Signature": ed25519_sign(key or self.server_key(name), message).hex()}

    def account(self, name, groups=()):
        """The key file of service account `name`, issued on first use (an admin request)."""
        if name not in self.accounts:
            status, out = self.http("POST", "/v1/service-accounts", {"name": name, "groups": list(groups)}, signed=True)
            assert status == 201, out
            path = os.path.join(self.dir, f"{name}.key")
            with open(path, "w") as f:
                f.write(out["key"] + "\n")
            self.accounts[name] = path
        return self.accounts[name]

    def bearer(self, name, groups=()):
        with open(self.account(name, groups)) as f:
            return {"Authorization": "Bearer " + f.read().strip()}

    def try_http(self, method, path, body=None, signed=False, headers=None):
        """One request to the replica that leads (standbys' answers followed); (0, None) when none does."""
        for url in [self.leader] + [u for u in self.urls if u != self.leader]:
            status, out = self._try_http(url, method, path, body, signed, headers)
            if status != 0 and not (status == 503 and isinstance(out, dict) and out.get("standby")):
                self.leader = url
                return status, out
        return 0, None

    def _try_http(self, url, method, path, body=None, signed=False, headers=None):
        data = body if isinstance(body, (bytes, type(None))) else (body if isinstance(body, str) else json.dumps(body)).encode()
        req = urllib.request.Request(url + path, data=data, method=method)
        for name, value in (self.signature(method, path.split("?")[0], data) if signed else headers or {}).items():
            req.add_header(name, value)
        context = None
        if self.tls:
            import ssl
            context = ssl.create_default_context(cafile=self.cert)
        try:
            with urllib.request.urlopen(req, timeout=10, context=context) as r:
                text = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            try:
                text, status = e.read().decode(), e.code
            except http.client.HTTPException:  # the body cut short: a deposed leader restarts as a standby
                text, status = "", e.code      # right after it refused (503)
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException):
            return 0, None  # as gpool's clients do: the next replica
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def http(self, method, path, body=None, signed=False, headers=None):
        """As try_http; a lease request whose body names a user is sent as that service account, and a
        request about a lease this harness requested carries the lease's key."""
        headers = dict(headers or {})
        if not signed and not headers:
            if method == "POST" and path == "/v1/leases" and isinstance(body, dict) and isinstance(body.get("user"), str) \
                    and body["user"].isprintable() and 0 < len(body["user"]) <= 64:
                headers = self.bearer(body["user"])
            lease_id = path.split("/")[3].split("?")[0] if path.startswith("/v1/leases/") else None
            if lease_id in self.lease_keys:
                headers = {"X-Gpool-Lease-Key": self.lease_keys[lease_id]}
        status, out = self.try_http(method, path, body, signed, headers)
        if status == 0:
            raise AssertionError("allocator unreachable")
        if isinstance(out, dict) and "lease_key" in out:
            self.lease_keys[out["id"]] = out["lease_key"]
        return status, out

    def status(self):
        return self.http("GET", "/v1/status")[1]

    def lease(self, lease_id):
        return self.http("GET", "/v1/leases/" + lease_id)[1]

    def gpool(self, *args, **kw):
        """The gpool command: as service account `user` when given, else as this process's user (MUNGE);
        admin commands are signed with the allocator's key."""
        env = dict(os.environ, GPOOL_ALLOCATOR=self.url, GPOOL_KEY_FILE=self.key_file, GPOOL_MUNGE_SOCKET=MUNGED.socket)
        env.pop("GPOOL_SERVICE_KEY_FILE", None)
        env.pop("GPOOL_CA_FILE", None)
        if self.tls:
            env["GPOOL_CA_FILE"] = self.cert
        if "user" in kw:
            env["GPOOL_SERVICE_KEY_FILE"] = self.account(kw.pop("user"))
        env.update(kw.pop("env", {}))
        return subprocess.Popen([GPOOL, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def client_env(self, share, token=None):
        return dict(os.environ, GPOOL_SERVER=share["address"], GPOOL_DEVICE=str(share["device"]),
                    GPOOL_TOKEN=share["token"] if token is None else token, LD_LIBRARY_PATH=LIB)

    def close(self):
        if os.environ.get("GPOOL_KEEP_LOGS"):
            for name in os.listdir(self.dir):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(self.dir, name), os.environ["GPOOL_KEEP_LOGS"])
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                except ProcessLookupError:
                    pass
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


