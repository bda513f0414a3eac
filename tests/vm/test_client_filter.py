"""Who may call the ALLOW_IPS endpoints: the socket peer, or a trusted proxy's word."""

from __future__ import annotations

from gateway.apps.vm import ClientFilter, parse_event_id
from tests.vm.helpers import settings


def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy() -> None:
    f = ClientFilter.from_settings(settings(ALLOW_IPS="10.0.0.5"))
    assert f.client_ip("127.0.0.1", "10.0.0.5") == "127.0.0.1"
    proxied = ClientFilter.from_settings(
        settings(ALLOW_IPS="10.0.0.5", TRUSTED_PROXIES="127.0.0.1")
    )
    assert proxied.client_ip("127.0.0.1", "10.0.0.5") == "10.0.0.5"
    # A client behind the proxy prepends a forged hop; the proxy appends the real one.
    assert proxied.client_ip("127.0.0.1", "10.0.0.5, 203.0.113.9") == "203.0.113.9"
    assert proxied.client_ip("127.0.0.1", "") == "127.0.0.1"


def test_allow_all_and_cidrs() -> None:
    assert ClientFilter.from_settings(settings()).allow_all
    assert ClientFilter.from_settings(settings(ALLOW_IPS="10.0.0.1,0.0.0.0")).allow_all
    f = ClientFilter.from_settings(settings(ALLOW_IPS=" 10.1.0.0/16 , 127.0.0.2"))
    assert not f.allow_all
    assert [str(n) for n in f.allow] == ["10.1.0.0/16", "127.0.0.2/32"]


def test_event_ids() -> None:
    assert parse_event_id("101:7", 101) == 7
    assert parse_event_id("7", 101) == 7
    assert parse_event_id("102:7", 101) is None
    assert parse_event_id("x", 101) is None
    assert parse_event_id(None, 101) is None
