"""Getopt-like parsing and schema checks of the fake CLI (pure)."""

from __future__ import annotations

import pytest
from pvesim.args import (
    CliError,
    CommandSpec,
    Opt,
    check_dns_name,
    cpu_model_error,
    make_ipconfig_check,
    make_net_check,
    parse,
)
from pvesim.qm import SPECS

SPEC = CommandSpec(
    "qm demo <vmid> [OPTIONS]",
    (("vmid", Opt("int", minimum=100, maximum=999999999)),),
    {"sshkeys": Opt(), "skiplock": Opt("bool"), "memory": Opt("int", minimum=16),
     "net0": Opt(), "net1": Opt(), "ostype": Opt(enum=("l26", "other"))},
)  # fmt: skip


def test_double_single_dash_equals_and_abbreviation() -> None:
    p = parse(SPEC, ["120", "--sshkey", "/tmp/k", "-memory", "512", "--ostype=l26"])
    assert p.args == {"vmid": 120}
    assert p.options == {"sshkeys": "/tmp/k", "memory": 512, "ostype": "l26"}


def test_options_before_positionals_and_bool_forms() -> None:
    # Getopt `:s`: a bool takes the next word unless it looks like an option
    with pytest.raises(CliError) as exc:
        parse(SPEC, ["--skiplock", "120"])
    # "120" became the flag's value, so the vmid is missing
    assert exc.value.text.startswith("400 not enough arguments")
    assert parse(SPEC, ["120", "--skiplock"]).options == {"skiplock": 1}
    assert parse(SPEC, ["120", "--skiplock", "0"]).options == {"skiplock": 0}
    assert parse(SPEC, ["120", "--skiplock", "--memory", "64"]).options == {
        "skiplock": 1, "memory": 64,
    }  # fmt: skip


def test_unknown_and_ambiguous_options() -> None:
    with pytest.raises(CliError) as exc:
        parse(SPEC, ["120", "--bogus", "1"])
    # Like every 400, followed by the usage line.
    assert exc.value.text == (f"Unknown option: bogus\n400 unable to parse option\n{SPEC.usage}\n")
    assert exc.value.code == 255
    with pytest.raises(CliError) as exc:
        parse(SPEC, ["120", "--net", "virtio"])
    assert exc.value.text.startswith("Option net is ambiguous (net0, net1)")


def test_argument_count() -> None:
    with pytest.raises(CliError) as exc:
        parse(SPEC, [])
    assert exc.value.text == "400 not enough arguments\nqm demo <vmid> [OPTIONS]\n"
    with pytest.raises(CliError) as exc:
        parse(SPEC, ["120", "121"])
    assert exc.value.text == "400 too many arguments\nqm demo <vmid> [OPTIONS]\n"


def test_all_bad_values_reported_in_one_block() -> None:
    with pytest.raises(CliError) as exc:
        parse(SPEC, ["99", "--memory", "abc", "--ostype", "dos"])
    assert exc.value.text == (
        "400 Parameter verification failed.\n"
        "memory: type check ('integer') failed - got 'abc'\n"
        "ostype: value 'dos' does not have a value in the enumeration 'l26, other'\n"
        "vmid: value must have a minimum value of 100\n"
        "qm demo <vmid> [OPTIONS]\n"
    )


def test_vmid_type_and_range() -> None:
    with pytest.raises(CliError) as exc:
        parse(SPECS["status"], ["abc"])
    assert "vmid: type check ('integer') failed - got 'abc'" in exc.value.text
    with pytest.raises(CliError) as exc:
        parse(SPECS["status"], ["1000000000"])
    assert "vmid: value must have a maximum value of 999999999" in exc.value.text


@pytest.mark.parametrize(
    ("name", "ok"),
    [("web-120", True), ("a.b-c", True), ("120", True), ("web_120", False), ("-web", False),
     ("web-", False), ("", False), ("a..b", False), ("x;rm -rf /", False)],
)  # fmt: skip
def test_dns_names(name: str, ok: bool) -> None:
    assert (check_dns_name(name) is None) is ok


def test_cpu_models() -> None:
    assert cpu_model_error("x86-64-v2-AES") is None
    assert cpu_model_error("host") is None
    assert cpu_model_error("cputype=kvm64,flags=+aes") is None
    assert cpu_model_error("custom-mine") is None
    assert cpu_model_error("x86-64-v1") == (
        "Built-in cputype 'x86-64-v1' is not defined (missing 'custom-' prefix?)"
    )


def test_ipconfig_requires_mask_and_gw_requires_ip() -> None:
    check = make_ipconfig_check("ipconfig0")
    assert check("ip=192.168.0.120/24,gw=192.168.0.1") is None
    assert check("ip=dhcp") is None
    # accepted by qm set, dropped by cloud-init at start (a DHCP address takes its gateway)
    assert check("ip=dhcp,gw=192.168.0.1") is None
    assert check("ip=192.168.0.120") == (
        "invalid format - format error\n"
        "ipconfig0.ip: invalid format - value does not look like a valid ipv4 network configuration"
    )
    assert "property 'gw' requires property 'ip'" in (check("gw=192.168.0.1") or "")


def test_net_property_string() -> None:
    check = make_net_check("net0")
    assert check("virtio,bridge=vmbr0") is None
    assert check("virtio=BC:24:11:00:00:01,bridge=vmbr0") is None
    assert "net0.macaddr" in (check("virtio=zz,bridge=vmbr0") or "")
    assert "net0.model" in (check("bridge=vmbr0") or "")
