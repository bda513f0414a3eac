"""The install pipeline: one sequence of the contract's stages, whichever driver runs it.

The drivers differ in two things only, and each is a `Placement` strategy point:
- how the cloud image reaches the node's storage: cairn downloads it into its own cache and
  `qm disk import` copies it from there (`FromCache`, the CLI driver), or the node downloads it
  itself into its `import` storage and the create imports it (`NodeDownload`, the API driver,
  which needs no root and no file of cairn's on the node; PVE >= 8.4);
- where the VM is made: on the main node and then migrated to the node asked for (`FromCache`:
  the imported file is on the main node), or on that node directly (`NodeDownload`).
The "migrating VM" stage is reported whenever the request named a node, also when there was
nothing to migrate. A failed install removes what it built before it reports the error, so the
error is the stream's last record.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp
import asyncssh
import attrs

from actors.vm import pernode, stages, template_access, templates
from actors.vm.firstboot import run_script, shaped, with_packages
from actors.vm.guest import GuestError, ensure_key, run_init
from actors.vm.imagecache import ImageError
from actors.vm.jobs import (
    Facts,
    JobResult,
    Report,
    Services,
    StageFailed,
    Stages,
    ensure_ours,
    failed,
    powerdown_timed_out,
    reachable,
    remove_vm,
    secs,
    start_failed,
    wait_guest,
    wait_verified,
)
from actors.vm.lifecycle import State
from actors.vm.osimages import OsImage, checksum_for, find_image, script_name
from actors.vm.ownership import Claim, mark_line
from actors.vm.pve import (
    AlreadyExists,
    CloudInit,
    Create,
    Download,
    Hardware,
    ImportFrom,
    PveError,
    Refused,
    StorageStatus,
    Unreadable,
)
from actors.vm.requests import (
    Clamped,
    InstallRequest,
    balloon_for,
    clamp_cpu,
    clamp_disk,
    clamp_ram,
)
from actors.vm.shacrypt import sha512_crypt

# The release the API's pipeline needs: `import` content for qcow2 images, import-from of it.
MIN_RELEASE = (8, 4)
_MIB_F = float(1 << 20)


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


@attrs.frozen
class Build:
    """What the placement steps need of one install."""

    svc: Services
    vmid: int
    node: str  # where the VM is to run
    image: OsImage
    hardware: Hardware
    cloud_init: Callable[[], Awaitable[CloudInit]]  # once the password hash is ready


class Placement(Protocol):
    """How the image reaches the node's storage, and where the VM is made."""

    # May a cached image stand in for an image URL that does not answer?
    cache_fallback: bool

    def made_on(self, b: Build) -> str:
        """The node the VM is created on."""
        ...

    async def check(self, b: Build) -> StorageStatus:
        """The disk storage's status once everything the placement needs is fit; else
        StageFailed saying what to change."""
        ...

    async def fetch(self, b: Build, st: Stages) -> tuple[str, bool]:
        """The image where the create or the import finds it: (its path or volume, whether
        it was there already)."""
        ...

    async def create(self, b: Build, source: str) -> None: ...

    def imports(self, b: Build, source: str) -> str:
        """What the import stage imports (its first line names it)."""
        ...

    async def import_disk(self, b: Build, source: str) -> str:
        """The boot disk's volume once imported."""
        ...

    async def configure(self, b: Build, volume: str) -> None:
        """Attach what the create did not (disk, cloud-init drive and settings)."""
        ...


