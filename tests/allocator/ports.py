"""Loopback ports for the daemons a test starts. The kernel may hand out the same ephemeral port twice in a
row once its socket is closed, and a test that starts several daemons (an etcd member's client and peer
ports, allocator replicas) then binds two of them to one port: CI saw etcd member m0's client port given
to another member as its peer port, and the cluster never formed. So no port is handed out twice in one
process."""
import socket
import time

_given = set()


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port


def wait_listening(port, timeout=10.0):
    """Waits until something accepts connections on 127.0.0.1:`port` (a daemon just started); whether it did."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False
