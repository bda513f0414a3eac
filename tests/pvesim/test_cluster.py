"""SimCluster end to end: shims on PATH, real SSH to nodes and guests, failure injection."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import attrs
import pytest
from pvesim.cluster import SimCluster, VmView

from .helpers import qcow2_image, run


@attrs.frozen
class Proc:
    code: int
    out: str
    err: str


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as cluster:
        yield cluster


def vm_of(sim: SimCluster, vmid: int) -> VmView:
    vm = sim.vm(vmid)
    assert vm is not None, f"VM {vmid} does not exist"
    return vm


async def sh(sim: SimCluster, *argv: str, stdin: str = "") -> Proc:
    """Run a command the way the VM service's local transport does: by name, on PATH."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env={**os.environ, **sim.env()}, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(stdin.encode())
    return Proc(int(proc.returncode or 0), out.decode(), err.decode())


async def node_conn(sim: SimCluster, ip: str = "127.0.0.2") -> asyncssh.SSHClientConnection:
    env = sim.env()
    return await asyncssh.connect(
        ip, int(env["PVE_SSH_PORT"]), username=env["PVE_SSH_USER"],
        client_keys=[env["PVE_SSH_KEY"]], known_hosts=env["PVE_KNOWN_HOSTS"],
    )  # fmt: skip


async def install(sim: SimCluster, tmp_path: Path, key: asyncssh.SSHKey, vmid: int = 120,
                  user: str | None = "alice", boot: str = "order=scsi0") -> None:  # fmt: skip
    image = qcow2_image(tmp_path / f"debian-12-generic-amd64-{vmid}.qcow2")
    steps: list[tuple[list[str], str]] = [
        (["qm", "create", str(vmid), "--name", f"vm-{vmid}", "--memory", "2048", "--cores", "2",
          "--net0", "virtio,bridge=vmbr0", "--scsihw", "virtio-scsi-pci"], ""),
        (["qm", "importdisk", str(vmid), str(image), "local-lvm"], ""),
        (["qm", "set", str(vmid), "--sshkeys", "/dev/stdin"], key.export_public_key().decode()),
        (["qm", "set", str(vmid), "--tags", "debian", "--scsi0",
          f"local-lvm:vm-{vmid}-disk-0"], ""),
        (["qm", "set", str(vmid), "--ide2", "local-lvm:cloudinit"], ""),
        (["qm", "set", str(vmid), "--boot", boot], ""),
        (["qm", "set", str(vmid), "--ipconfig0", f"ip=127.0.0.{vmid}/24,gw=127.0.0.1"], ""),
    ]  # fmt: skip
    if user:
        steps.append((["qm", "set", str(vmid), "--ciuser", user], ""))
    # Set-up runs the commands in-process (the shims have their own tests): same code, no
    # interpreter start per command.
    for argv, stdin in steps:
        r = await asyncio.to_thread(run, sim.store, *argv, stdin=stdin)
        assert r.code == 0, (argv, r.err)


async def guest_conn(
    sim: SimCluster, vmid: int, user: str, key: asyncssh.SSHKey
) -> asyncssh.SSHClientConnection:
    return await asyncssh.connect(
        f"127.0.0.{vmid}", sim.vm_ssh_port, username=user, client_keys=[key], known_hosts=None
    )


async def test_shims_give_real_exit_codes(sim: SimCluster) -> None:
    r = await sh(sim, "qm", "status", "120")
    assert (r.code, r.out) == (2, "")
    assert r.err == "Configuration file 'nodes/pve1/qemu-server/120.conf' does not exist\n"
    assert (await sh(sim, "qm", "create", "120")).code == 0
    assert (await sh(sim, "qm", "status", "120")).out == "status: stopped\n"
    r = await sh(sim, "pvesm", "status", "--storage", "nope")
    assert r.code == 255 and "storage: No such storage." in r.err
    assert sim.commands()[-1] == "pve1 pvesm status --storage nope"


