#!/usr/bin/env python3
"""One API request's cost at gpool-allocator, for two builds side by side: starts each build's allocator on a
fresh database in turn, ROUNDS times, and times N sequential GET /v1/status, first on a new connection each,
then on one kept-alive connection; over HTTP, then over HTTPS (a self-signed certificate). Prints each
build's medians per round and the ratio of their medians. A build may be given with options for its
allocator after commas (build,--max-client-cpu,0): one build with two settings, side by side.
usage: bench/allocator_requests.py BEFORE_BUILD_DIR[,OPTION...] AFTER_BUILD_DIR[,OPTION...] [ROUNDS=3] [N=1500]"""
import http.client
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "allocator"))
from ports import free_port, wait_listening  # noqa: E402


def ask(conn):
    conn.request("GET", "/v1/status")
    r = conn.getresponse()
    r.read()
    return r.getheader("Connection", "").lower() != "close"


def one_round(spec, n, tls):
    """Medians in µs: (a new connection per request, one kept-alive connection)."""
    build, *args = spec.split(",")
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        connect = lambda: http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # noqa: E731
        if tls:
            cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                            "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                            "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
            args += ["--tls-cert", cert, "--tls-key", key]
            context = ssl.create_default_context(cafile=cert)
            connect = lambda: http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)  # noqa: E731
        p = subprocess.Popen([os.path.join(build, "allocator", "gpool-allocator"), "--listen", f"127.0.0.1:{port}",
                              "--db", os.path.join(d, "a.db"), *args], stderr=subprocess.DEVNULL)
        try:
            wait_listening(port)
            fresh, kept = [], []
            for _ in range(n):
                t = time.perf_counter()
                conn = connect()
                ask(conn)
                conn.close()
                fresh.append(time.perf_counter() - t)
            conn = connect()
            for _ in range(n):
                t = time.perf_counter()
                if not ask(conn):  # the server's keep-alive count ran out: a new connection
                    conn.close()
                    conn = connect()
                kept.append(time.perf_counter() - t)
            conn.close()
            return statistics.median(fresh) * 1e6, statistics.median(kept) * 1e6
        finally:
            p.kill()
            p.wait()


def main():
    before, after = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 1500
    for tls in (False, True):
        got = {before: [], after: []}
        for _ in range(rounds):
            for build in (before, after):
                got[build].append(one_round(build, n, tls))
        for i, what in enumerate(("new connection per request", "kept-alive connection")):
            b, a = (statistics.median(r[i] for r in got[x]) for x in (before, after))
            print(f"{'HTTPS' if tls else 'HTTP'}, {what}: before {' '.join(f'{r[i]:.0f}' for r in got[before])} µs, "
                  f"after {' '.join(f'{r[i]:.0f}' for r in got[after])} µs; after/before {a / b:.2f}")


if __name__ == "__main__":
    main()
