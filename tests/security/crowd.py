"""A crowd of clients on one thread, to hold gpool-allocator's connections (tests/security/*_test.py):
`slow` connections sending a request a byte every second (again, on a new connection, once the allocator
cuts one off), `polls` connections long-polling a lease again as soon as each answer comes, and `deaf`
connections sending `deaf_request` and reading its answer at `deaf_reads` bytes a second at most, or never
(again, once the allocator closes one)."""
import select
import selectors
import socket
import threading
import time

SLOW_START = b"POST /v1/leases HTTP/1.1\r\nHost: a\r\nX-Slow: "


class Crowd:
    def __init__(self, port, slow=0, polls=0, lease_id=None, addresses=("127.0.0.1",), connect=None, deaf=0,
                 deaf_request=b"", pace=0, deaf_reads=0):
        """Connections are made by `connect`, or to 127.0.0.1:`port` from `addresses` in turn; the first ones
        `pace` seconds apart."""
        self.port, self.lease_id, self.addresses, self.deaf_request = port, lease_id, list(addresses), deaf_request
        self.deaf_reads = deaf_reads
        self.connect = connect or self.from_next_address
        self.sel = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.answers = self.cut_off = self.made = self.refused = 0
        self.slow = set()
        self.deaf = {}  # descriptor -> socket: never read, watched only for the allocator closing it
        self.hangups = select.poll()
        for _ in range(slow):
            self.start_slow()
        for _ in range(deaf):
            self.start_deaf()
            time.sleep(pace)
        for _ in range(polls):
            self.poll()
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def from_next_address(self):
        source = self.addresses[self.made % len(self.addresses)]
        self.made += 1
        return socket.create_connection(("127.0.0.1", self.port), source_address=(source, 0))

    def send_first(self, first):
        """The new connection, or None when the allocator closed it before it took the request's start."""
        s = self.connect()
        try:
            s.sendall(first)
        except OSError:
            s.close()
            self.refused += 1
            return None
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ)
        return s

    def start_slow(self):
        s = self.send_first(SLOW_START)
        if s:
            self.slow.add(s)

    def start_deaf(self):
        s = self.connect()
        try:
            s.sendall(self.deaf_request)
        except OSError:
            s.close()
            self.refused += 1
            return
        s.setblocking(False)
        self.deaf[s.fileno()] = s
        self.hangups.register(s, 0)  # a reset or hang-up only: what comes in is read at the crowd's pace

    def deaf_closed(self, fd):
        self.hangups.unregister(fd)
        self.deaf.pop(fd).close()
        self.cut_off += 1
        if not self.stop.is_set():
            try:
                self.start_deaf()
            except OSError:
                pass

    def poll(self):
        self.send_first(f"GET /v1/leases/{self.lease_id}?wait_ms=5000 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())

    def closed(self, s):
        self.sel.unregister(s)
        s.close()
        again = self.start_slow if s in self.slow else self.poll
        if s in self.slow:
            self.slow.discard(s)
            self.cut_off += 1
        else:  # answered and closed: poll again
            self.answers += 1
        if not self.stop.is_set():
            try:
                again()
            except OSError:
                pass

    def read_a_little(self):
        for fd, s in list(self.deaf.items()):
            try:
                s.recv(self.deaf_reads // 10)
            except BlockingIOError:
                pass
            except OSError:
                self.deaf_closed(fd)

    def run(self):
        next_byte = time.time() + 1
        next_read = time.time() + 0.1
        while not self.stop.is_set():
            for key, _ in self.sel.select(timeout=0.1):
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.closed(key.fileobj)
            for fd, _ in self.hangups.poll(0):
                self.deaf_closed(fd)
            if self.deaf_reads and time.time() >= next_read:
                next_read += 0.1
                self.read_a_little()
            if time.time() >= next_byte:
                next_byte += 1
                for s in list(self.slow):
                    try:
                        s.send(b"x")
                    except OSError:
                        pass

    def close(self):
        self.stop.set()
        self.thread.join()
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        for s in self.deaf.values():
            s.close()