async def test_concurrent_creates_are_safe(sim: SimCluster) -> None:
    distinct = await asyncio.gather(*(sh(sim, "qm", "create", str(200 + i)) for i in range(5)))
    assert [r.code for r in distinct] == [0] * 5
    same = await asyncio.gather(*(sh(sim, "qm", "create", "300") for _ in range(4)))
    assert sorted(r.code for r in same) == [0, 255, 255, 255]
    assert all("VM 300 already exists on node 'pve1'" in r.err for r in same if r.code)
    assert len(sim.vms()) == 6


async def test_node_ssh_runs_commands_as_that_node(sim: SimCluster, tmp_path: Path) -> None:
    async with await node_conn(sim) as conn:
        r = await conn.run("qm create 130 --name on-two")
        assert r.exit_status == 0
        r = await conn.run("qm status 999")
        assert (r.exit_status, r.stderr) == (
            2, "Configuration file 'nodes/pve2/qemu-server/999.conf' does not exist\n",
        )  # fmt: skip
        r = await conn.run("/usr/sbin/qm list")
        assert "on-two" in str(r.stdout)
        r = await conn.run("rm -rf /")
        assert (r.exit_status, r.stderr) == (127, "bash: line 1: rm: command not found\n")
        r = await conn.run("pvesh get /cluster/resources --type vm --output-format json")
        assert '"node":"pve2"' in str(r.stdout)
    assert vm_of(sim, 130).node == "pve2"
    assert (await sh(sim, "qm", "status", "130")).code == 2


