"""The cross-site rule on its own: which browser requests may change state (gateway/crosssite)."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import make_mocked_request

from gateway.console.serial import origin_refusal
from gateway.http.crosssite import refusal, same_origin
from gateway.http.hosts import HostPolicy

HOST = "127.0.0.1:8000"

# (method, headers, allowed)
CASES = [
    # Not a browser: neither header.
    ("POST", {}, True),
    # Reads are never refused here.
    ("GET", {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, True),
    ("HEAD", {"Sec-Fetch-Site": "cross-site"}, True),
    ("OPTIONS", {"Origin": "http://evil.example"}, True),
    # Current browsers: Sec-Fetch-Site decides.
    ("POST", {"Sec-Fetch-Site": "same-origin", "Origin": f"http://{HOST}"}, True),
    ("POST", {"Sec-Fetch-Site": "none"}, True),
    ("POST", {"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, False),
    ("POST", {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:9999"}, False),
    ("DELETE", {"Sec-Fetch-Site": "cross-site"}, False),
    ("PUT", {"Sec-Fetch-Site": "CROSS-SITE"}, False),
    ("POST", {"Sec-Fetch-Site": "nonsense"}, False),
    # Sec-Fetch-Site wins over an Origin that would match.
    ("POST", {"Sec-Fetch-Site": "cross-site", "Origin": f"http://{HOST}"}, False),
    # Older browsers: the Origin must be the host the request was sent to.
    ("POST", {"Origin": f"http://{HOST}"}, True),
    ("POST", {"Origin": f"HTTP://{HOST.upper()}"}, True),
    ("POST", {"Origin": "http://127.0.0.1:8001"}, False),
    ("POST", {"Origin": "http://evil.example"}, False),
    ("POST", {"Origin": "null"}, False),
    ("POST", {"Origin": "file://"}, False),
    ("POST", {"Origin": "http://[::1"}, False),
    ("POST", {"Origin": ""}, False),
    # A browser's Origin is a scheme and a host, nothing more: anything else is not ours.
    ("POST", {"Origin": f"http://{HOST}/console"}, False),
    ("POST", {"Origin": f"http://user@{HOST}"}, False),
    ("POST", {"Origin": f"http://evil.example@{HOST}"}, False),
    ("POST", {"Origin": f"http://{HOST}?x"}, False),
    ("POST", {"Origin": f"ws://{HOST}"}, False),
    ("POST", {"Origin": f"http://{HOST} http://evil.example"}, False),
]


@pytest.mark.parametrize(("method", "headers", "allowed"), CASES)
def test_the_rule(method: str, headers: dict[str, str], allowed: bool) -> None:
    request = make_mocked_request(method, "/x", headers={"Host": HOST, **headers})
    assert (refusal(request) is None) is allowed


@pytest.mark.parametrize("origin", [case[1]["Origin"] for case in CASES if "Origin" in case[1]])
def test_the_serial_consoles_websocket_check_is_the_same_rule(origin: str) -> None:
    """One parser of Origin for both guards: the websocket upgrade (which Sec-Fetch-Site does
    not protect) accepts exactly the Origins the cross-site guard takes from older browsers."""
    by_guard = refusal(make_mocked_request("POST", "/x", headers={"Host": HOST, "Origin": origin}))
    by_serial = origin_refusal({"Origin": origin}, HOST)
    assert (by_serial is None) is same_origin(origin, HOST) is (by_guard is None)


def test_default_ports_compare_equal_behind_a_tls_proxy() -> None:
    behind = {"Host": "cairn.example", "Origin": "https://cairn.example"}
    assert refusal(make_mocked_request("POST", "/x", headers=behind)) is None
    explicit = {"Host": "cairn.example:443", "Origin": "https://cairn.example"}
    assert refusal(make_mocked_request("POST", "/x", headers=explicit)) is None
    ipv6 = {"Host": "[::1]:8000", "Origin": "http://[::1]:8000"}
    assert refusal(make_mocked_request("POST", "/x", headers=ipv6)) is None
    other_port = {"Host": "cairn.example", "Origin": "http://cairn.example:8080"}
    assert refusal(make_mocked_request("POST", "/x", headers=other_port)) is not None


def test_the_reason_names_what_the_browser_said() -> None:
    headers = {"Host": HOST, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    why = refusal(make_mocked_request("POST", "/x", headers=headers))
    assert why == "Origin: http://evil.example, Sec-Fetch-Site: cross-site"


def test_same_origin_is_no_proof_when_the_host_is_foreign() -> None:
    """DNS rebinding: the rebound page is same-origin with itself, and Origin matches Host."""
    hosts = HostPolicy.from_env({"CAIRN_ALLOWED_HOSTS": "cairn.example"}, "127.0.0.1")
    rebound = {"Host": "rebind.evil.example:8000", "Origin": "http://rebind.evil.example:8000"}
    for fetch_site in ("same-origin", "none"):
        headers = {**rebound, "Sec-Fetch-Site": fetch_site}
        request = make_mocked_request("POST", "/x", headers=headers)
        why = refusal(request, hosts)
        assert why is not None and "Host: rebind.evil.example:8000" in why
        assert refusal(request) is None  # what the rule alone used to say
    for host in (HOST, "cairn.example"):
        own = {"Host": host, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"}
        assert refusal(make_mocked_request("POST", "/x", headers=own), hosts) is None
