"""The slow work a VM actor starts: the install pipeline and the lifecycle commands.

A job runs on the event loop, reports each SSE record through `report` (the actor stores and
publishes it), and returns a JobResult; it never touches actor state. A failed install removes
what it built before it reports the error, so the error is the stream's last record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh
import attrs

from actors.vm import qm
from actors.vm.guest import GuestError, ensure_key, run_init, wait_ready
from actors.vm.imagecache import ImageCache, ImageError
from actors.vm.lifecycle import State
from actors.vm.node import Cluster
from actors.vm.osimages import find_image, script_name
from actors.vm.pve_output import (
    CommandResult,
    OutputError,
    cpu_model_for_flags,
    lowest_cpu_model,
    parse_imported_volid,
    parse_node_cpu_flags,
    parse_pvesm_status,
    parse_status,
    resize_error,
)
from actors.vm.requests import InstallRequest, balloon_for, clamp_cpu, clamp_disk, clamp_ram
from actors.vm.settings import VmSettings
from actors.vm.shacrypt import sha512_crypt

Report = Callable[..., None]  # report(step, status, message, vm_id=None, ip=None)


@attrs.frozen
class Facts:
    """What cairn knows of an installed VM (the `Installed` event's fields but its task)."""

    node: str
    name: str
    os: str
    version: str
    user: str
    ip: str
    cpu: int
    ram: int
    disk_gb: int
    host_key: str = ""  # OpenSSH public key line; "" when not known (adopted, or older)

    def pinned_key(self) -> asyncssh.SSHKey | None:
        return asyncssh.import_public_key(self.host_key) if self.host_key else None


@attrs.frozen
class JobResult:
    ok: bool
    state: State
    error: str | None = None
    facts: Facts | None = None
    changes: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class Services:
    """What jobs need from the service, shared by every VM actor."""

    settings: VmSettings
    cluster: Cluster
    images: ImageCache
    key_path: Path
    scripts_dir: Path
    cpu_type: str | None = None

    async def detect_cpu_type(self) -> str:
        if self.cpu_type is None:
            models: list[str] = []
            for node in self.cluster.names:
                result = await self.cluster.main(qm.node_status(node))
                if not result.ok:
                    models = []
                    break
                try:
                    models.append(cpu_model_for_flags(parse_node_cpu_flags(result.stdout)))
                except OutputError:
                    models = []
                    break
            self.cpu_type = lowest_cpu_model(models)
        return self.cpu_type


class StageFailed(Exception):
    pass


def _secs(since: float) -> str:
    return f"({time.monotonic() - since:.2f}s)"


class _Stages:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.step = ""
        self.began = time.monotonic()

    def begin(self, step: str, message: str) -> None:
        self.step = step
        self.began = time.monotonic()
        self.report(step, "processing", f"[*] {message} {_secs(self.began)}")

    def note(self, message: str) -> None:
        self.report(self.step, "processing", f"[*] {message} {_secs(self.began)}")

    def done(self, message: str, **extra: Any) -> None:
        self.report(self.step, "success", f"[+] {message} {_secs(self.began)}", **extra)

    def fail(self, message: str) -> None:
        self.report(self.step, "error", f"[-] {message} {_secs(self.began)}")


def _check(result: CommandResult, what: str) -> CommandResult:
    if not result.ok:
        raise StageFailed(f"{what} failed: {result.error_text()}")
    return result


async def install(
    svc: Services, vmid: int, req: InstallRequest, report: Report, started: float
) -> JobResult:
    s = svc.settings
    st = _Stages(report)
    ip = s.ip_for(vmid)
    node = req.node or s.main_node
    created_on: str | None = None  # the node holding the half-built VM, once qm create ran
    # 5000 rounds of SHA-512 in Python take ~30 ms: hashed in a thread while the stages before
    # the `qm set` that needs it run.
    password_hash = asyncio.ensure_future(asyncio.to_thread(sha512_crypt, req.passwd))
    try:
        st.begin("preparation > assigning IP", f"deriving the IP of VM {vmid}")
        st.done(f"assigned IP: {ip}/24")

        st.begin("preparation > validating CPU and RAM", "checking CPU and RAM limits")
        cpu, ram = clamp_cpu(req.cpu, s), clamp_ram(req.ram, s)
        for note in (cpu.note, ram.note):
            if note:
                st.note(note)
        st.done(f"CPU {cpu.value} and RAM {ram.value} MB validated")

        st.begin("preparation > validating disk size", "checking the disk size")
        disk = clamp_disk(req.disk_gb, s)
        if disk.note:
            st.note(disk.note)
        st.done(f"disk size {disk.value}G validated")

        st.begin("preparation > setting default config values", "setting default config values")
        cpu_type = await svc.detect_cpu_type()
        st.done(f"defaults set: CPU type {cpu_type}, storage {s.storage}")

        st.begin("preparation > checking storage pool", f"checking storage pool {s.storage}")
        result = await svc.cluster.main(qm.storage_status(s.storage))
        rows = parse_pvesm_status(result.stdout) if result.ok else []
        row = next((r for r in rows if r.name == s.storage), None)
        if row is None or not row.usable:
            why = result.error_text() if not result.ok else "not active"
            raise StageFailed(f"storage pool {s.storage} does not exist or is inactive ({why})")
        st.done(f"storage pool {s.storage} ({row.type}) is available")

        image = find_image(req.os, req.version)
        assert image is not None  # the request was validated against the same matrix
        st.begin("OS preparation > getting OS image", f"resolving the {req.os} {req.version} image")
        url = image.image_url(svc.images.base_url)
        st.done(f"OS image URL: {url}")

        st.begin("OS preparation > validating OS image URL", f"checking {url}")
        try:
            await svc.images.head(image)
            st.done("OS image URL is valid")
        except ImageError as exc:
            if not svc.images.cached(image):
                raise StageFailed(f"OS image URL is not accessible: {exc}") from None
            st.done(f"OS image URL not reachable ({exc}); using the cached image")

        st.begin("OS preparation > downloading OS image", "getting the OS image")
        cached = svc.images.cached(image)
        try:
            path = await svc.images.fetch(image)
        except ImageError as exc:
            raise StageFailed(f"failed to download OS image: {exc}") from None
        st.done("using cached OS image" if cached else "completed OS image download")

        st.begin("SSH preparation > checking SSH key", "checking the service's SSH key")
        created, service_pub = ensure_key(svc.key_path)
        st.done("created SSH key pair" if created else "SSH key is ready")

        name = req.name or str(vmid)
        st.begin("VM creation > creating VM", f"creating VM {vmid}")
        argv = qm.create(
            vmid,
            name=name,
            cores=cpu.value,
            cpu_type=cpu_type,
            memory=ram.value,
            balloon=balloon_for(ram.value, s),
            os_tag=req.os,
        )
        created_on = s.main_node
        _check(await svc.cluster.main(argv), "qm create")
        st.done("VM created successfully")

        st.begin("VM creation > importing disk image", f"importing {path.name} into {s.storage}")
        result = _check(
            await svc.cluster.main(qm.import_disk(vmid, str(path), s.storage)), "qm disk import"
        )
        try:
            volid = parse_imported_volid(result.stdout)
        except OutputError as exc:
            raise StageFailed(str(exc)) from None
        st.done(f"disk image imported as {volid}")

        st.begin("VM initialization > initializing configuration", "attaching disk and cloud-init")
        ci = qm.CloudInit(
            user=req.user,
            password_hash=await password_hash,
            sshkeys_file="/dev/stdin",  # the keys go on stdin: no key file left on the node
            ip=ip,
            gateway=s.gateway,
        )
        keys = service_pub + "\n" + (req.pubkey + "\n" if req.pubkey else "")
        argv = qm.configure(vmid, volid, s.storage, ci)
        _check(await svc.cluster.main(argv, stdin=keys.encode()), "qm set")
        resized = await svc.cluster.main(qm.resize_disk(vmid, f"{disk.value}G"))
        problem = resize_error(resized)
        if problem:
            raise StageFailed(f"disk resize failed: {problem}")
        st.done("VM initialized successfully")

        if req.node and req.node != s.main_node:
            st.begin("VM initialization > migrating VM", f"migrating VM to node {node}")
            result = await svc.cluster.main(qm.migrate(vmid, node), on_line=st.note)
            _check(result, "qm migrate")
            created_on = node
            st.done(f"VM migrated to node {node}")

        st.begin("VM initialization > waiting for ready", f"starting VM {vmid}")
        _check(await svc.cluster.run(node, qm.start(vmid)), "qm start")
        st.note("VM started, waiting for SSH")
        host_key = await _wait(svc, ip, req.user)
        st.done(f"VM is reachable over SSH (host key {host_key.get_fingerprint()})")

        st.begin("VM initialization > SSH initialization", "running the init script")
        script = (svc.scripts_dir / script_name(req.os, req.version)).read_text()
        await run_init(
            ip,
            user=req.user,
            key=svc.key_path,
            port=s.vm_ssh_port,
            host_key=host_key,
            script=script,
            root_password=s.root_password,
        )
        st.done("SSH initialization completed")

        st.begin("VM initialization > rebooting VM", "rebooting to apply all settings")
        _check(await svc.cluster.run(node, qm.reboot(vmid)), "qm reboot")
        st.done("VM rebooting")

        st.begin("VM initialization > finalizing", "waiting for SSH after the reboot")
        await _wait(svc, ip, req.user, host_key)
        st.done("VM is ready")
        total = time.monotonic() - started
        report(st.step, "success", f"[+] VM installation completed in {total:.2f}s ({total:.2f}s)")
        report(st.step, "success", f"[*] VMID: {vmid} {_secs(started)}")
        report(st.step, "success", f"[*] IP: {ip} {_secs(started)}")
        report(st.step, "success", f"[*] User: {req.user} {_secs(started)}", vm_id=vmid, ip=ip)
        facts = Facts(
            node, name, req.os, req.version, req.user, ip, cpu.value, ram.value, disk.value,
            host_key.export_public_key().decode().strip(),
        )  # fmt: skip
        return JobResult(True, State.RUNNING, facts=facts)
    except (StageFailed, GuestError, OSError) as exc:
        message = str(exc)
        state = State.ABSENT
        if created_on is not None:
            st.note(f"{message}; removing VM {vmid}")
            leftover = await remove_vm(svc, vmid, created_on)
            if leftover:
                state = State.FAILED
                message += f"; cleanup failed: {leftover}"
        st.fail(message)
        return JobResult(False, state, error=message)


async def _wait(
    svc: Services, ip: str, user: str, host_key: asyncssh.SSHKey | None = None
) -> asyncssh.SSHKey:
    s = svc.settings
    return await wait_ready(
        ip,
        user=user,
        key=svc.key_path,
        port=s.vm_ssh_port,
        timeout=s.ssh_wait_timeout,
        interval=s.ssh_poll_interval,
        host_key=host_key,
    )


async def where_is(svc: Services, vmid: int, hint: str | None) -> str | None:
    """The node that holds VM `vmid`'s config: the hint first, then every node."""
    order = ([hint] if hint else []) + [n for n in svc.cluster.names if n != hint]
    for node in order:
        result = await svc.cluster.run(node, qm.status(vmid))
        if result.ok:
            return node
    return None


async def remove_vm(svc: Services, vmid: int, node_hint: str | None) -> str | None:
    """Stop and destroy VM `vmid` wherever it is; None if it is gone, else why not."""
    node = await where_is(svc, vmid, node_hint)
    if node is None:
        return None
    await svc.cluster.run(node, qm.cleanup_stop(vmid))
    result = await svc.cluster.run(node, qm.cleanup_destroy(vmid))
    if not result.ok and await where_is(svc, vmid, node) is not None:
        return result.error_text()
    return None


async def observe(svc: Services, vmid: int, node_hint: str | None) -> tuple[str | None, State]:
    """Where the VM is and its settled state, asked of the cluster (after a restart)."""
    node = await where_is(svc, vmid, node_hint)
    if node is None:
        return None, State.ABSENT
    result = await svc.cluster.run(node, qm.status(vmid))
    try:
        power = parse_status(result.stdout)
    except OutputError:
        power = "stopped"
    return node, State.RUNNING if power == "running" else State.STOPPED


async def power(
    svc: Services,
    command: str,
    vmid: int,
    node: str,
    facts: Facts | None,
    report: Report,
    args: dict[str, Any],
) -> JobResult:
    """Every lifecycle command but install. Streams report steps; plain ones report too
    (the records are stored either way, so a later reader sees what happened)."""
    st = _Stages(report)
    try:
        if command == "start":
            st.begin("start > starting VM", f"starting VM {vmid}")
            _check(await svc.cluster.run(node, qm.start(vmid)), "qm start")
            st.done("VM started")
            await _ready_step(svc, st, facts, "start > waiting for ready", vmid)
            return JobResult(True, State.RUNNING)
        if command == "reboot":
            st.begin("reboot > rebooting VM", f"rebooting VM {vmid}")
            _check(await svc.cluster.run(node, qm.reboot(vmid)), "qm reboot")
            st.done("VM rebooting")
            await _ready_step(svc, st, facts, "reboot > waiting for ready", vmid)
            return JobResult(True, State.RUNNING)
        if command in ("stop", "shutdown"):
            argv = qm.stop(vmid) if command == "stop" else qm.shutdown(vmid)
            st.begin(f"{command} > {command}", f"{command} VM {vmid}")
            _check(await svc.cluster.run(node, argv), f"qm {command}")
            st.done("VM stopped")
            return JobResult(True, State.STOPPED)
        if command == "destroy":
            st.begin("destroy > destroying VM", f"destroying VM {vmid}")
            _check(await svc.cluster.run(node, qm.destroy(vmid)), "qm destroy")
            st.done("VM destroyed")
            return JobResult(True, State.ABSENT)
        if command == "set/cpu":
            st.begin("set > cpu", f"setting {args['cpu']} vCPU")
            _check(await svc.cluster.run(node, qm.set_cores(vmid, args["cpu"])), "qm set")
            st.done("CPU changed")
            return JobResult(True, State.STOPPED, changes={"cpu": args["cpu"]})
        if command == "set/memory":
            ram = args["memory"]
            argv = qm.set_memory(vmid, ram, balloon_for(ram, svc.settings))
            st.begin("set > memory", f"setting {ram} MB RAM")
            _check(await svc.cluster.run(node, argv), "qm set")
            st.done("memory changed")
            return JobResult(True, State.STOPPED, changes={"ram": ram})
        if command == "set/disk":
            grow = args["grow_gb"]
            st.begin("set > disk", f"growing the disk by {grow}G")
            problem = resize_error(await svc.cluster.run(node, qm.resize_disk(vmid, f"+{grow}G")))
            if problem:
                raise StageFailed(f"disk resize failed: {problem}")
            st.done("disk grown")
            current = facts.disk_gb if facts else 0
            return JobResult(True, State.STOPPED, changes={"disk_gb": current + grow})
        if command == "set/node":
            target = args["node"]
            st.begin("migrate > migrating VM", f"migrating VM {vmid} to node {target}")
            _check(
                await svc.cluster.run(node, qm.migrate(vmid, target), on_line=st.note),
                "qm migrate",
            )
            extra = {"vm_id": vmid, "ip": facts.ip} if facts else {}
            st.done(f"VM migrated to node {target}", **extra)
            return JobResult(True, State.STOPPED, changes={"node": target})
        raise StageFailed(f"unknown command {command}")
    except (StageFailed, GuestError, OSError) as exc:
        st.fail(str(exc))
        # Where the VM really is now decides the state it is left in.
        _, state = await observe(svc, vmid, node)
        return JobResult(False, state, error=str(exc))


async def _ready_step(
    svc: Services, st: _Stages, facts: Facts | None, step: str, vmid: int
) -> None:
    st.begin(step, "waiting for SSH")
    if facts is None or not facts.user:
        st.done("VM running (no SSH access known for a VM cairn did not install)", vm_id=vmid)
        return
    await _wait(svc, facts.ip, facts.user, facts.pinned_key())
    st.done("SSH is ready", vm_id=vmid, ip=facts.ip)
