"""Which listen addresses count as loopback: the VM service and the console ask for ALLOW_IPS
beyond them, so a mistake here would expose VM control without the operator choosing it."""

from __future__ import annotations

import pytest

from gateway.http.loopback import is_loopback_address


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "::1", "localhost"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback_address(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.org", "localhost.evil", ""]
)
def test_everything_else_is_not(host: str) -> None:
    assert not is_loopback_address(host)
