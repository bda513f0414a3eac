"""The first SSH to a new guest: nothing secret goes to a machine that has not proved it is the
VM Proxmox made (docs/vm.md, "What is verified"). Real SSH over loopback, both drivers."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncssh
import attrs
import pytest

from actors.vm.guest import GuestError, ensure_key, run_init
from tests.ports import free_port
from tests.ssh_servers import AnyKeyServer
from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.test_failures_e2e import assert_clean

driver = drivers.driver
start_service = drivers.start_service

ROOT_PASSWORD = "r00t pw 'q' $(id) é"
USER_PASSWORD = "user-secret-7"
CHALLENGE = re.compile(r"^cairn-guest-proof:\d+:SHA256:[A-Za-z0-9+/]+:[0-9a-f]{32}\n$")


@attrs.define
class Received:
    user: str
    command: str
    stdin: str


@asynccontextmanager
async def impostor(host: str, port: int) -> AsyncIterator[list[Received]]:
    """Another machine answering SSH at `host`: it says `ready`, claims success to anything
    else with a plausible 64-hex answer, and keeps everything it was sent."""
    seen: list[Received] = []

    async def handle(process: asyncssh.SSHServerProcess[str]) -> None:
        command = process.command or ""
        stdin = "" if command == "echo ready" else await process.stdin.read()
        seen.append(Received(process.get_extra_info("username") or "", command, stdin))
        process.stdout.write("ready\n" if command == "echo ready" else "ab" * 32 + "\n")
        process.exit(0)

    server = await asyncssh.listen(
        host,
        port,
        server_factory=AnyKeyServer,  # an impostor wants to be talked to
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        process_factory=handle,
    )
    try:
        yield seen
    finally:
        server.close()
        await server.wait_closed()


async def test_an_impostor_at_the_vms_address_never_receives_a_secret(
    start_service: Any,
) -> None:
    """A machine that holds the VM's address first (the real guest cannot listen there) gets
    `echo ready` and the challenge, nothing else: not the init script, not the root password,
    not the user's password or its hash. The install stops there and removes the VM."""
    service: Service = await start_service(VM_ROOT_PASSWORD=ROOT_PASSWORD)
    vmid = 141
    port = int(service.env["VM_SSH_PORT"])
    async with impostor(f"127.0.0.{vmid}", port) as seen:
        sse = await service.install(id=vmid, passwd=USER_PASSWORD)
    assert sse.closed and sse.last["status"] == "error", sse.records[-3:]
    assert sse.last["step"] == "VM initialization > waiting for ready"
    message = sse.last["message"]
    assert f"the machine at 127.0.0.{vmid} with host key SHA256:" in message
    assert f"could not prove it is VM {vmid}" in message
    assert "Nothing secret was sent to it" in message
    assert not any(r["step"] == "VM initialization > SSH initialization" for r in sse.records)
    assert_clean(service, vmid)

    commands = [r.command for r in seen]
    assert commands[0] == "echo ready"
    assert set(commands[1:]) <= {c for c in commands if c.startswith("sudo -n sh -c ")}
    assert len(commands) >= 2 and commands[-1].startswith("sudo -n sh -c ")
    assert not any("bash -s" in c for c in commands)
    # What went to the impostor on stdin: the challenge and nothing else.
    assert [r.stdin for r in seen[1:]] and all(CHALLENGE.match(r.stdin) for r in seen[1:])
    received = "".join(r.command + r.stdin for r in seen)
    for secret in (ROOT_PASSWORD, USER_PASSWORD, "VM_ROOT_PASSWORD", "$6$", "chpasswd"):
        assert secret not in received, secret
    assert service.sim.guest_runs(vmid) == []


async def test_the_root_password_goes_only_to_the_guest_that_proved_it_is_the_vm(
    start_service: Any,
) -> None:
    service: Service = await start_service(VM_ROOT_PASSWORD=ROOT_PASSWORD)
    sse = await service.install(id=142, passwd=USER_PASSWORD)
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    proved = [r["message"] for r in sse.records if "reachable over SSH" in r["message"]]
    assert len(proved) == 1 and "and proved it is VM 142" in proved[0]
    runs = service.sim.guest_runs(142)
    kinds = ["init" if "bash -s" in r.command else "proof" if "/etc/shadow" in r.command
             else r.command for r in runs]  # fmt: skip
    first_proof, first_init = kinds.index("proof"), kinds.index("init")
    assert first_proof < first_init
    assert all(k == "echo ready" for k in kinds[:first_proof])
    assert runs[first_proof].exit_status == 0 and CHALLENGE.match(runs[first_proof].stdin)
    assert ROOT_PASSWORD not in "".join(r.stdin + r.command for r in runs[:first_init])
    assert "VM_ROOT_PASSWORD=" in runs[first_init].stdin and "r00t pw" in runs[first_init].stdin


async def test_the_init_script_is_never_sent_to_another_host_key(tmp_path: Path) -> None:
    """After the proof the key is pinned: if another machine holds the address by the time the
    script goes, the connection fails at key exchange, before any login or command."""
    key = tmp_path / "id_ed25519"
    ensure_key(key)
    proved = asyncssh.generate_private_key("ssh-ed25519")  # the key the real guest showed
    port = free_port("127.0.0.77")  # not an ephemeral one: see tests/ports.py
    async with impostor("127.0.0.77", port) as seen:
        with pytest.raises(GuestError, match="the host key is not the one it showed first"):
            await run_init(
                "127.0.0.77", user="debian", key=key, port=port, host_key=proved,
                script="echo hi\n", root_password=ROOT_PASSWORD,
            )  # fmt: skip
    assert seen == []