async def test_node_ssh_streams_output_and_reads_stdin(sim: SimCluster, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    async with await node_conn(sim) as conn:
        assert (await conn.run("qm create 131")).exit_status == 0
        r = await conn.run(
            "qm set 131 --sshkeys /dev/stdin", input=key.export_public_key().decode()
        )
        assert r.exit_status == 0 and str(r.stdout).startswith(
            "update VM 131: -sshkeys ssh-ed25519%20"
        )
        lines: list[str] = []
        async with conn.create_process("qm migrate 131 pve3") as proc:
            async for line in proc.stdout:
                lines.append(str(line))
            await proc.wait()
            assert proc.exit_status == 0
    assert "starting migration of VM 131 to node 'pve3' (127.0.0.3)" in lines[0]
    assert vm_of(sim, 131).node == "pve3"


async def test_node_ssh_checks_keys_both_ways(sim: SimCluster, tmp_path: Path) -> None:
    env = sim.env()
    stranger = asyncssh.generate_private_key("ssh-ed25519")
    port = int(env["PVE_SSH_PORT"])
    trusted = env["PVE_KNOWN_HOSTS"]
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect("127.0.0.2", port, username="root", client_keys=[stranger],
                               known_hosts=trusted)  # fmt: skip
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect("127.0.0.2", port, username="admin",
                               client_keys=[env["PVE_SSH_KEY"]], known_hosts=trusted)  # fmt: skip
    wrong = tmp_path / "known_hosts"
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    wrong.write_text(f"[127.0.0.2]:{env['PVE_SSH_PORT']} {other[0]} {other[1]}\n")
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect("127.0.0.2", port, username="root",
                               client_keys=[env["PVE_SSH_KEY"]],
                               known_hosts=str(wrong))  # fmt: skip


async def test_guest_lifecycle_over_real_ssh(sim: SimCluster, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key)
    r = await sh(sim, "qm", "start", "120")
    assert (r.code, r.out) == (0, "generating cloud-init ISO\n")
    assert sim.guest_up(120)
    async with await guest_conn(sim, 120, "alice", key) as conn:
        r2 = await conn.run("echo ready")
        assert (r2.exit_status, r2.stdout) == (0, "ready\n")
        script = "set -e\napt-get install -y qemu-guest-agent\n"
        r2 = await conn.run("sudo bash -s", input=script)
        assert r2.exit_status == 0
        r2 = await conn.run("sudo bash -s", input="if then fi\n")
        assert r2.exit_status == 2 and "syntax error" in str(r2.stderr)
    runs = sim.guest_runs(120)
    assert [(g.user, g.command, g.stdin) for g in runs[:2]] == [
        ("alice", "echo ready", ""), ("alice", "sudo bash -s", script),
    ]  # fmt: skip
    with pytest.raises(asyncssh.PermissionDenied):
        await guest_conn(sim, 120, "debian", key)
    assert (await sh(sim, "qm", "stop", "120")).code == 0
    assert not sim.guest_up(120)
    with pytest.raises(OSError):
        await guest_conn(sim, 120, "alice", key)
    assert (await sh(sim, "qm", "start", "120")).code == 0
    async with await guest_conn(sim, 120, "alice", key) as conn:
        assert (await conn.run("hostname")).stdout == "vm-120\n"
        assert (await sh(sim, "qm", "reboot", "120")).code == 0
        with pytest.raises((asyncssh.Error, OSError)):
            await conn.run("echo still-here")
    assert sim.guest_up(120)
    async with await guest_conn(sim, 120, "alice", key) as conn:
        assert (await conn.run("echo back")).stdout == "back\n"
    await sh(sim, "qm", "stop", "120")
    assert (await sh(sim, "qm", "destroy", "120", "--purge")).code == 0
    assert sim.vm(120) is None and sim.volumes("pve1") == {}
    assert not (sim.root / "guests" / "120.host_key").exists()


async def test_guest_default_user_from_tags_and_remote_start(
    sim: SimCluster, tmp_path: Path
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key, vmid=121, user=None)
    assert (await sh(sim, "qm", "migrate", "121", "pve2", "--with-local-disks")).code == 0
    async with await node_conn(sim) as conn:
        r = await conn.run("qm start 121")
        assert r.exit_status == 0, r.stderr
    async with await guest_conn(sim, 121, "debian", key) as conn:
        assert (await conn.run("whoami")).stdout == "debian\n"


async def test_unbootable_vm_never_answers(sim: SimCluster, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key, vmid=122, boot="order=net0;ide2")
    assert (await sh(sim, "qm", "start", "122")).code == 0
    assert vm_of(sim, 122).status == "running"
    assert not sim.guest_up(122)


async def test_set_while_running_applies_at_next_start(sim: SimCluster, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key, vmid=123)
    await sh(sim, "qm", "start", "123")
    assert (await sh(sim, "qm", "set", "123", "--ciuser", "bob")).code == 0
    with pytest.raises(asyncssh.PermissionDenied):
        await guest_conn(sim, 123, "bob", key)
    await sh(sim, "qm", "reboot", "123")
    async with await guest_conn(sim, 123, "bob", key) as conn:
        assert (await conn.run("id -un")).stdout == "bob\n"


async def test_failure_injection(sim: SimCluster, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    image = qcow2_image(tmp_path / "img.qcow2")
    await sh(sim, "qm", "create", "124")
    sim.inject_failure("qm importdisk", vmid=124)
    r = await sh(sim, "qm", "disk", "import", "124", str(image), "local-lvm")
    assert r.code == 255
    assert r.err == (
        f"copy failed: command '/usr/bin/qemu-img convert -p -n -f qcow2 -O raw {image} "
        "zeroinit:/dev/pve/vm-124-disk-0' failed: exit code 1\n"
    )
    assert sim.volumes("pve1") == {}
    assert (await sh(sim, "qm", "importdisk", "124", str(image), "local-lvm")).code == 0
    sim.inject_failure("qm resize")
    r = await sh(sim, "qm", "resize", "124", "scsi3", "16G")
    assert r.code == 0 and r.err == "disk 'scsi3' does not exist\n"
    assert sim.pending_failures() != []
    await sh(sim, "qm", "set", "124", "--scsi0", "local-lvm:vm-124-disk-0")
    r = await sh(sim, "qm", "resize", "124", "scsi0", "16G")
    assert (r.code, r.err) == (
        0, "command '/sbin/lvextend -L 16777216k pve/vm-124-disk-0' failed: exit code 5\n",
    )  # fmt: skip
    assert sim.pending_failures() == []
    sim.inject_failure("qm start", message="custom text", node="pve1")
    r = await sh(sim, "qm", "start", "124")
    assert (r.code, r.err) == (255, "custom text\n")

    await install(sim, tmp_path, key, vmid=125)
    sim.inject_failure("guest boot", vmid=125)
    await sh(sim, "qm", "start", "125")
    assert not sim.guest_up(125)
    await sh(sim, "qm", "reboot", "125")
    assert sim.guest_up(125)
    sim.inject_failure("guest exec", exit_code=1, message="E: boom")
    async with await guest_conn(sim, 125, "alice", key) as conn:
        assert (await conn.run("echo ready")).exit_status == 0
        r2 = await conn.run("sudo sh", input="true\n")
        assert (r2.exit_status, r2.stderr) == (1, "E: boom\n")
    sim.inject_failure("qm create")
    r = await sh(sim, "qm", "create", "126")
    assert r.code == 255 and r.err.startswith("unable to create VM 126 - command '/sbin/lvcreate")
    assert sim.vm(126) is None


async def test_failures_after_some_runs_and_a_guest_with_a_new_host_key(
    sim: SimCluster, tmp_path: Path
) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key, vmid=128)
    sim.inject_failure("guest boot", vmid=128, after=1)
    sim.inject_failure("guest rekey", vmid=128, after=2)
    await sh(sim, "qm", "start", "128")
    async with await guest_conn(sim, 128, "alice", key) as conn:
        first = conn.get_server_host_key()
    await sh(sim, "qm", "reboot", "128")  # the second boot: the injected failure
    assert not sim.guest_up(128)
    await sh(sim, "qm", "reboot", "128")  # the third: up again, with a new host key
    async with await guest_conn(sim, 128, "alice", key) as conn:
        third = conn.get_server_host_key()
    assert first is not None and third is not None
    assert first.public_data != third.public_data
    assert sim.pending_failures() == []


async def test_statd_lag_shows_unknown(sim: SimCluster) -> None:
    sim.set_statd_lag(3600)
    await sh(sim, "qm", "create", "127", "--name", "fresh")
    r = await sh(
        sim, "pvesh", "get", "/cluster/resources", "--type", "vm", "--output-format", "json"
    )
    assert (
        r.out == '[{"id":"qemu/127","node":"pve1","status":"unknown","type":"qemu","vmid":127}]\n'
    )


async def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        # Polls state written by other processes (the fake commands): no event to wait on.
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_scaled_delays_reboot_restarts_asynchronously(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as sim:
        await install(sim, tmp_path, key, vmid=128)
        await sh(sim, "qm", "start", "128")
        sim.set_delay_scale(0.02)
        assert (await sh(sim, "qm", "reboot", "128")).code == 0
        await wait_until(lambda: vm_of(sim, 128).status == "running")
        await sim.wait_guest(128, up=True, timeout=20)
        async with await guest_conn(sim, 128, "alice", key) as conn:
            assert (await conn.run("echo ready")).stdout == "ready\n"
        # the guest went down, qmeventd's restart ran, then the guest booted again
        assert sim.history(128)[-4:] == ["up", "down", "restart", "up"]


async def test_run_sim_prints_env_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c",
        "import sys; from pvesim.cli import run_sim; sys.exit(run_sim(sys.argv[1:]))",
        "--", "--root", str(tmp_path / "sim"), "--delay-scale", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    env: dict[str, str] = {}
    async with asyncio.timeout(30):
        while "PVESIM_ROOT" not in env:
            line = (await proc.stdout.readline()).decode()
            assert line, (await proc.stderr.read()).decode() if proc.stderr else ""
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v
    assert env["MAIN_NODE"] == "pve1" and env["NODE_pve3"] == "127.0.0.3"
    known = await asyncio.to_thread(Path(env["PVE_KNOWN_HOSTS"]).read_text)
    assert known.count("ssh-ed25519") == 3  # every node answers SSH, the main one too
    async with await asyncssh.connect(
        "127.0.0.3", int(env["PVE_SSH_PORT"]), username="root", client_keys=[env["PVE_SSH_KEY"]],
        known_hosts=env["PVE_KNOWN_HOSTS"],
    ) as conn:  # fmt: skip
        assert (await conn.run("pvesm status")).exit_status == 0
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        assert await proc.wait() == 0


async def test_offline_node(sim: SimCluster, tmp_path: Path) -> None:
    await sh(sim, "qm", "create", "140")
    async with await node_conn(sim, "127.0.0.3") as conn:
        assert (await conn.run("qm create 141")).exit_status == 0
    await sim.set_node_online("pve3", False)
    with pytest.raises(OSError):
        await node_conn(sim, "127.0.0.3")
    r = await sh(sim, "pvesh", "get", "/cluster/resources", "--output-format", "json")
    entries = {e["id"]: e for e in json.loads(r.out)}
    assert entries["node/pve3"]["status"] == "offline" and "mem" not in entries["node/pve3"]
    assert entries["qemu/141"]["status"] == "unknown"
    r = await sh(sim, "qm", "migrate", "140", "pve3")
    assert (r.code, r.err) == (255, "migration aborted\n")
    assert "Can't connect to destination address using public key" in r.out
    assert vm_of(sim, 140).node == "pve1" and vm_of(sim, 140).lock is None
    await sim.set_node_online("pve3", True)
    async with await node_conn(sim, "127.0.0.3") as conn:
        assert (await conn.run("qm status 141")).stdout == "status: stopped\n"


async def test_restart_keeps_ports_keys_and_running_guests(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    async with SimCluster(tmp_path / "pve", delay_scale=0, statd_lag=0) as sim:
        await install(sim, tmp_path, key, vmid=150)
        await sh(sim, "qm", "start", "150")
        await sh(sim, "qm", "create", "151")
        first_env = sim.env()
        # A create that died half-way leaves its lock behind, as on a real node
        with sim.store.locked() as txn:
            rec = txn.vm_on("pve1", 151)
            assert rec is not None
            rec["config"]["lock"] = "create"
            txn.save_vm("pve1", rec)
    async with SimCluster(tmp_path / "pve", delay_scale=0) as again:
        assert again.env() == first_env
        assert again.guest_up(150)
        async with await guest_conn(again, 150, "alice", key) as conn:
            assert (await conn.run("echo ready")).stdout == "ready\n"
        async with await node_conn(again) as conn:
            assert (await conn.run("qm status 999")).exit_status == 2
        assert (await sh(again, "qm", "start", "151")).err == "VM is locked (create)\n"
        assert (await sh(again, "qm", "unlock", "151")).code == 0
        assert (await sh(again, "qm", "destroy", "151")).code == 0


async def test_node_ssh_does_not_run_a_shell(sim: SimCluster, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    async with await node_conn(sim) as conn:
        r = await conn.run(f"qm status 120; touch {marker}")
        assert r.exit_status == 255 and str(r.stderr).startswith("400 too many arguments")
        r = await conn.run(f"qm list && touch {marker}")
        assert r.exit_status == 255
        r = await conn.run(f"$(touch {marker})")
        assert r.exit_status == 127
        r = await conn.run("qm migrate 120 ../../etc")
        assert r.exit_status == 255
        r = await conn.run("pvesh get /nodes/../status --output-format json")
        assert r.exit_status == 255
    assert not marker.exists()


async def test_guest_never_executes_scripts(sim: SimCluster, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key, vmid=160)
    await sh(sim, "qm", "start", "160")
    marker = tmp_path / "pwned"
    async with await guest_conn(sim, 160, "alice", key) as conn:
        assert (await conn.run("sudo bash -s", input=f"touch {marker}\n")).exit_status == 0
        assert (await conn.run(f"touch {marker}")).exit_status == 127
        assert (await conn.run(f"echo $(touch {marker})")).exit_status == 0
    assert not marker.exists()
    assert sim.guest_runs(160)[0].stdin == f"touch {marker}\n"


async def test_containers_storage_states_and_header_variant(
    sim: SimCluster, tmp_path: Path
) -> None:
    sim.add_container(105, "pve2", "dns")
    r = await sh(sim, "qm", "create", "105")
    assert (r.code, r.err) == (
        255,
        "unable to create VM 105 - CT 105 already exists on node 'pve2'\n",
    )
    r = await sh(
        sim, "pvesh", "get", "/cluster/resources", "--type", "vm", "--output-format", "json"
    )
    [ct] = json.loads(r.out)
    assert (ct["id"], ct["type"], ct["name"], ct["node"]) == ("lxc/105", "lxc", "dns", "pve2")

    sim.set_storage_state("local-lvm", "inactive")
    r = await sh(sim, "pvesm", "status")
    assert r.code == 0 and r.err == "storage 'local-lvm' is not online\n"
    assert r.out.splitlines()[2].split()[:5] == ["local-lvm", "lvmthin", "inactive", "0", "0"]
    await sh(sim, "qm", "create", "106")
    image = qcow2_image(tmp_path / "img.qcow2")
    r = await sh(sim, "qm", "importdisk", "106", str(image), "local-lvm")
    assert (r.code, r.err) == (255, "storage 'local-lvm' is not online\n")
    sim.set_storage_state("local-lvm", "disabled")
    assert (await sh(sim, "pvesm", "status")).out.splitlines()[2].endswith("N/A")
    r = await sh(sim, "qm", "importdisk", "106", str(image), "local-lvm")
    assert r.err == "storage 'local-lvm' is disabled\n"
    sim.set_storage_state("local-lvm", "active")
    assert (await sh(sim, "qm", "importdisk", "106", str(image), "local-lvm")).code == 0

    sim.set_pvesm_kib_header(False)
    header = (await sh(sim, "pvesm", "status")).out.splitlines()[0]
    assert header.split() == ["Name", "Type", "Status", "Total", "Used", "Available", "%"]


async def test_guest_files_are_kept_by_snapshots(sim: SimCluster, tmp_path: Path) -> None:
    """Scripts over SSH write a guest's few files; a snapshot keeps them, a rollback brings
    them back, as a disk snapshot would (docs/simulator.md, "Guests")."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    await install(sim, tmp_path, key)
    assert (await sh(sim, "qm", "start", "120")).code == 0
    async with await guest_conn(sim, 120, "alice", key) as conn:
        r = await conn.run("sudo -n bash -s", input="echo one > /root/a\necho two >> /root/a\n")
        assert r.exit_status == 0
        r = await conn.run("sudo -n bash -s", input="cat /root/a\ntest -f /root/b || exit 4\n")
        assert (r.exit_status, r.stdout) == (4, "one\ntwo\n")
        # Inside an `if` nothing is carried out; `set -e` stops at the first failure.
        r = await conn.run(
            "sudo bash -s", input="if true; then\n  exit 9\nfi\nset -e\nfalse\necho no > /root/c\n"
        )
        assert r.exit_status == 1
    assert sim.guest_files(120) == {"/root/a": "one\ntwo\n"}
    assert (await sh(sim, "qm", "snapshot", "120", "before")).code == 0
    async with await guest_conn(sim, 120, "alice", key) as conn:
        r = await conn.run("sudo bash -s", input="rm -f /root/a && echo new > /root/b\n")
        assert r.exit_status == 0
    assert sim.guest_files(120) == {"/root/b": "new\n"}
    assert (await sh(sim, "qm", "rollback", "120", "before")).code == 0
    assert sim.guest_files(120) == {"/root/a": "one\ntwo\n"}
    assert (await sh(sim, "qm", "delsnapshot", "120", "before")).code == 0
    with sim.store.locked() as txn:
        rec = txn.vm_on("pve1", 120)
    assert rec is not None and rec.get("snapshot_files") == {}
