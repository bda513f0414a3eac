"""The slow work a VM actor starts: the install pipeline and the lifecycle commands.

A job runs on the event loop, reports each SSE record through `report` (the actor stores and
publishes it), and returns a JobResult; it never touches actor state. A failed install removes
what it built before it reports the error, so the error is the stream's last record.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh
import attrs

from actors.vm import qm
from actors.vm.guest import GuestError, ensure_key, run_init, verify, wait_ready
from actors.vm.imagecache import ImageCache, ImageError
from actors.vm.lifecycle import State
from actors.vm.node import Cluster
from actors.vm.osimages import find_image, script_name
from actors.vm.ownership import Claim, being_created, mark_line, not_ours, unfinished_create
from actors.vm.pve_output import (
    CommandResult,
    OutputError,
    cpu_model_for_flags,
    lowest_cpu_model,
    parse_config,
    parse_imported_volid,
    parse_node_cpu_flags,
    parse_pvesm_status,
    parse_status,
    resize_error,
)
from actors.vm.requests import (
    Clamped,
    InstallRequest,
    balloon_for,
    clamp_cpu,
    clamp_disk,
    clamp_ram,
    memory_balloon,
)
from actors.vm.settings import VmSettings
from actors.vm.shacrypt import sha512_crypt

Report = Callable[..., None]  # report(step, status, message, vm_id=None, ip=None)
# How often a clean-up looks again at a VM whose create is still at work (`lock: create`).
CREATE_POLL = 0.5


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
    # The VM at this id turned out not to be the one cairn created: cairn drops its claim.
    disowned: str | None = None


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


class NotOurs(StageFailed):
    """The VM at this id does not carry cairn's mark: nothing was done to it."""


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


