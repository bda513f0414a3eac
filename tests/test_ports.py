"""The tests' own port picker (tests/ports.py)."""

from __future__ import annotations

import socket

from tests import ports


def test_ports_are_distinct_free_and_never_ephemeral() -> None:
    picked = ports.free_ports(40)
    assert len(set(picked)) == 40
    if ports._USABLE:
        low = ports._ephemeral_low()
        assert all(ports._START <= port < ports._START + ports.SLICE < low + 1 for port in picked)
    for port in picked:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free when given


def test_a_port_in_use_is_skipped() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports.free_port()))
        held.listen()
        taken = held.getsockname()[1]
        for _ in range(ports.SLICE // 50 + 1):
            assert taken not in ports.free_ports(50)
