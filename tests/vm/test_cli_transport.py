"""Node transports against the simulated nodes: real subprocesses, real SSH, host keys checked."""

from __future__ import annotations

from pathlib import Path

import asyncssh
from pvesim.cluster import SimCluster

from actors.vm.cli.transport import LocalTransport, SshTransport


async def test_local_subprocess_with_stdin_streaming_and_timeout(sim: SimCluster) -> None:
    local = LocalTransport(sim.env())
    result = await local.run(["pvesm", "status", "--storage", "local-lvm"])
    assert result.ok and "local-lvm" in result.stdout
    lines: list[str] = []
    echoed = await local.run(["cat"], stdin=b"a\nb\n", on_line=lines.append)
    assert echoed.stdout == "a\nb\n" and lines == ["a", "b"]
    missing = await local.run(["qm", "status", "999"])
    assert missing.rc == 2 and "does not exist" in missing.stderr
    slow = await LocalTransport({}, timeout=0.2).run(["sleep", "5"])
    assert slow.rc == 124 and "timed out" in slow.stderr


def ssh_to(sim: SimCluster, known_hosts: str) -> SshTransport:
    return SshTransport(
        "127.0.0.2",
        port=int(sim.env()["PVE_SSH_PORT"]),
        username="root",
        client_key=sim.env()["PVE_SSH_KEY"],
        known_hosts=known_hosts,
    )


async def test_ssh_runs_on_the_remote_node(sim: SimCluster) -> None:
    ssh = ssh_to(sim, sim.env()["PVE_KNOWN_HOSTS"])
    try:
        result = await ssh.run(["pvesm", "status", "--storage", "local-lvm"])
        assert result.ok and "lvmthin" in result.stdout
        missing = await ssh.run(["qm", "status", "999"])
        assert missing.rc == 2 and "nodes/pve2/qemu-server/999.conf" in missing.stderr
    finally:
        await ssh.close()


async def test_ssh_refuses_a_node_whose_host_key_is_not_known(
    sim: SimCluster, tmp_path: Path
) -> None:
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    port = sim.env()["PVE_SSH_PORT"]
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.2]:{port} {impostor}")
    ssh = ssh_to(sim, str(wrong))
    result = await ssh.run(["qm", "list"])
    assert result.rc == 255 and "ssh: connect to host 127.0.0.2" in result.stderr
    assert "qm list" not in "\n".join(sim.commands())
    empty = tmp_path / "empty"
    empty.write_text("")
    assert (await ssh_to(sim, str(empty)).run(["qm", "list"])).rc == 255
