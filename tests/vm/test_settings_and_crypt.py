"""Configuration rules and the password hash."""

from __future__ import annotations

import pytest

from actors.vm.settings import SettingsError, load_settings, real_cluster_variables
from actors.vm.shacrypt import sha512_crypt
from tests.vm.helpers import BASE_ENV, settings


def test_required_variables_are_named() -> None:
    with pytest.raises(SettingsError, match="GATEWAY, MAIN_NODE, ASSIGN_STORAGE"):
        load_settings({})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GATEWAY", "not-an-ip", "GATEWAY must be an IPv4 address"),
        ("ASSIGN_IP_START", "99", "ASSIGN_IP_START must be at least 100"),
        ("ASSIGN_IP_END", "255", "ASSIGN_IP_END must be at most 254"),
        ("VM_MAX_CPU", "33", "VM_MAX_CPU must be at most 32"),
        ("VM_MAX_RAM", "lots", "VM_MAX_RAM must be an integer"),
        ("ALLOW_IPS", "10.0.0.1, nonsense", "ALLOW_IPS: 'nonsense' is not an IP address or CIDR"),
    ],
)
def test_bad_variables(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings({**BASE_ENV, name: value})


def test_only_node_names_with_addresses_are_nodes() -> None:
    s = settings(
        NODE_EXTRA_CA_CERTS="/etc/ssl/extra.pem",
        NODE_ENV="production",
        NODE_OPTIONS="--max-old-space-size=512",
        NODE_bad_name="1.2.3.4",
        NODE_pve3="192.168.0.13",
    )
    assert s.nodes == {"pve1": "192.168.0.11", "pve2": "192.168.0.12", "pve3": "192.168.0.13"}


def test_values() -> None:
    s = settings(ASSIGN_IP_START="110", ASSIGN_IP_END="120", ALLOW_IPS=" 10.0.0.1 , 10.1.0.0/16")
    assert s.ip_for(115) == "192.168.0.115"
    assert list(s.id_range) == list(range(110, 121))
    assert s.allow_ips == ("10.0.0.1", "10.1.0.0/16")
    assert s.nodes == {"pve1": "192.168.0.11", "pve2": "192.168.0.12"}
    with pytest.raises(SettingsError, match="must not exceed"):
        settings(ASSIGN_IP_START="200", ASSIGN_IP_END="150")


def test_real_cluster_variables_and_the_simulated_flag() -> None:
    env = {"GATEWAY": "10.0.0.1", "NODE_pve2": "10.0.0.2", "NODE_ENV": "production",
           "NODE_x": "not-an-ip", "PVE_SSH_KEY": "/root/.ssh/id_ed25519"}  # fmt: skip
    assert real_cluster_variables(env) == ["GATEWAY", "NODE_pve2", "PVE_SSH_KEY"]
    assert real_cluster_variables({"NODE_OPTIONS": "--x"}) == []
    assert settings().simulated is False
    assert settings(PVESIM_ROOT="/tmp/pve").simulated is True


def test_sha512_crypt_matches_the_reference_vectors() -> None:
    # From Drepper's specification of SHA-crypt.
    assert sha512_crypt("Hello world!", "saltstring") == (
        "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1"
    )
    assert sha512_crypt("Hello world!", "saltstringsaltstring", rounds=10000) == (
        "$6$rounds=10000$saltstringsaltst$OW1/O6BYHV6BcXZu8QVeXbDWra3Oeqh0sbHbbMCVNSnCM/UrjmM0Dp8vOuZeHBy/YTBmSK6H9qs/y3RnOaw5v."
    )
    hashed = sha512_crypt("pw")
    assert hashed.startswith("$6$") and len(hashed.split("$")[2]) == 16


TOKEN = "cairn@pve!driver=8c3f1f0e-2b7a-4d7e-9a55-0f3f8b1c2d3e"
API = {"PVE_API_URL": "https://10.0.0.11:8006", "PVE_API_TOKEN": TOKEN}


def test_the_driver_follows_pve_api_url_on_the_simulator_too() -> None:
    assert load_settings(BASE_ENV).driver == "cli"
    real = load_settings({**BASE_ENV, **API, "PVE_API_FINGERPRINT": "ab" * 32})
    assert real.driver == "api" and real.api is not None
    assert (real.api.import_storage, real.api.pool) == ("local", None)
    assert TOKEN.split("=")[1] not in repr(real)  # the secret is never shown
    simulated = {**BASE_ENV, **API, "PVESIM_ROOT": "/tmp/pve"}
    assert load_settings(simulated).driver == "api"  # `cairn up` drives its pveproxy
    assert load_settings({**simulated, "PVE_DRIVER": "cli"}).driver == "cli"
    assert load_settings({**BASE_ENV, "PVESIM_ROOT": "/tmp/pve"}).driver == "cli"
    assert load_settings({**BASE_ENV, **API, "PVE_DRIVER": "cli"}).api is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"PVE_DRIVER": "rest"}, "PVE_DRIVER must be api or cli, got 'rest'"),
        ({"PVE_DRIVER": "api"}, "PVE_DRIVER=api needs PVE_API_URL and PVE_API_TOKEN"),
        ({**API, "PVE_API_TOKEN": "cairn@pve=secret"}, "PVE_API_TOKEN must look like"),
        ({**API, "PVE_API_URL": "http://10.0.0.11:8006"}, "PVE_API_URL must be an https://"),
        ({**API, "PVE_API_FINGERPRINT": "AB:CD"}, "PVE_API_FINGERPRINT must be the SHA-256"),
        ({**API, "PVE_API_FINGERPRINT": "ab" * 32, "PVE_API_CA_FILE": "/etc/ca.pem"},
         "set PVE_API_FINGERPRINT or PVE_API_CA_FILE, not both"),
    ],
)  # fmt: skip
def test_api_settings_errors_name_the_variable(extra: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace("|", r"\|")):
        load_settings({**BASE_ENV, **extra})


def test_api_variables_belong_to_a_real_cluster() -> None:
    assert real_cluster_variables({"PVE_API_URL": "https://x:8006"}) == ["PVE_API_URL"]