class DownloadReport:
    """A download's progress as stage notes, at most one per ``interval`` seconds (and the
    last piece always): ``downloaded 45% (120.0 MiB of 267.0 MiB)``."""

    def __init__(
        self,
        note: Callable[[str], None],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._note = note
        self._interval = interval
        self._clock = clock
        self._last: float | None = None

    def __call__(self, done: int, total: int | None) -> None:
        now = self._clock()
        finished = total is not None and done >= total
        if not finished and self._last is not None and now - self._last < self._interval:
            return
        self._last = now
        size = f"{done / _MIB_F:.1f} MiB"
        if total:
            self._note(f"downloaded {done * 100 // total}% ({size} of {total / _MIB_F:.1f} MiB)")
        else:
            self._note(f"downloaded {size}")


_MIB_F = float(1 << 20)


def _check(result: CommandResult, what: str) -> CommandResult:
    if not result.ok:
        raise StageFailed(f"{what} failed: {result.error_text()}")
    return result


_NO_BRIDGE = re.compile(r"bridge '([^']+)' does not exist")


def _check_start(result: CommandResult, node: str) -> CommandResult:
    """`qm start`'s failure, naming the bridge when the node lacks the one VM_BRIDGE names
    (Proxmox says so in the task log, and ends with only "QEMU exited with code 1")."""
    missing = _NO_BRIDGE.search(result.stdout) if not result.ok else None
    if missing:
        raise StageFailed(
            f"qm start failed: {result.error_text()}: bridge '{missing.group(1)}' does not "
            f"exist on node {node}; set VM_BRIDGE to a bridge every node has"
        )
    return _check(result, "qm start")


_TAKEN = re.compile(r"(VM|CT) (\d+) already exists on node '([^']+)'")


def _taken_by_another(result: CommandResult, vmid: int) -> str | None:
    """If `qm create` failed because the id is in use (a guest made after cairn reserved it),
    the sentence that says so; None for any other failure."""
    match = _TAKEN.search(result.error_text())
    if match is None:
        return None
    kind = "container" if match.group(1) == "CT" else "VM"
    return (
        f"qm create failed: {result.error_text()}. Another client created {kind} {vmid} on "
        f"node {match.group(3)} after cairn reserved the id; cairn left it untouched and "
        "released the id: install again to get another"
    )


def _powerdown_timed_out(result: CommandResult) -> bool:
    """`qm shutdown`/`qm reboot` gave up waiting for the guest (QS _do_vm_stop)."""
    return (
        not result.ok
        and "got timeout" in result.error_text()
        and "powerdown" in (result.error_text())
    )


async def _storage_pool(svc: Services, storage: str) -> str:
    """The type of `storage` if it may hold VM disks and is active; else StageFailed saying
    what to change. A stock node's `local` (iso, templates, backups) holds no disks."""
    result = await svc.cluster.main(qm.image_storages())
    if not result.ok:
        raise StageFailed(f"cannot list the storage pools: {result.error_text()}")
    rows = parse_pvesm_status(result.stdout)
    row = next((r for r in rows if r.name == storage), None)
    if row is not None:
        if not row.usable:
            raise StageFailed(f"storage pool {storage} is {row.status}; ASSIGN_STORAGE needs an "
                              "active one")  # fmt: skip
        return row.type
    usable = ", ".join(r.name for r in rows if r.usable) or "none"
    exists = await svc.cluster.main(qm.storage_status(storage))
    if exists.ok and any(r.name == storage for r in parse_pvesm_status(exists.stdout)):
        raise StageFailed(
            f"storage pool {storage} does not hold VM disk images (its content types lack "
            f"'images'); set ASSIGN_STORAGE to one that does: {usable}"
        )
    if "No such storage" in exists.stderr:
        raise StageFailed(f"storage pool {storage} does not exist; storages for VM disks: {usable}")
    raise StageFailed(f"storage pool {storage} cannot be checked: {exists.error_text()}")


def password_hash_for(req: InstallRequest) -> asyncio.Future[str]:
    """The crypt hash an install gives Proxmox (`cipassword`). The gateway sends it (the
    password never crosses NATS: actors/vm/commands.py); a request without one gets the hash
    of its clear password or of a random one nobody knows (never a default anyone could
    guess), made in a thread (5000 rounds of SHA-512 in Python take ~30 ms) while the stages
    before the step that needs it run."""
    if req.password_hash is not None:
        given: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        given.set_result(req.password_hash)
        return given
    passwd = req.passwd or secrets.token_urlsafe(24)
    return asyncio.ensure_future(asyncio.to_thread(sha512_crypt, passwd))


async def prepare(
    st: _Stages, svc: Services, vmid: int, req: InstallRequest
) -> tuple[Clamped, Clamped, Clamped, str]:
    """An install's first stages, the same for either driver: the VM's IP, its CPU, RAM and
    disk clamped to the settings (each adjustment said in the stream), and the CPU type.
    Returns (cpu, ram, disk, cpu_type)."""
    s = svc.settings
    ip = s.ip_for(vmid)
    st.begin("preparation > assigning IP", f"deriving the IP of VM {vmid}")
    st.done(f"assigned IP: {ip}/{s.prefix_len}")

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
    return cpu, ram, disk, cpu_type


async def install(
    svc: Services, vmid: int, req: InstallRequest, report: Report, started: float, task: str
) -> JobResult:
    s = svc.settings
    st = _Stages(report)
    ip = s.ip_for(vmid)
    node = req.node or s.main_node
    claim = Claim(task)
    # The node holding the half-built VM; set only once cairn's own `qm create` succeeded:
    # before that, whatever holds the id is not cairn's.
    created_on: str | None = None
    create_unsure = False  # qm create failed in a way that may have left cairn's VM behind
    password_hash = password_hash_for(req)
    try:
        cpu, ram, disk, cpu_type = await prepare(st, svc, vmid, req)

        st.begin("preparation > checking storage pool", f"checking storage pool {s.storage}")
        kind = await _storage_pool(svc, s.storage)
        st.done(f"storage pool {s.storage} ({kind}) is available")

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
        progress = DownloadReport(st.note, svc.settings.progress_interval)
        try:
            path = await svc.images.fetch(image, progress)
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
            description=mark_line(task),
            bridge=s.bridge,
        )
        made = await svc.cluster.main(argv)
        if not made.ok:
            taken = _taken_by_another(made, vmid)
            if taken:
                raise StageFailed(taken)
            create_unsure = True
            _check(made, "qm create")
        created_on = s.main_node
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
            prefix_len=s.prefix_len,
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
            await _ensure_ours(svc, vmid, s.main_node, claim)
            result = await svc.cluster.main(qm.migrate(vmid, node), on_line=st.note)
            _check(result, "qm migrate")
            created_on = node
            st.done(f"VM migrated to node {node}")

        st.begin("VM initialization > waiting for ready", f"starting VM {vmid}")
        _check_start(await svc.cluster.run(node, qm.start(vmid)), node)
        st.note("VM started, waiting for SSH")
        host_key = await _wait_verified(svc, vmid, ip, req.user, await password_hash)
        st.done(reachable(host_key, vmid))

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
        rebooted = await svc.cluster.run(node, qm.reboot(vmid))
        if _powerdown_timed_out(rebooted):
            # A fresh guest that ignores ACPI (or its agent): it is cairn's own new VM, so a
            # hard stop and a start apply the settings just as well.
            st.note(f"the guest did not power off ({rebooted.error_text()}); stopping and "
                    "starting it instead")  # fmt: skip
            _check(await svc.cluster.run(node, qm.stop(vmid)), "qm stop")
            _check(await svc.cluster.run(node, qm.start(vmid)), "qm start")
        else:
            _check(rebooted, "qm reboot")
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
        if created_on is not None or create_unsure:
            st.note(f"{message}; removing VM {vmid}")
            removal = await remove_vm(svc, vmid, created_on, claim)
            if removal.leftover:
                state = State.FAILED
                message += f"; cleanup failed: {removal.leftover}"
            if removal.foreign:
                message += f"; {removal.foreign}"
        st.fail(message)
        return JobResult(False, state, error=message)


