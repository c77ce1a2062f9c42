"""Loopback ports for the daemons a test starts. The kernel may hand out the same ephemeral port twice in a
row once its socket is closed, and a test that starts several daemons (an etcd member's client and peer
ports, allocator replicas) then binds two of them to one port: CI saw etcd member m0's client port given
to another member as its peer port, and the cluster never formed. So no port is handed out twice in one
process."""
import socket

_given = set()


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port
