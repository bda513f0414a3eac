"""The shipped env example is safe as written: ALLOW_IPS covers none of the addresses cairn
gives its own VMs, TRUSTED_PROXIES carries its warning, and every value parses."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from actors.vm.settings import load_settings
from gateway.http.allow_ips import ClientFilter
from gateway.http.hosts import HostPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "ops" / "deploy" / "systemd" / "cairn.env.example"


def example_env() -> dict[str, str]:
    env = {}
    for line in EXAMPLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


def test_allow_ips_leaves_out_every_vm_address() -> None:
    env = example_env()
    settings = load_settings(env)
    allowed = ClientFilter.from_env(env)
    assert not allowed.allow_all
    vms = [ipaddress.ip_address(settings.ip_for(vmid)) for vmid in settings.id_range]
    assert len(vms) == 100
    inside = [str(ip) for ip in vms for net in allowed.allow if ip in net]
    assert inside == [], f"ALLOW_IPS lets these VMs in: {inside[:5]}"


def test_the_proxy_warning_and_the_site_name() -> None:
    text = EXAMPLE.read_text()
    proxies = text[: text.index("TRUSTED_PROXIES=")]
    assert "may then claim any address in\n# X-Forwarded-For" in proxies
    env = example_env()
    assert HostPolicy.from_env(env, "127.0.0.1").allows("cairn.example.org")