async def _wait_verified(
    svc: Services, vmid: int, ip: str, user: str, password_hash: str
) -> asyncssh.SSHKey:
    """The new guest's host key, once it answers at `ip` and proves it is VM `vmid` by the
    password hash Proxmox gave it through cloud-init (guest.verify); GuestError otherwise.
    Nothing secret goes to the guest before this returns."""
    host_key = await _wait(svc, ip, user)
    s = svc.settings
    await verify(
        ip, vmid=vmid, user=user, key=svc.key_path, port=s.vm_ssh_port, host_key=host_key,
        password_hash=password_hash, timeout=s.ssh_wait_timeout,
    )  # fmt: skip
    return host_key


def reachable(host_key: asyncssh.SSHKey, vmid: int) -> str:
    fingerprint = host_key.get_fingerprint()
    return f"VM is reachable over SSH (host key {fingerprint}) and proved it is VM {vmid}"


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
    found = await find_config(svc, vmid, hint)
    return found[0] if found else None


async def find_config(
    svc: Services, vmid: int, hint: str | None
) -> tuple[str, dict[str, str]] | None:
    """The node that holds VM `vmid` and its config (`qm config`), asked of the hint first."""
    order = ([hint] if hint else []) + [n for n in svc.cluster.names if n != hint]
    for node in order:
        result = await svc.cluster.run(node, qm.config(vmid))
        if result.ok:
            return node, parse_config(result.stdout)
    return None


async def _ensure_ours(svc: Services, vmid: int, node: str, claim: Claim | None) -> None:
    """NotOurs unless the VM on `node` carries the mark `claim` expects (ownership.py)."""
    result = await svc.cluster.run(node, qm.config(vmid))
    if not result.ok:
        raise StageFailed(f"cannot read VM {vmid}'s config on node {node}: {result.error_text()}")
    why = not_ours(claim, vmid, node, parse_config(result.stdout))
    if why:
        raise NotOurs(why)


@attrs.frozen
class Removal:
    leftover: str | None = None  # cairn's VM is still there: why it could not be removed
    foreign: str | None = None  # another VM holds the id: left untouched, and why
    removed: str | None = None  # the node cairn's VM was removed from (None: none was there)


