"""The install pipeline of the API driver (PVE_DRIVER=api): same stages and messages as the
CLI's (jobs.install), different work underneath (api.md §5).

- The node downloads the cloud image itself (`download-url` into its `import` storage, with the
  distribution's checksum), so nothing is copied from cairn's machine and no root is needed.
- One create on the target node imports the disk (`scsi0=<storage>:0,import-from=<import
  volume>`) and sets the cloud-init drive and settings; the VM is never created on the main node
  and migrated, so no disk crosses the network.
- The password goes as a SHA-512 crypt hash, stored as given (PVE keeps a hash as it is).

This needs PVE >= 8.4 (`import` content for qcow2 images and `import-from` of an import volume);
on older clusters the stage says so and points at PVE_DRIVER=cli.
"""

from __future__ import annotations

import json
import time

import aiohttp

from actors.vm import qm
from actors.vm.guest import GuestError, ensure_key, run_init
from actors.vm.imagecache import ImageError
from actors.vm.jobs import (
    Facts,
    JobResult,
    Report,
    Services,
    StageFailed,
    _check,
    _check_start,
    _powerdown_timed_out,
    _secs,
    _Stages,
    _storage_pool,
    _taken_by_another,
    _wait,
    _wait_verified,
    password_hash_for,
    prepare,
    reachable,
    remove_vm,
)
from actors.vm.lifecycle import State
from actors.vm.osimages import OsImage, checksum_for, find_image, script_name
from actors.vm.ownership import Claim, mark_line
from actors.vm.pve_output import CommandResult, parse_config, resize_error
from actors.vm.requests import InstallRequest, balloon_for

MIN_RELEASE = (8, 4)


def import_filename(image: OsImage) -> str:
    """The file name on the node's import storage. Its extension declares the format, and
    Ubuntu's `.img` images are qcow2 (api.md §5.5); a `.img` would be refused."""
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


async def _get(svc: Services, node: str, path: str, *options: str) -> object:
    argv = ["pvesh", "get", path, *options, "--output-format", "json"]
    result = await svc.cluster.run(node, argv)
    if not result.ok:
        raise StageFailed(f"GET {path} failed: {result.error_text()}")
    return json.loads(result.stdout or "null")


async def check_cluster(svc: Services, node: str) -> str:
    """The disk storage's type, once PVE's version, the disk storage and the image storage
    on `node` are fit for the API pipeline; else StageFailed saying what to change.
    (pvestatd may report a node-local storage differently per node; PVE's own create
    checks the target node's again.)"""
    s = svc.settings
    assert s.api is not None
    version = await _get(svc, node, "/version")
    release = str(version.get("release", "")) if isinstance(version, dict) else ""
    if _release(release) < MIN_RELEASE:
        raise StageFailed(
            f"the cluster runs Proxmox VE {release or 'of unknown version'}; installing from a "
            "cloud image through the API needs 8.4 or later (download-url into 'import' "
            "content, import-from at create). Use PVE_DRIVER=cli (qm over SSH) for this "
            "cluster, or upgrade it"
        )
    # The disk storage as the CLI driver checks it (same messages), then the image storage.
    kind = await _storage_pool(svc, s.storage)
    store = s.api.import_storage
    found = await svc.cluster.run(
        node, ["pvesh", "get", f"/nodes/{node}/storage/{store}/status", "--output-format", "json"]
    )
    if not found.ok:
        raise StageFailed(
            f"image storage {store} (PVE_IMPORT_STORAGE) cannot be used on node "
            f"{node}: {found.error_text()}"
        )
    if "import" not in str(json.loads(found.stdout).get("content", "")).split(","):
        raise StageFailed(
            f"storage {store} on node {node} does not take the 'import' content type that "
            f"cloud images are downloaded into: add it (`pvesm set {store} --content "
            "<its current types>,import`) or set PVE_IMPORT_STORAGE to a directory storage "
            "that has it"
        )
    return kind


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


async def download(svc: Services, node: str, image: OsImage) -> tuple[str, bool]:
    """The image as a volume of the node's import storage: (volid, whether it was there)."""
    s = svc.settings
    assert s.api is not None
    store, filename = s.api.import_storage, import_filename(image)
    volid = f"{store}:import/{filename}"
    digest = await published_digest(svc, image)
    if digest is None:
        listed = await _get(
            svc, node, f"/nodes/{node}/storage/{store}/content", "--content", "import"
        )
        if isinstance(listed, list) and any(v.get("volid") == volid for v in listed):
            return volid, True
    argv = [
        "pvesh",
        "create",
        f"/nodes/{node}/storage/{store}/download-url",
        "--content",
        "import",
        "--filename",
        filename,
        "--url",
        image.image_url(svc.images.base_url),
    ]
    if digest is not None:
        argv += ["--checksum", digest[1], "--checksum-algorithm", digest[0]]
    result = await svc.cluster.run(node, argv)
    if not result.ok:
        raise StageFailed(f"failed to download OS image: {result.error_text()}")
    return volid, "no need to download" in result.stdout


