"""The pure parts of the command line, golden: what a terminal is shown, the event-stream
parser, where each service is, which token goes, the paths and bodies sent."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

import pytest

from actors.config import ConfigError
from gateway import server as services
from gateway.cli import vm as cli_vm
from gateway.cli.client import (
    SERVICES,
    USAGE,
    CliError,
    Event,
    Upload,
    error_text,
    is_own_address,
    parse_sse,
    quote_path,
    read_token,
    service_base,
    target,
)
from gateway.cli.common import clean, size_mb, table, when_ms
from gateway.cli.functions import result_text, streamed_value
from gateway.cli.vm import install_body, list_table


def test_clean_shows_control_characters_instead_of_sending_them() -> None:
    assert clean("web\x1b]0;owned\x07\x1b[2J\tok\r\n\x9b\u2028é") == (
        "web\\x1b]0;owned\\x07\\x1b[2J\tok\\x0d\\x0a\\x9b\\u2028é"
    )
    assert clean(12) == "12"


def test_table_aligns_and_cleans() -> None:
    assert table(("A", "NAME"), [(1, "x\x1b[31m"), (None, "long name")]) == (
        "A  NAME\n1  x\\x1b[31m\n-  long name"
    )


def test_list_table_golden() -> None:
    body = {
        "simulated": True,
        "list": [
            {"vmid": 101, "name": "web", "state": "running", "node": "pve1", "ip": "10.0.0.101",
             "os": "debian", "cpu": 2, "memory": 2048, "disk": 16, "created_by_cairn": True},
            {"vmid": 7, "name": "gui", "running": False, "node": "pve2", "ip": None,
             "os": None, "cpu": 1, "memory": 1536, "disk": 32, "created_by_cairn": False},
        ],
    }  # fmt: skip
    assert list_table(body) == (
        "VMID  NAME  STATE    NODE  IP          OS      CPU  MEMORY    DISK    CAIRN\n"
        "101   web   running  pve1  10.0.0.101  debian  2    2 GiB     16 GiB  yes\n"
        "7     gui   stopped  pve2  -           -       1    1536 MiB  32 GiB  no\n"
        "2 VMs (simulated cluster)"
    )
    assert list_table({"list": []}) == "no VMs\n0 VMs (cluster)"


def test_sizes_and_versions() -> None:
    assert [size_mb(v) for v in (512, 2048, 1536, None)] == ["512 MiB", "2 GiB", "1536 MiB", "-"]
    assert when_ms(1795778119572) == "2026-11-27 11:15:19 UTC"
    assert when_ms("x") == "-"


def lines(text: str) -> list[bytes]:
    return [line.encode() for line in text.splitlines(keepends=True)]


def test_parse_sse() -> None:
    stream = (
        ": keep-alive\n\n"
        'id: 101:1\ndata: {"step":"a","status":"processing","message":"[*] x"}\n\n'
        "data: not json\n\n"
        'event: stopping\ndata: {"message":"bye"}\n\r\n'
        'data: {"a":\ndata: 1}\n\n'
        "event: close\ndata: {}\n\n"
        'data: {"cut": "off"}\n'
    )
    assert list(parse_sse(iter(lines(stream)))) == [
        Event({"step": "a", "status": "processing", "message": "[*] x"}, None, "101:1"),
        Event(None),
        Event({"message": "bye"}, "stopping"),
        Event({"a": 1}),
        Event({}, "close"),
    ]


def test_where_each_service_is() -> None:
    assert service_base({}, "vm") == "http://127.0.0.1:8100/api"
    assert service_base({"FUNCTIONS_PORT": "9000"}, "functions") == "http://127.0.0.1:9000"
    assert service_base({"IMAGES_HOST": "0.0.0.0"}, "images") == "http://127.0.0.1:8300"
    assert service_base({"VM_HOST": "::"}, "vm") == "http://[::1]:8100/api"
    assert service_base({"VM_HOST": "::1", "VM_PORT": "81"}, "vm") == "http://[::1]:81/api"
    url = {"CAIRN_VM_URL": "https://cairn.example.org/api/"}
    assert service_base(url, "vm") == "https://cairn.example.org/api"
    for bad in ({"CAIRN_VM_URL": "ftp://x"}, {"CAIRN_VM_URL": "http://"}, {"VM_PORT": "0"}):
        with pytest.raises(ConfigError):
            service_base(bad, "vm")


def test_the_default_ports_are_those_cairn_up_listens_on() -> None:
    for name, (_, port, _) in SERVICES.items():
        assert services.load(name).default_port == port


def test_which_token_goes(tmp_path: Path) -> None:
    file = tmp_path / "t"
    file.write_text("\n  cairn_fromfile  \nsecond line\n")
    assert read_token({}, None) is None
    assert read_token({"CAIRN_TOKEN": " cairn_env "}, None) == "cairn_env"
    assert read_token({"CAIRN_TOKEN_FILE": str(file)}, None) == "cairn_fromfile"
    both = {"CAIRN_TOKEN": "cairn_env", "CAIRN_TOKEN_FILE": str(file)}
    assert read_token(both, None) == "cairn_env"
    assert read_token({"CAIRN_TOKEN": "cairn_env"}, str(file)) == "cairn_fromfile"
    with pytest.raises(CliError) as bad:
        read_token({"CAIRN_TOKEN": "two words"}, None)
    assert bad.value.code == USAGE and "two words" not in bad.value.message


def test_paths_become_one_piece_of_a_url() -> None:
    assert quote_path("/a b/c?d=1#e%41/") == "a%20b/c%3Fd%3D1%23e%2541"
    assert quote_path("x/../y") == "x/../y"  # the service refuses it, with its own message


def test_error_text() -> None:
    assert error_text("text/plain; charset=utf-8", b"  VM is\n  busy ") == "VM is busy"
    assert error_text("application/json", b'{"error": "host not allowed"}') == "host not allowed"
    assert error_text("application/json", b"[1]") == "[1]"


def test_upload_body_quotes_the_file_name() -> None:
    body, content_type = Upload("filepath", 'a"b.png', b"\x89PNG").encode()
    boundary = content_type.split("boundary=", 1)[1]
    assert body.startswith(f"--{boundary}\r\n".encode())
    assert b'name="filepath"; filename="a\\"b.png"' in body
    assert body.endswith(f"\r\n--{boundary}--\r\n".encode())


def install_args(**given: object) -> argparse.Namespace:
    fields = {
        "os": "debian",
        "os_version": "12",
        "name": None,
        "id": None,
        "node": None,
        "cpu": None,
        "ram": None,
        "disk": None,
        "user": None,
        "pubkey": None,
        "pubkey_file": None,
        "password_file": None,
    }
    return argparse.Namespace(**{**fields, **given})


def test_install_body(tmp_path: Path) -> None:
    assert install_body(install_args()) == {"os": "debian", "version": "12"}
    key, password = tmp_path / "id.pub", tmp_path / "pw"
    key.write_text("ssh-ed25519 AAAA me@host\n")
    password.write_text("s3cret with spaces\nignored\n")
    body = install_body(
        install_args(
            name="web",
            id=150,
            cpu=4,
            ram=4096,
            disk="32G",
            pubkey_file=str(key),
            password_file=str(password),
        )
    )
    assert body == {
        "os": "debian",
        "version": "12",
        "name": "web",
        "id": 150,
        "cpu": 4,
        "ram": 4096,
        "disk": "32G",
        "pubkey": "ssh-ed25519 AAAA me@host",
        "passwd": "s3cret with spaces",
    }
    password.write_text("\n")
    with pytest.raises(CliError, match="is empty"):
        install_body(install_args(password_file=str(password)))


def test_install_takes_memory_as_set_does_and_ram_as_before() -> None:
    parser = argparse.ArgumentParser(prog="cairn")
    cli_vm.register(parser.add_subparsers(dest="command", required=True))
    base = ["vm", "install", "--os", "debian", "--version", "12"]
    for flag in ("--memory", "--ram"):
        assert install_body(parser.parse_args([*base, flag, "1024"]))["ram"] == 1024


def test_results_as_stdout_shows_them() -> None:
    assert result_text("two\nlines", "string") == "two\nlines"
    assert result_text({"é": 1}, "json") == '{"é": 1}'
    assert result_text(3, "number") == "3"
    assert result_text(None, "json") == "null"
    assert streamed_value('{"a":1}', "json") == {"a": 1}
    assert streamed_value("3.5", "number") == 3.5
    assert streamed_value("{not", "json") == "{not"
    assert streamed_value("text", "string") == "text"


def test_plain_http_carries_a_token_only_to_this_machine() -> None:
    assert is_own_address(ipaddress.ip_address("127.0.0.2"))
    assert not is_own_address(ipaddress.ip_address("192.0.2.10"))  # TEST-NET-1: nobody's
    assert not is_own_address(ipaddress.ip_address("0.0.0.0"))
    with pytest.raises(CliError, match=r"plain http to 192\.0\.2\.10"):
        target({"CAIRN_TOKEN": "cairn_x", "CAIRN_VM_URL": "http://192.0.2.10/api"}, "vm")
    with pytest.raises(CliError, match=r"plain http to cairn\.example\.org"):
        target({"CAIRN_TOKEN": "cairn_x", "CAIRN_VM_URL": "http://cairn.example.org/api"}, "vm")
    https = target({"CAIRN_TOKEN": "cairn_x", "CAIRN_VM_URL": "https://192.0.2.10/api"}, "vm")
    assert https.token == "cairn_x"
    local = target({"CAIRN_TOKEN": "cairn_x", "VM_HOST": "127.0.0.5"}, "vm")
    assert local.base == "http://127.0.0.5:8100/api" and local.token == "cairn_x"
