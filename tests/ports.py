"""Ports for the servers tests start, from a range below the kernel's ephemeral ports, a slice
per pytest-xdist worker.

A port got by binding port 0 is an ephemeral one. A test that kills a server and starts it
again on the same ports leaves them free for a moment, and any process's outgoing connection
may take one as its source port then: the restart fails with "address already in use" (seen
once with three workers, in tests/faults/test_kill9.py). The kernel never hands out ports below
its ephemeral range that way, and each worker picking in a slice of its own never picks
another worker's port. Each port is checked free (a plain bind, as strict as any server's)
before it is given.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import socket
from pathlib import Path

from events.nats_server import free_ports as ephemeral_ports

LOWEST = 20000
SLICE = 1500


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


_START = LOWEST + _worker() * SLICE
_USABLE = _ephemeral_low() >= _START + SLICE
# From a random point of the slice: two pytest sessions run at once on one machine (two
# engineers' runs) walk the same slice, and from the same point they would pick the same
# ports one after the other, each free when checked and taken a moment later.
_NEXT = itertools.count(random.randrange(SLICE))


def _bindable(host: str, port: int) -> bool:
    # Without SO_REUSEADDR, unlike events.nats_server.port_is_taken: a port still in TIME_WAIT
    # counts as taken here, since not every server a test starts would bind it.
    with socket.socket() as sock, contextlib.suppress(OSError):
        sock.bind((host, port))
        return True
    return False


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different free ports."""
    if not _USABLE:  # an unusual ephemeral range, or many workers: the kernel's choice
        return ephemeral_ports(count, host)
    ports: list[int] = []
    for _ in range(SLICE):
        port = _START + next(_NEXT) % SLICE
        if port not in ports and _bindable(host, port):
            ports.append(port)
            if len(ports) == count:
                return ports
    return ports + ephemeral_ports(count - len(ports), host)


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]