class FromCache:
    """The CLI driver: cairn's own image cache, `qm disk import` on the main node, a migration
    to the node asked for."""

    cache_fallback = True

    def made_on(self, b: Build) -> str:
        return b.svc.settings.main_node

    async def check(self, b: Build) -> StorageStatus:
        return await storage_pool(b.svc)

    async def fetch(self, b: Build, st: Stages) -> tuple[str, bool]:
        images = b.svc.images
        cached = images.cached(b.image)
        progress = DownloadReport(st.note, b.svc.settings.progress_interval)
        try:
            path = await images.fetch(b.image, progress)
        except ImageError as exc:
            raise StageFailed(f"failed to download OS image: {exc}") from None
        return str(path), cached

    async def create(self, b: Build, source: str) -> None:
        await b.svc.pve.create(self.made_on(b), b.vmid, Create(b.hardware))

    def imports(self, b: Build, source: str) -> str:
        return source.rsplit("/", 1)[-1]  # the cached file's name

    async def import_disk(self, b: Build, source: str) -> str:
        s = b.svc.settings
        try:
            return await b.svc.pve.import_disk(s.main_node, b.vmid, source, s.storage)
        except PveError as exc:
            if isinstance(exc, Unreadable):
                raise StageFailed(exc.text) from None
            raise failed("qm disk import", exc) from None

    async def configure(self, b: Build, volume: str) -> None:
        s = b.svc.settings
        ci = await b.cloud_init()
        options = {"scsi0": volume, "ide2": f"{s.storage}:cloudinit", "boot": "order=scsi0"}
        try:
            await b.svc.pve.set_config(
                s.main_node, b.vmid, options | ci.options(), sshkeys=ci.sshkeys
            )
        except PveError as exc:
            raise failed("qm set", exc) from None


class NodeDownload:
    """The API driver: the node downloads the image into its `import` storage (with the
    distribution's checksum) and one create on the node asked for imports it, with the
    cloud-init drive and settings."""

    cache_fallback = False

    def made_on(self, b: Build) -> str:
        return b.node

    async def check(self, b: Build) -> StorageStatus:
        svc, node = b.svc, b.node
        api = svc.settings.api
        assert api is not None
        try:
            release = await svc.pve.version(node)
        except PveError as exc:
            raise StageFailed(f"GET /version failed: {exc.text}") from None
        if _release(release) < MIN_RELEASE:
            raise StageFailed(
                f"the cluster runs Proxmox VE {release or 'of unknown version'}; installing "
                "from a cloud image through the API needs 8.4 or later (download-url into "
                "'import' content, import-from at create). Use PVE_DRIVER=cli (qm over SSH) "
                "for this cluster, or upgrade it"
            )
        # The disk storage as the CLI driver checks it (same messages), then the image storage.
        pool = await storage_pool(svc)
        store = api.import_storage
        try:
            found = await svc.pve.storage_status(node, store)
        except PveError as exc:
            raise StageFailed(
                f"image storage {store} (PVE_IMPORT_STORAGE) cannot be used on node "
                f"{node}: {exc.text}"
            ) from None
        if "import" not in found.content:
            raise StageFailed(
                f"storage {store} on node {node} does not take the 'import' content type that "
                f"cloud images are downloaded into: add it (`pvesm set {store} --content "
                "<its current types>,import`) or set PVE_IMPORT_STORAGE to a directory storage "
                "that has it"
            )
        return pool

    async def fetch(self, b: Build, st: Stages) -> tuple[str, bool]:
        svc, node, image = b.svc, b.node, b.image
        assert svc.settings.api is not None
        store, filename = svc.settings.api.import_storage, import_filename(image)
        volid = f"{store}:import/{filename}"
        digest = await published_digest(svc, image)
        if digest is None:
            try:
                listed = await svc.pve.storage_content(node, store, "import")
            except PveError as exc:
                path = f"/nodes/{node}/storage/{store}/content"
                raise StageFailed(f"GET {path} failed: {exc.text}") from None
            if any(v.volid == volid for v in listed):
                return volid, True
        try:
            download = Download(filename, image.image_url(svc.images.base_url), digest)
            task = await svc.pve.download_url(node, store, download)
        except PveError as exc:
            raise StageFailed(f"failed to download OS image: {exc.text}") from None
        return volid, any("no need to download" in line for line in task.log)

    async def create(self, b: Build, source: str) -> None:
        s = b.svc.settings
        assert s.api is not None
        disk = ImportFrom(s.storage, source, await b.cloud_init())
        await b.svc.pve.create(b.node, b.vmid, Create(b.hardware, disk, s.api.pool))

    def imports(self, b: Build, source: str) -> str:
        return source  # the node's volume

    async def import_disk(self, b: Build, source: str) -> str:
        # The create imported it: its volume is the config's boot disk.
        try:
            config = await b.svc.pve.vm_config(b.node, b.vmid)
        except PveError as exc:
            raise failed("qm config", exc) from None
        return config.disk_volume or "?"

    async def configure(self, b: Build, volume: str) -> None:
        return None  # the create attached the disk and the cloud-init drive


