"""Golden tests of what cairn's API driver puts on the wire and reads back: requests, auth
headers and the answers' shapes, as a real Proxmox would see and send them."""

from __future__ import annotations

import pytest

from actors.vm.pveapi import errors
from actors.vm.pveapi.wire import (
    ErrorBody,
    Upid,
    api_base,
    encode_text,
    envelope_data,
    error_body,
    form_body,
    form_pairs,
    format_fingerprint,
    missing_privilege,
    normalize_fingerprint,
    parse_token,
    parse_upid,
    path_url,
    sshkeys_param,
    tags_param,
    task_ok,
    task_warnings,
)

SECRET = "8c3f1f0e-2b7a-4d7e-9a55-0f3f8b1c2d3e"


def test_token_header_splits_at_the_last_equals_sign() -> None:
    token = parse_token(f"cairn@pve!driver={SECRET}")
    assert token.tokenid == "cairn@pve!driver"
    assert token.header() == f"PVEAPIToken=cairn@pve!driver={SECRET}"
    assert SECRET not in repr(token)


@pytest.mark.parametrize(
    "bad",
    ["cairn@pve=secret", "cairn!driver=s", "cairn@pve!driver", "cairn@pve!9x=s", "a b@pve!t=s", ""],
)
def test_malformed_tokens_are_refused_with_the_expected_shape(bad: str) -> None:
    with pytest.raises(ValueError, match=r"USER@REALM!TOKENID=SECRET"):
        parse_token(bad)


def test_fingerprint_forms() -> None:
    colons = ":".join(["AB"] * 32)
    assert normalize_fingerprint(colons) == bytes([0xAB]) * 32
    assert normalize_fingerprint("ab" * 32) == bytes([0xAB]) * 32
    assert format_fingerprint(bytes(range(32))).startswith("00:01:02:03")
    for bad in ("AB:CD", "zz" * 32, "ab" * 33):
        with pytest.raises(ValueError, match="PVE_API_FINGERPRINT"):
            normalize_fingerprint(bad)


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("https://pve1:8006", "https://pve1:8006/api2/json"),
        ("https://10.0.0.1:8006/", "https://10.0.0.1:8006/api2/json"),
        ("https://pve1:8006/api2/json/", "https://pve1:8006/api2/json"),
        ("https://[::1]:8006", "https://[::1]:8006/api2/json"),
    ],
)
def test_api_base(given: str, base: str) -> None:
    assert api_base(given) == base


@pytest.mark.parametrize("bad", ["http://pve1:8006", "pve1:8006", "https://pve1:8006/other"])
def test_api_base_refuses_what_is_not_pveproxy(bad: str) -> None:
    with pytest.raises(ValueError, match="PVE_API_URL"):
        api_base(bad)


def test_booleans_are_zero_or_one_and_none_is_absent() -> None:
    assert form_pairs({"purge": True, "numa": False, "cores": 2, "pool": None}) == [
        ("purge", "1"),
        ("numa", "0"),
        ("cores", "2"),
    ]
    with pytest.raises(TypeError):
        form_pairs({"x": [1]})


def test_sshkeys_are_encoded_twice_on_the_wire() -> None:
    keys = "ssh-ed25519 AAAAC3Nz+/= cairn@ctl\n"
    value = sshkeys_param(keys)
    assert value == "ssh-ed25519%20AAAAC3Nz%2B%2F%3D%20cairn%40ctl%0A"
    # PVE's `urlencoded` format check (PC pve_verify_urlencoded)
    import re

    assert re.fullmatch(r"[-%a-zA-Z0-9_.!~*'()]*", value)
    assert form_body({"sshkeys": value}) == (
        "sshkeys=ssh-ed25519%2520AAAAC3Nz%252B%252F%253D%2520cairn%2540ctl%250A"
    )


def test_delete_parameters_go_in_the_query_and_upids_are_one_segment() -> None:
    base = "https://h:8006/api2/json"
    assert path_url(base, "/nodes/pve1/qemu/120", {"purge": True}) == (
        f"{base}/nodes/pve1/qemu/120?purge=1"
    )
    upid = "UPID:pve1:003CDE3D:025BF6DA:665F0761:qmstart:120:cairn@pve!driver:"
    assert path_url(base, f"/nodes/pve1/tasks/{upid}/status") == (
        f"{base}/nodes/pve1/tasks/UPID%3Apve1%3A003CDE3D%3A025BF6DA%3A665F0761%3Aqmstart"
        "%3A120%3Acairn%40pve%21driver%3A/status"
    )


