"""Install and set/* bodies: defaults, clamping, and every malformed input refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from actors.vm.requests import (
    BadRequest,
    balloon_for,
    clamp_cpu,
    clamp_disk,
    clamp_ram,
    memory_balloon,
    parse_install,
    parse_set_cpu,
    parse_set_disk,
    parse_set_memory,
    parse_set_node,
)
from tests.vm.helpers import PUBKEY, settings


def test_defaults_are_applied() -> None:
    req = parse_install({"os": "debian", "version": "12"}, settings())
    got = (req.cpu, req.ram, req.disk_gb, req.user, req.passwd)
    # No password given is None, never a default: the gateway makes a random one.
    assert got == (2, 2048, 16, "debian", None)
    assert req.vmid is None and req.node is None and req.name is None and req.pubkey is None
    assert parse_install({"os": "rockylinux", "version": "9"}, settings()).user == "rocky"
    assert parse_install({"os": "ubuntu", "version": "24.04"}, settings()).user == "ubuntu"


def test_full_request() -> None:
    body = {
        "os": "ubuntu", "version": "22.04", "name": "web-01", "id": 150, "node": "pve2",
        "cpu": 4, "ram": 4096, "disk": "40G", "user": "deploy", "passwd": "s3cr3t",
        "pubkey": PUBKEY,
    }  # fmt: skip
    req = parse_install(body, settings())
    assert (req.name, req.vmid, req.node, req.cpu, req.ram, req.disk_gb) == (
        "web-01", 150, "pve2", 4, 4096, 40,
    )  # fmt: skip
    assert (req.user, req.passwd, req.pubkey) == ("deploy", "s3cr3t", PUBKEY)


BAD: list[tuple[Any, str]] = [
    ([1, 2], "body:"),
    ("x", "body:"),
    ({"version": "12"}, "os: is required"),
    ({"os": "arch", "version": "1"}, "os: must be one of debian, ubuntu, rockylinux"),
    ({"os": 5, "version": "12"}, "os: must be a string"),
    ({"os": "debian"}, "version: is required"),
    ({"os": "debian", "version": "10"}, "version: debian supports 11, 12, 13"),
    ({"os": "debian", "version": 12}, "version: must be a string"),
    ({"os": "debian", "version": "12", "id": 99}, "id: must be between 100 and 254"),
    ({"os": "debian", "version": "12", "id": 255}, "id: must be between 100 and 254"),
    ({"os": "debian", "version": "12", "id": "120"}, "id: must be an integer"),
    ({"os": "debian", "version": "12", "id": 120.5}, "id: must be an integer"),
    ({"os": "debian", "version": "12", "cpu": True}, "cpu: must be an integer"),
    ({"os": "debian", "version": "12", "ram": "2G"}, "ram: must be an integer"),
    ({"os": "debian", "version": "12", "disk": 16}, "disk: must be a string"),
    ({"os": "debian", "version": "12", "disk": "16"}, "disk: must be a whole number followed by G"),
    ({"os": "debian", "version": "12", "disk": "1.5G"}, "disk: must be a whole number"),
    ({"os": "debian", "version": "12", "disk": "-20G"}, "disk: must be a whole number"),
    ({"os": "debian", "version": "12", "name": "bad_name"}, "name: must be a DNS name"),
    ({"os": "debian", "version": "12", "name": "a;rm -rf /"}, "name: must be a DNS name"),
    ({"os": "debian", "version": "12", "node": "pve9"}, "node: unknown node 'pve9'"),
    ({"os": "debian", "version": "12", "user": "Root!"}, "user: must be a Linux user name"),
    ({"os": "debian", "version": "12", "user": "$(id)"}, "user: must be a Linux user name"),
    ({"os": "debian", "version": "12", "passwd": "a\nb"}, "passwd: must be 1 to 128"),
    ({"os": "debian", "version": "12", "passwd": "x" * 129}, "passwd: must be 1 to 128"),
    ({"os": "debian", "version": "12", "pubkey": "garbage"}, "pubkey: is not a valid OpenSSH"),
    ({"os": "debian", "version": "12", "pubkey": PUBKEY + "\n" + PUBKEY}, "pubkey: must be one"),
    ({"os": "debian", "version": "12", "pubkey": 7}, "pubkey: must be a string"),
    # A field install does not take would silently build another VM: refused by name.
    ({"os": "debian", "version": "12", "memory": 4096}, "memory: unknown field; did you mean ram?"),
    ({"os": "debian", "version": "12", "vmid": 150}, "vmid: unknown field; did you mean id?"),
    ({"os": "debian", "version": "12", "password": "x"}, "password: unknown field; did you mean "
     "passwd?"),
    ({"os": "debian", "version": "12", "cores": 4}, "cores: unknown field; did you mean cpu?"),
    ({"os": "debian", "version": "12", "verison": "12"}, "verison: unknown field; did you mean "
     "version?"),
    ({"os": "debian", "version": "12", "colour": "blue"}, "colour: unknown field; install takes "
     "os, version, name, id, node, cpu, ram, disk, user, passwd, pubkey"),
    ({"os": "debian", "version": "12", "x" * 500: 1}, "'" + "x" * 40 + "'...: unknown field"),
    ({"os": "debian", "version": "12", "a\nb": 1}, "'a\\nb': unknown field"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), BAD)
def test_bad_install_bodies_name_the_field(body: Any, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_install(body, settings())
    assert str(caught.value).startswith(message)


def test_id_must_be_inside_the_assigned_range() -> None:
    with pytest.raises(BadRequest, match="id: must be between 150 and 160"):
        parse_install(
            {"os": "debian", "version": "12", "id": 149},
            settings(ASSIGN_IP_START="150", ASSIGN_IP_END="160"),
        )


def test_clamping_to_limits_and_minimums() -> None:
    limited = settings(VM_MAX_CPU="4", VM_MAX_RAM="8192", VM_MAX_DISK="64")
    assert clamp_cpu(8, limited).value == 4 and clamp_cpu(8, limited).note
    assert clamp_cpu(0, limited).value == 1
    assert clamp_cpu(-3, settings()).value == 1
    assert clamp_cpu(40, settings()).value == 32
    assert clamp_cpu(2, limited).note is None
    assert clamp_ram(100, limited).value == 512
    assert clamp_ram(16384, limited).value == 8192
    assert clamp_ram(16384, settings()).value == 16384
    assert clamp_disk(8, limited).value == 16
    assert clamp_disk(100, limited).value == 64
    assert clamp_disk(100, settings()).value == 100
    assert clamp_disk(16, limited).note is None


def test_set_memory_brings_a_balloon_above_it_down_with_it() -> None:
    # Proxmox refuses a balloon minimum above the memory (balloon value too large).
    with_min = settings(VM_BALLOON_MIN="1024")
    assert memory_balloon(4096, with_min, {"balloon": "1024"}) == 1024  # as at install
    assert memory_balloon(512, with_min, {"balloon": "1024"}) == 512  # down with the memory
    assert memory_balloon(1024, with_min, {"balloon": "1024"}) is None  # equal is fine
    assert memory_balloon(512, settings(), {"balloon": "2048"}) == 512  # set by someone else
    assert memory_balloon(4096, settings(), {"balloon": "2048"}) is None  # theirs, left alone
    assert memory_balloon(512, settings(), {}) is None  # no balloon minimum at all
    assert memory_balloon(512, settings(), {"balloon": "0"}) is None  # device off


def test_balloon_only_when_configured_and_ram_exceeds_it() -> None:
    assert balloon_for(4096, settings()) is None
    assert balloon_for(4096, settings(VM_BALLOON_MIN="2048")) == 2048
    assert balloon_for(2048, settings(VM_BALLOON_MIN="2048")) is None


def test_set_bodies() -> None:
    s = settings(VM_MAX_CPU="8", VM_MAX_RAM="4096")
    assert parse_set_cpu({"cpu": 16}, s) == 8
    assert parse_set_cpu({"cpu": 3}, s) == 3
    assert parse_set_memory({"memory": 8192}, s) == 4096
    assert parse_set_disk({"disk": "10G"}) == 10
    assert parse_set_node({"node": "pve2"}, s) == "pve2"
    for call, body, message in [
        (lambda b: parse_set_cpu(b, s), {"cpu": 0}, "cpu: must be between 1 and 32"),
        (lambda b: parse_set_cpu(b, s), {"cpu": 33}, "cpu: must be between 1 and 32"),
        (lambda b: parse_set_cpu(b, s), {}, "cpu: is required"),
        (lambda b: parse_set_cpu(b, s), {"cpu": "2"}, "cpu: must be an integer"),
        (lambda b: parse_set_memory(b, s), {"memory": 256}, "memory: must be at least 512"),
        (lambda b: parse_set_memory(b, s), [], "body: must be a JSON object"),
        (parse_set_disk, {"disk": "-5G"}, "disk: shrinking is not supported"),
        (parse_set_disk, {"disk": "0G"}, "disk: must grow the disk by at least 1G"),
        (parse_set_disk, {"disk": "5"}, "disk: must be a whole number followed by G"),
        (lambda b: parse_set_node(b, s), {"node": "nope"}, "node: unknown node 'nope'"),
        (lambda b: parse_set_node(b, s), {"node": None}, "node: is required"),
    ]:
        with pytest.raises(BadRequest) as caught:
            call(body)
        assert str(caught.value).startswith(message), (body, str(caught.value))