def placement_for(driver: str) -> Placement:
    return NodeDownload() if driver == "api" else FromCache()


def import_filename(image: OsImage) -> str:
    """The file name on the node's import storage. Its extension declares the format, and
    Ubuntu's `.img` images are qcow2 (a `.img` would be refused)."""
    name = image.cache_name
    for suffix in (".img", ".qcow2"):
        if name.endswith(suffix):
            return name[: -len(suffix)] + ".qcow2"
    return name + ".qcow2"


def _release(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor.split("-")[0] or 0)
    except ValueError:
        return (0, 0)


async def published_digest(svc: Services, image: OsImage) -> tuple[str, str] | None:
    """(algorithm, hex digest) the distribution publishes for the image; None if its source
    publishes no sums file (a mirror without one)."""
    url = image.sums_url(svc.images.base_url)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session,
            session.get(url) as resp,
        ):
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise StageFailed(f"failed to download OS image: {url} answered HTTP {resp.status}")
            text = await resp.text(errors="replace")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise StageFailed(f"failed to download OS image: {url} is not reachable: {exc}") from None
    digest = checksum_for(text, image.filename)
    if digest is None:
        raise StageFailed(
            f"failed to download OS image: {url} lists no checksum for {image.filename}"
        )
    return image.algorithm, digest


async def storage_pool(svc: Services) -> StorageStatus:
    """ASSIGN_STORAGE's status (its type, its `shared` flag) if it may hold VM disks and is
    active; else StageFailed saying what to change. A stock node's `local` (iso, templates,
    backups) holds no disks."""
    s, pve = svc.settings, svc.pve
    storage = s.storage
    try:
        found = await pve.storage_status(s.main_node, storage)
    except PveError as exc:
        if "No such storage" not in exc.text:
            raise StageFailed(f"storage pool {storage} cannot be checked: {exc.text}") from None
        found = None
    if found is not None and "images" in found.content:
        if not found.usable:
            raise StageFailed(
                f"storage pool {storage} is {found.state}; ASSIGN_STORAGE needs an active one"
            )
        return found
    # Not fit: the storages that would do, for the message.
    try:
        rows = await pve.storages(s.main_node, "images")
    except PveError as exc:
        raise StageFailed(f"cannot list the storage pools: {exc.text}") from None
    usable = ", ".join(r.name for r in rows if r.usable) or "none"
    if found is None:
        raise StageFailed(f"storage pool {storage} does not exist; storages for VM disks: {usable}")
    raise StageFailed(
        f"storage pool {storage} does not hold VM disk images (its content types lack "
        f"'images'); set ASSIGN_STORAGE to one that does: {usable}"
    )