async def install(
    svc: Services, vmid: int, req: InstallRequest, report: Report, started: float, task: str
) -> JobResult:
    s = svc.settings
    assert s.api is not None
    st = _Stages(report)
    ip = s.ip_for(vmid)
    node = req.node or s.main_node
    claim = Claim(task)
    created_on: str | None = None
    create_unsure = False
    password_hash = password_hash_for(req)
    try:
        cpu, ram, disk, cpu_type = await prepare(st, svc, vmid, req)

        st.begin("preparation > checking storage pool", f"checking storage pool {s.storage}")
        kind = await check_cluster(svc, node)
        st.done(f"storage pool {s.storage} ({kind}) is available")

        image = find_image(req.os, req.version)
        assert image is not None  # the request was validated against the same matrix
        st.begin("OS preparation > getting OS image", f"resolving the {req.os} {req.version} image")
        url = image.image_url(svc.images.base_url)
        st.done(f"OS image URL: {url}")

        st.begin("OS preparation > validating OS image URL", f"checking {url}")
        try:
            await svc.images.head(image)
        except ImageError as exc:
            raise StageFailed(f"OS image URL is not accessible: {exc}") from None
        st.done("OS image URL is valid")

        st.begin("OS preparation > downloading OS image", "getting the OS image")
        source, cached = await download(svc, node, image)
        st.done("using cached OS image" if cached else "completed OS image download")

        st.begin("SSH preparation > checking SSH key", "checking the service's SSH key")
        created, service_pub = ensure_key(svc.key_path)
        st.done("created SSH key pair" if created else "SSH key is ready")

        name = req.name or str(vmid)
        st.begin("VM creation > creating VM", f"creating VM {vmid}")
        hardware = qm.create(
            vmid,
            name=name,
            cores=cpu.value,
            cpu_type=cpu_type,
            memory=ram.value,
            balloon=balloon_for(ram.value, s),
            os_tag=req.os,
            description=mark_line(task),
            bridge=s.bridge,
        )[3:]
        ci = qm.CloudInit(
            user=req.user,
            password_hash=await password_hash,
            sshkeys_file="/dev/stdin",
            ip=ip,
            gateway=s.gateway,
            prefix_len=s.prefix_len,
        )
        argv = qm.create_imported(node, vmid, hardware, s.storage, source, ci, s.api.pool)
        keys = service_pub + "\n" + (req.pubkey + "\n" if req.pubkey else "")
        made = await svc.cluster.run(node, argv, stdin=keys.encode())
        if not made.ok:
            taken = _taken_by_another(made, vmid)
            if taken:
                raise StageFailed(taken)
            create_unsure = not _refused_before_create(made)
            _check(made, "qm create")
        created_on = node
        st.done("VM created successfully")

        st.begin("VM creation > importing disk image", f"importing {source} into {s.storage}")
        shown = _check(await svc.cluster.run(node, qm.config(vmid)), "qm config")
        volid = parse_config(shown.stdout).get("scsi0", "?").split(",")[0]
        st.done(f"disk image imported as {volid}")

        st.begin("VM initialization > initializing configuration", "attaching disk and cloud-init")
        resized = await svc.cluster.run(node, qm.resize_disk(vmid, f"{disk.value}G"))
        problem = resize_error(resized)
        if problem:
            raise StageFailed(f"disk resize failed: {problem}")
        st.done("VM initialized successfully")

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
            st.note(
                f"the guest did not power off ({rebooted.error_text()}); stopping and "
                "starting it instead"
            )
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
            removal = await remove_vm(svc, vmid, created_on or node, claim)
            if removal.leftover:
                state = State.FAILED
                message += f"; cleanup failed: {removal.leftover}"
            if removal.foreign:
                message += f"; {removal.foreign}"
        st.fail(message)
        return JobResult(False, state, error=message)


def _refused_before_create(result: CommandResult) -> bool:
    """PVE refused the create request itself (a permission, a parameter): no VM was made.
    A task that failed removes its VM too, but a lost answer leaves the outcome open."""
    text = result.error_text()
    return text.startswith(("permission denied", "Parameter verification failed")) or (
        "pveproxy refused the API token" in text
    )
