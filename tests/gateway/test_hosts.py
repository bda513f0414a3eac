"""The Host allow-list on its own (gateway/http/hosts.py): which Host headers a service answers."""

from __future__ import annotations

import pytest

from gateway.http.hosts import HostPolicy, host_name

NAMES = [
    ("127.0.0.1:8000", "127.0.0.1"),
    ("LocalHost", "localhost"),
    ("[::1]:8100", "::1"),
    ("[::1]", "::1"),
    ("cairn.example.org.", "cairn.example.org"),
    ("cairn.example.org:443", "cairn.example.org"),
    ("", None),
    ("::1", None),  # an IPv6 literal without brackets
    ("[::1", None),
    ("[::1]x", None),
    ("[nonsense]", None),
    ("a.example:80x", None),
    ("evil.example/x", None),
    ("user@127.0.0.1", None),
    ("a b", None),
    ("x" * 400, None),
]


@pytest.mark.parametrize(("header", "name"), NAMES)
def test_host_name(header: str, name: str | None) -> None:
    assert host_name(header) == name


LOOPBACK = HostPolicy.from_env({}, "127.0.0.1")
# (policy, Host header, allowed)
CASES = [
    (LOOPBACK, "127.0.0.1:8000", True),
    (LOOPBACK, "127.9.9.9", True),
    (LOOPBACK, "localhost:8000", True),
    (LOOPBACK, "[::1]:8000", True),
    # DNS rebinding: a name the attacker points at 127.0.0.1.
    (LOOPBACK, "rebind.evil.example:8000", False),
    (LOOPBACK, "localhost.evil.example", False),
    (LOOPBACK, "127.0.0.1.evil.example", False),
    (LOOPBACK, "10.0.0.5", False),
    (LOOPBACK, None, False),
    (LOOPBACK, "", False),
    # The bind address, and the names the operator lists.
    (HostPolicy.from_env({}, "10.0.0.5"), "10.0.0.5:8100", True),
    (HostPolicy.from_env({}, "10.0.0.5"), "10.0.0.6:8100", False),
    (
        HostPolicy.from_env({"CAIRN_ALLOWED_HOSTS": "Cairn.Example.org"}, "127.0.0.1"),
        "cairn.example.org",
        True,
    ),
    (
        HostPolicy.from_env({"CAIRN_ALLOWED_HOSTS": "cairn.example.org"}, "127.0.0.1"),
        "evil.cairn.example.org",
        False,
    ),
    (
        HostPolicy.from_env({"CAIRN_ALLOWED_HOSTS": "[2001:db8::1]"}, "::1"),
        "[2001:db8::1]:8000",
        True,
    ),
    # A wildcard bind: IP literals cannot be rebound; names still must be listed.
    (HostPolicy.from_env({}, "0.0.0.0"), "192.0.2.7:8000", True),
    (HostPolicy.from_env({}, "::"), "[2001:db8::7]:8000", True),
    (HostPolicy.from_env({}, "0.0.0.0"), "rebind.evil.example", False),
    # `*` turns the check off.
    (HostPolicy.from_env({"CAIRN_ALLOWED_HOSTS": "*"}, "127.0.0.1"), "anything", True),
]


@pytest.mark.parametrize(("policy", "header", "allowed"), CASES)
def test_policy(policy: HostPolicy, header: str | None, allowed: bool) -> None:
    assert policy.allows(header) is allowed