def password_hash_for(req: InstallRequest) -> asyncio.Future[str]:
    """The crypt hash an install gives Proxmox (`cipassword`). The gateway sends it (the
    password never crosses NATS: actors/vm/messages.py); a request without one gets the hash
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
    st: Stages, svc: Services, vmid: int, req: InstallRequest
) -> tuple[Clamped, Clamped, Clamped, str]:
    """An install's first stages: the VM's IP, its CPU, RAM and disk clamped to the settings
    (each adjustment said in the stream), and the CPU type. Returns (cpu, ram, disk, cpu_type)."""
    s = svc.settings
    ip = s.ip_for(vmid)
    st.begin(stages.ASSIGN_IP, f"deriving the IP of VM {vmid}")
    st.done(f"assigned IP: {ip}/{s.prefix_len}")

    st.begin(stages.CPU_RAM, "checking CPU and RAM limits")
    cpu, ram = clamp_cpu(req.cpu, s), clamp_ram(req.ram, s)
    for note in (cpu.note, ram.note):
        if note:
            st.note(note)
    st.done(f"CPU {cpu.value} and RAM {ram.value} MB validated")

    st.begin(stages.DISK_SIZE, "checking the disk size")
    disk = clamp_disk(req.disk_gb, s)
    if disk.note:
        st.note(disk.note)
    st.done(f"disk size {disk.value}G validated")

    st.begin(stages.DEFAULTS, "setting default config values")
    cpu_type = await svc.detect_cpu_type()
    st.done(f"defaults set: CPU type {cpu_type}, storage {s.storage}")
    return cpu, ram, disk, cpu_type


def _taken(exc: AlreadyExists, vmid: int, command: str) -> str:
    """A create or clone refused because the id is in use (a guest made after cairn reserved
    it)."""
    return (
        f"{command} failed: {exc.text}. Another client created {exc.kind} {vmid} on "
        f"node {exc.node} after cairn reserved the id; cairn left it untouched and "
        "released the id: install again to get another"
    )


async def install(
    svc: Services, vmid: int, req: InstallRequest, report: Report, started: float, task: str
) -> JobResult:
    s, pve = svc.settings, svc.pve
    place = placement_for(pve.driver)
    st = Stages(report)
    ip = s.ip_for(vmid)
    node = req.node or s.main_node
    claim = Claim(task)
    # The node holding the half-built VM; set only once cairn's own create succeeded: before
    # that, whatever holds the id is not cairn's.
    created_on: str | None = None
    create_unsure = False  # the create failed in a way that may have left cairn's VM behind
    made_on = s.main_node
    password_hash = password_hash_for(req)
    try:
        cpu, ram, disk, cpu_type = await prepare(st, svc, vmid, req)
        image = find_image(req.os, req.version)
        assert image is not None  # the request was validated against the same matrix
        created, service_pub = False, ""

        async def cloud_init() -> CloudInit:
            keys = service_pub + "\n" + (req.pubkey + "\n" if req.pubkey else "")
            return CloudInit(
                user=req.user,
                password_hash=await password_hash,
                sshkeys=keys,
                ip=ip,
                gateway=s.gateway,
                prefix_len=s.prefix_len,
            )

        name = req.name or str(vmid)
        hardware = Hardware(
            name=name,
            cores=cpu.value,
            cpu_type=cpu_type,
            memory=ram.value,
            balloon=balloon_for(ram.value, s),
            os_tag=req.os,
            description=mark_line(task),
            bridge=s.bridge,
        )
        hardware = shaped(hardware, req.shape)
        b = Build(svc, vmid, node, image, hardware, cloud_init)
        made_on = place.made_on(b)

        st.begin(stages.STORAGE, f"checking storage pool {s.storage}")
        pool = await place.check(b)
        kind = pool.type
        shared = ", shared" if pool.shared else ""
        st.done(f"storage pool {s.storage} ({kind}{shared}) is available")

        st.begin(stages.GET_IMAGE, f"resolving the {req.os} {req.version} image")
        url = image.image_url(svc.images.base_url)
        st.done(f"OS image URL: {url}")

        st.begin(stages.CHECK_URL, f"checking {url}")
        try:
            await svc.images.head(image)
            st.done("OS image URL is valid")
        except ImageError as exc:
            if not (place.cache_fallback and svc.images.cached(image)):
                raise StageFailed(f"OS image URL is not accessible: {exc}") from None
            st.done(f"OS image URL not reachable ({exc}); using the cached image")

        st.begin(stages.DOWNLOAD, "getting the OS image")
        template: templates.Template | None = None
        target: str | None = None  # the clone's node, when not the template's
        use_templates = s.templates
        if use_templates and (off := await template_access.refusal(pve, s, svc.template_access)):
            st.note(off)  # an older token: the import path, never a permission error
            use_templates = False
        if use_templates:
            published = await published_digest(svc, image)
            algorithm, digest = published or (image.algorithm, "unpublished")
            key = templates.Key(image.os, image.version, algorithm, digest, made_on)

            def build(tid: int, hw: Hardware, ci: Callable[[], Awaitable[CloudInit]]) -> Build:
                return attrs.evolve(b, vmid=tid, hardware=hw, cloud_init=ci)

            template = await templates.ensure(svc, place, build, b, key, task, st)
            if made_on != node:  # the CLI driver, another node: no clone migrates
                template, target = await pernode.on_node(
                    svc, template, key, node, pool.shared, task, st
                )
                made_on = node
            st.done(f"template {template.vmid} ({key.short()}) ready on {template.node}")
            source = ""
        else:
            source, cached = await place.fetch(b, st)
            st.done("using cached OS image" if cached else "completed OS image download")

        st.begin(stages.SSH_KEY, "checking the service's SSH key")
        created, service_pub = ensure_key(svc.key_path)
        st.done("created SSH key pair" if created else "SSH key is ready")

        st.begin(stages.CREATE, f"creating VM {vmid}")
        # Stored before Proxmox is asked: a restart during a clone finds it begun after the
        # template was ready, and settles the clone (unfinished.py); the task's own start,
        # which makes the restart settle anything, is stored with it.
        await st.stored()
        full_why = None
        try:
            if template is not None:
                full_why = templates.full_reason(template, kind, s.storage)
                await templates.clone(
                    svc,
                    template,
                    vmid,
                    name,
                    mark_line(task),
                    full=full_why is not None,
                    target=target,
                )
            else:
                await place.create(b, source)
        except AlreadyExists as exc:
            raise StageFailed(_taken(exc, vmid, "qm clone" if template else "qm create")) from None
        except PveError as exc:
            # Refused before anything was made: no VM; any other failure (a task's, a lost
            # answer) may have left one.
            create_unsure = not isinstance(exc, Refused)
            if template is not None:
                template_access.refused(svc.template_access, exc)
            raise failed("qm clone" if template else "qm create", exc) from None
        created_on = made_on
        st.done("VM created successfully")

        if template is not None:
            tid = template.vmid
            st.begin(stages.IMPORT, f"cloning the disk of template {tid} into {s.storage}")
            if full_why is None:
                st.done(f"linked clone of template {tid}, 0 bytes copied")
            else:
                copied = templates.gib(templates.disk_bytes(template.disk))
                st.done(f"full clone of template {tid}, {copied} copied: {full_why}")
            st.begin(stages.CONFIGURE, "configuring the clone and cloud-init")
            linked_to = tid if full_why is None else None
            ci = await cloud_init()
            await templates.configure(svc, made_on, vmid, hardware, ci, linked_to=linked_to)
        else:
            st.begin(stages.IMPORT, f"importing {place.imports(b, source)} into {s.storage}")
            volume = await place.import_disk(b, source)
            st.done(f"disk image imported as {volume}")

            st.begin(stages.CONFIGURE, "attaching disk and cloud-init")
            await place.configure(b, volume)
        try:
            await pve.resize(made_on, vmid, "scsi0", f"{disk.value}G")
        except PveError as exc:
            raise StageFailed(f"disk resize failed: {exc.text}") from None
        st.done("VM initialized successfully")

        if req.node:
            st.begin(stages.MIGRATE, f"migrating VM to node {node}")
            if made_on == node:
                st.done(f"created on {node} directly: nothing to migrate")
            else:
                await ensure_ours(svc, vmid, made_on, claim)
                try:
                    await pve.migrate(made_on, vmid, node, on_line=st.note)
                except PveError as exc:
                    raise failed("qm migrate", exc) from None
                created_on = node
                st.done(f"VM migrated to node {node}")

        st.begin(stages.READY, f"starting VM {vmid}")
        try:
            await pve.start(node, vmid)
        except PveError as exc:
            raise start_failed(exc, node) from None
        st.note("VM started, waiting for SSH")
        host_key = await wait_verified(svc, vmid, ip, req.user, await password_hash)
        st.done(reachable(host_key, vmid))

        st.begin(stages.INIT_SCRIPT, "running the init script")
        script = (svc.scripts_dir / script_name(req.os, req.version)).read_text()
        await run_init(
            ip,
            user=req.user,
            key=svc.key_path,
            port=s.vm_ssh_port,
            host_key=host_key,
            script=with_packages(script, req.shape.packages),
            root_password=s.root_password,
        )
        if req.shape.script is not None:
            await _callers_script(svc, st, req, ip, host_key)
        st.done("SSH initialization completed")

        st.begin(stages.REBOOT, "rebooting to apply all settings")
        try:
            await pve.reboot(node, vmid)
        except PveError as exc:
            if not powerdown_timed_out(exc):
                raise failed("qm reboot", exc) from None
            # A fresh guest that ignores ACPI (or its agent): it is cairn's own new VM, so a
            # hard stop and a start apply the settings just as well.
            st.note(f"the guest did not power off ({exc.text}); stopping and starting it instead")
            await _restart(svc, node, vmid)
        st.done("VM rebooting")

        st.begin(stages.FINALIZE, "waiting for SSH after the reboot")
        await wait_guest(svc, ip, req.user, host_key)
        st.done("VM is ready")
        total = time.monotonic() - started
        report(st.step, "success", f"[+] VM installation completed in {total:.2f}s ({total:.2f}s)")
        report(st.step, "success", f"[*] VMID: {vmid} {secs(started)}")
        report(st.step, "success", f"[*] IP: {ip} {secs(started)}")
        report(st.step, "success", f"[*] User: {req.user} {secs(started)}", vm_id=vmid, ip=ip)
        facts = Facts(
            node,
            name,
            req.os,
            req.version,
            req.user,
            ip,
            cpu.value,
            ram.value,
            disk.value,
            host_key.export_public_key().decode().strip(),
        )
        return JobResult(True, State.RUNNING, facts=facts)
    except (StageFailed, GuestError, OSError) as exc:
        message = str(exc)
        state = State.ABSENT
        if created_on is not None or create_unsure:
            st.note(f"{message}; removing VM {vmid}")
            removal = await remove_vm(svc, vmid, created_on or made_on, claim)
            if removal.leftover:
                state = State.FAILED
                message += f"; cleanup failed: {removal.leftover}"
            if removal.foreign:
                message += f"; {removal.foreign}"
        st.fail(message)
        return JobResult(False, state, error=message)


async def _callers_script(
    svc: Services, st: Stages, req: InstallRequest, ip: str, host_key: asyncssh.SSHKey
) -> None:
    """The caller's script, after cairn's init script; a failure fails the stage unless the
    caller asked to keep the VM (`script_failure: keep`)."""
    assert req.shape.script is not None
    st.note("running the script")
    status = await run_script(
        ip,
        user=req.user,
        key=svc.key_path,
        port=svc.settings.vm_ssh_port,
        host_key=host_key,
        script=req.shape.script,
        note=st.note,
    )
    if status == 0:
        st.note("the script ended with status 0")
    elif req.shape.keep_on_script_failure:
        st.note(f"the script exited with status {status}; the VM is kept (script_failure: keep)")
    else:
        raise StageFailed(f"the script exited with status {status}")


async def _restart(svc: Services, node: str, vmid: int) -> None:
    try:
        await svc.pve.stop(node, vmid)
    except PveError as exc:
        raise failed("qm stop", exc) from None
    try:
        await svc.pve.start(node, vmid)
    except PveError as exc:
        raise failed("qm start", exc) from None