def test_tags_are_lowercased_sorted_and_deduplicated() -> None:
    assert tags_param(["Debian", "cairn", "debian", " "]) == "cairn;debian"


def test_description_is_encoded_as_qm_config_prints_it() -> None:
    assert encode_text("created by cairn, install task t1\nnotes: 100%") == (
        "created by cairn, install task t1%0Anotes%3A 100%25"
    )


def test_envelope() -> None:
    assert envelope_data(b'{"data":"UPID:x"}') == "UPID:x"
    assert envelope_data(b'{"data":null}') is None
    assert envelope_data(b"") is None
    with pytest.raises(ValueError, match="envelope"):
        envelope_data(b"[1]")


def test_error_bodies_of_each_generation() -> None:
    current = error_body(
        b'{"data":null,"errors":{"name":"value does not look like a valid DNS name\\n"},'
        b'"message":"Parameter verification failed.\\n"}'
    )
    assert current == ErrorBody(
        {"name": "value does not look like a valid DNS name"}, "Parameter verification failed."
    )
    assert error_body(b'{"data":null}') == ErrorBody({}, None)
    assert error_body(b"") == ErrorBody({}, None)  # 401
    assert error_body(b"<html>") == ErrorBody({}, None)


def test_upid_round_trip() -> None:
    text = "UPID:pve1:003CDE3D:025BF6DA:665F0761:qmstart:12001:gitlab@pam!cicd:"
    upid = parse_upid(text)
    assert upid == Upid(
        "pve1", 0x3CDE3D, 0x25BF6DA, 0x665F0761, "qmstart", "12001", "gitlab@pam!cicd"
    )
    assert str(upid) == text
    for bad in (text[:-1], text.replace("UPID", "upid"), "UPID:pve_1:0:0:0:x::u:"):
        with pytest.raises(ValueError, match="UPID"):
            parse_upid(bad)


def test_task_exit_statuses() -> None:
    assert task_ok("OK") and task_ok("WARNINGS: 2") and task_warnings("WARNINGS: 2") == 2
    assert not task_ok("VM 120 already running") and not task_ok("unexpected status")
    assert not task_ok("WARNINGS: x")


def test_the_missing_privilege_is_named() -> None:
    found = missing_privilege("Permission check failed (/vms/120, VM.Allocate)")
    assert found is not None and (found.path, found.privilege) == ("/vms/120", "VM.Allocate")
    alt = missing_privilege(
        "Permission check failed (/storage/local, Datastore.Audit|Datastore.AllocateSpace)"
    )
    assert alt is not None and alt.privilege == "Datastore.Audit|Datastore.AllocateSpace"
    assert missing_privilege("Permission check failed") is None


def test_error_mapping() -> None:
    denied = errors.from_response(
        403, "Permission check failed (/vms/120, VM.Allocate)", ErrorBody({}, None)
    )
    assert isinstance(denied, errors.PermissionDenied)
    assert "lacks VM.Allocate on /vms/120" in denied.text
    auth = errors.from_response(401, "Authentication failed!", ErrorBody({}, None))
    assert isinstance(auth, errors.AuthFailed) and "PVE_API_TOKEN" in auth.text
    bad = errors.from_response(
        400,
        "Parameter verification failed.",
        ErrorBody({"ciupgrade": "property is not defined"}, None),
    )
    assert bad.text == "Parameter verification failed. ciupgrade: property is not defined"
    gone = errors.from_response(
        500,
        "Configuration file 'nodes/pve1/qemu-server/120.conf' does not exist",
        ErrorBody({}, None),
    )
    assert gone.not_found and not gone.retryable
    assert errors.from_response(596, "Connection timed out", ErrorBody({}, None)).retryable
    newer = errors.from_response(
        500, "unable to create VM 120 - x", ErrorBody({}, "unable to create VM 120 - x\nmore")
    )
    assert newer.text == "unable to create VM 120 - x\nmore"