async def remove_vm(
    svc: Services, vmid: int, node_hint: str | None, claim: Claim | None
) -> Removal:
    """Stop and destroy VM `vmid` wherever it is, if it carries the mark `claim` expects.
    A create still at work is waited for (up to VM_COMMAND_TIMEOUT): its mark comes at its
    end (ownership.being_created)."""
    found = await find_config(svc, vmid, node_hint)
    began = time.monotonic()
    while found is not None and being_created(found[1]):
        waited = time.monotonic() - began
        if waited >= svc.settings.command_timeout:
            return Removal(foreign=unfinished_create(vmid, found[0], waited))
        await asyncio.sleep(CREATE_POLL)
        found = await find_config(svc, vmid, found[0])
    if found is None:
        return Removal()
    node, config = found
    why = not_ours(claim, vmid, node, config)
    if why:
        return Removal(foreign=why)
    await svc.cluster.run(node, qm.cleanup_stop(vmid))
    result = await svc.cluster.run(node, qm.cleanup_destroy(vmid))
    if not result.ok and await where_is(svc, vmid, node) is not None:
        return Removal(leftover=result.error_text())
    return Removal(removed=node)


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
    claim: Claim | None = None,
) -> JobResult:
    """Every lifecycle command but install. Streams report steps; plain ones report too
    (the records are stored either way, so a later reader sees what happened). Destroy and
    migrate first check that the VM carries cairn's mark (`claim`)."""
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
            rebooted = await svc.cluster.run(node, qm.reboot(vmid))
            if _powerdown_timed_out(rebooted):
                raise StageFailed(
                    f"qm reboot failed: {rebooted.error_text()}: the guest did not react to "
                    "the reboot request and is still running; stop and start it to force one"
                )
            _check(rebooted, "qm reboot")
            st.done("VM rebooting")
            await _ready_step(svc, st, facts, "reboot > waiting for ready", vmid)
            return JobResult(True, State.RUNNING)
        if command in ("stop", "shutdown"):
            argv = qm.stop(vmid) if command == "stop" else qm.shutdown(vmid)
            st.begin(f"{command} > {command}", f"{command} VM {vmid}")
            result = await svc.cluster.run(node, argv)
            if _powerdown_timed_out(result):
                raise StageFailed(
                    f"qm {command} failed: {result.error_text()}: the guest did not power off "
                    "and is still running; use stop to force it off"
                )
            _check(result, f"qm {command}")
            st.done("VM stopped")
            return JobResult(True, State.STOPPED)
        if command == "destroy":
            st.begin("destroy > destroying VM", f"destroying VM {vmid}")
            await _ensure_ours(svc, vmid, node, claim)
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
            st.begin("set > memory", f"setting {ram} MB RAM")
            shown = _check(await svc.cluster.run(node, qm.config(vmid)), "qm config")
            balloon = memory_balloon(ram, svc.settings, parse_config(shown.stdout))
            if balloon is not None and balloon == ram:
                st.note(f"the balloon minimum comes down to {ram} MB with the memory")
            _check(await svc.cluster.run(node, qm.set_memory(vmid, ram, balloon)), "qm set")
            st.done("memory changed")
            return JobResult(True, State.STOPPED, changes={"ram": ram})
        if command == "set/disk":
            grow = args["grow_gb"]
            st.begin("set > disk", f"growing the disk by {grow}G")
            # qm's own lines (lvextend's, qemu-img's ...) go into the task's records as they come.
            resized = await svc.cluster.run(
                node, qm.resize_disk(vmid, f"+{grow}G"), on_line=st.note
            )
            problem = resize_error(resized)
            if problem:
                raise StageFailed(f"disk resize failed: {problem}")
            st.done("disk grown")
            current = facts.disk_gb if facts else 0
            return JobResult(True, State.STOPPED, changes={"disk_gb": current + grow})
        if command == "set/node":
            target = args["node"]
            st.begin("migrate > migrating VM", f"migrating VM {vmid} to node {target}")
            await _ensure_ours(svc, vmid, node, claim)
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
        disowned = str(exc) if isinstance(exc, NotOurs) and claim is not None else None
        return JobResult(False, state, error=str(exc), disowned=disowned)


async def _ready_step(
    svc: Services, st: _Stages, facts: Facts | None, step: str, vmid: int
) -> None:
    st.begin(step, "waiting for SSH")
    if facts is None or not facts.user:
        st.done("VM running (no SSH access known for a VM cairn did not install)", vm_id=vmid)
        return
    await _wait(svc, facts.ip, facts.user, facts.pinned_key())
    st.done("SSH is ready", vm_id=vmid, ip=facts.ip)
