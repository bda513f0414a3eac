"""Templates: the cloud image imported once per (os, version, image checksum) and node, then
cloned for every install (VM_TEMPLATES=1, the default; docs/vm.md "Templates and linked
clones").

Proxmox is the record: a template is a VM in TEMPLATE_ID_START..TEMPLATE_ID_END named
`cairn-<os>-<version>`, marked `template: 1`, whose description carries cairn's ownership mark
and a `cairn template: <os> <version> <algorithm>:<digest>` line. Nothing is kept beside it, so
a restart, another cairn or an admin's `qm destroy` never leaves cairn believing in a template
that is gone.

One lock per (os, version, digest, node) in the service: concurrent first installs of an image
wait for one build instead of racing, and the second finds the first's template. A VM left half
built (cairn killed before `qm template`) carries the line but no `template: 1`: the next
install of that image removes it and builds again.

Which clone: linked where Proxmox can (the template's disk is a base volume on a storage with
the `clone` feature: lvmthin, zfspool, rbd, and dir/nfs/cifs files), full otherwise (thick
lvm makes no base volumes). A linked clone on local storage cannot be migrated, so the CLI
driver (whose templates live on the main node) full-clones for an install on another node.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import unquote

import attrs

from actors.vm.guest import ensure_key
from actors.vm.jobs import Services, StageFailed, Stages, failed
from actors.vm.ownership import mark_line
from actors.vm.pve import AlreadyExists, Clone, CloudInit, Hardware, PveError, VmConfig
from actors.vm.shacrypt import sha512_crypt

TEMPLATE_LINE = "cairn template: "
_LINE = re.compile(r"^cairn template: (\S+) (\S+) (\w+):([0-9a-f]+|unpublished)\s*$")
LINKABLE = frozenset({"lvmthin", "zfspool", "rbd", "dir", "nfs", "cifs"})
_SIZE = re.compile(r"(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)(?:,|$)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Placing(Protocol):
    """What templates need of the install's placement (install.Placement)."""

    def made_on(self, b: Any) -> str: ...
    async def fetch(self, b: Any, st: Stages) -> tuple[str, bool]: ...
    async def create(self, b: Any, source: str) -> None: ...
    async def import_disk(self, b: Any, source: str) -> str: ...
    async def configure(self, b: Any, volume: str) -> None: ...


@attrs.frozen
class Key:
    os: str
    version: str
    algorithm: str
    digest: str  # `unpublished` when the image's source publishes no sums
    node: str

    @property
    def name(self) -> str:
        return f"cairn-{self.os}-{self.version.replace('.', '-')}"

    def line(self) -> str:
        return f"{TEMPLATE_LINE}{self.os} {self.version} {self.algorithm}:{self.digest}"

    def short(self) -> str:
        return f"{self.os} {self.version}, {self.algorithm} {self.digest[:4]}…"


@attrs.frozen
class Template:
    vmid: int
    node: str
    os: str
    version: str
    algorithm: str
    digest: str
    ready: bool  # `template: 1` (else a build that did not finish)
    disk: str | None  # the boot disk's drive string


def described(config: VmConfig) -> tuple[str, str, str, str] | None:
    """(os, version, algorithm, digest) of a template's line, or None."""
    for line in unquote(config.get("description")).splitlines():
        if m := _LINE.match(line.strip()):
            return m[1], m[2], m[3], m[4]
    return None


async def listing(svc: Services) -> list[Template]:
    """cairn's templates (and half-built ones) in the template range, on every node."""
    try:
        resources = await svc.pve.cluster_vms()
    except PveError as exc:
        raise StageFailed(f"cannot list the cluster's VMs: {exc.text}") from None
    out = []
    for r in resources:
        if r.vmid not in svc.settings.template_range or not (r.name or "").startswith("cairn-"):
            continue
        try:
            config = await svc.pve.vm_config(r.node, r.vmid)
        except PveError:
            continue  # gone meanwhile
        found = described(config)
        if found is None:
            continue  # not cairn's: never touched
        ready = config.get("template") in ("1", "true")
        out.append(Template(r.vmid, r.node, *found, ready=ready, disk=config.get("scsi0") or None))
    return out


def disk_bytes(drive: str | None) -> int:
    m = _SIZE.search(drive or "")
    return int(float(m[1]) * _UNITS[m[2]]) if m else 0


def linkable(kind: str, drive: str | None) -> bool:
    """Whether Proxmox can make a linked clone of this template disk: a base volume on a
    storage whose plugin has the `clone` feature (pve-storage volume_has_feature)."""
    volname = (drive or "").split(",")[0].partition(":")[2]
    return kind in LINKABLE and volname.split("/")[-1].startswith("base-")


def gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


async def ensure(
    svc: Services,
    place: Placing,
    build: Callable[[int, Hardware, Callable[[], Awaitable[CloudInit]]], Any],
    b: Any,
    key: Key,
    task: str,
    st: Stages,
) -> Template:
    """The ready template for `key`, built first if there is none (one build at a time per
    key; a waiter finds the builder's)."""
    lock = svc.template_locks.setdefault(key, asyncio.Lock())
    async with lock:
        for t in await listing(svc):
            if (t.os, t.version, t.digest, t.node) != (key.os, key.version, key.digest, key.node):
                continue
            if t.ready:
                return t
            st.note(f"removing template {t.vmid}, left half built")
            await _destroy(svc, t.node, t.vmid)
        st.note(f"no template of {key.short()} on {key.node} yet: building it")
        source, _ = await place.fetch(b, st)
        hardware = Hardware(
            name=key.name,
            cores=1,
            cpu_type=b.hardware.cpu_type,
            memory=1024,
            balloon=None,
            os_tag="cairn-template",
            description=mark_line(task) + "\n" + key.line(),
            bridge=svc.settings.bridge,
        )

        async def cloud_init() -> CloudInit:
            # Nobody logs in to a template: every clone gets its own user, keys and address.
            unknown = await asyncio.to_thread(sha512_crypt, secrets.token_urlsafe(24))
            ci = await b.cloud_init()
            _, service_pub = ensure_key(svc.key_path)  # cairn's own key, never a user's
            return attrs.evolve(ci, user=b.image.user, password_hash=unknown, sshkeys=service_pub)

        for _ in range(5):
            vmid = await _free_id(svc)
            tb = build(vmid, hardware, cloud_init)
            try:
                await place.create(tb, source)
            except AlreadyExists:
                continue  # someone took the id meanwhile: the next one
            except PveError as exc:
                await _destroy(svc, place.made_on(tb), vmid)
                raise failed("qm create", exc) from None
            break
        else:
            raise StageFailed("no free template id: every id tried was taken meanwhile")
        node = place.made_on(tb)
        try:
            volume = await place.import_disk(tb, source)
            await place.configure(tb, volume)
            await svc.pve.template(node, vmid)
            config = await svc.pve.vm_config(node, vmid)
        except (PveError, StageFailed) as exc:
            await _destroy(svc, node, vmid)
            text = exc.text if isinstance(exc, PveError) else str(exc)
            raise StageFailed(f"building template {vmid} failed: {text}") from None
        st.note(f"template {vmid} ({key.short()}) built on {node}")
        return Template(
            vmid, node, key.os, key.version, key.algorithm, key.digest, True,
            config.get("scsi0") or None,
        )  # fmt: skip


async def _free_id(svc: Services) -> int:
    try:
        taken = {r.vmid for r in await svc.pve.cluster_vms()}
    except PveError as exc:
        raise StageFailed(f"cannot list the cluster's VMs: {exc.text}") from None
    for vmid in svc.settings.template_range:
        if vmid not in taken:
            return vmid
    s = svc.settings
    raise StageFailed(
        f"no free template id in TEMPLATE_ID_START..TEMPLATE_ID_END "
        f"({s.template_start}..{s.template_end}): widen the range or prune old templates"
    )


async def _destroy(svc: Services, node: str, vmid: int) -> None:
    """Remove a template cairn built (or half built); errors are left to the next look."""
    with contextlib.suppress(PveError):
        await svc.pve.destroy(node, vmid)


def full_reason(t: Template, kind: str, storage: str, made_on: str, node: str) -> str | None:
    """Why this install's clone must be a full one, or None for a linked clone."""
    if not linkable(kind, t.disk):
        return f"storage {storage} ({kind}) cannot make linked clones"
    if made_on != node:
        return f"a linked clone on local storage cannot be migrated to {node}"
    return None


async def clone(
    svc: Services, t: Template, vmid: int, name: str, description: str, *, full: bool
) -> None:
    spec = Clone(name=name, full=full, description=description)
    await svc.pve.clone(t.node, t.vmid, vmid, spec)


async def configure(svc: Services, node: str, vmid: int, hw: Hardware, ci: CloudInit) -> None:
    """The clone's own hardware and cloud-init, over what it inherited from the template."""
    options = {"cores": str(hw.cores), "cpu": hw.cpu_type, "memory": str(hw.memory)}
    options |= {"tags": hw.os_tag, "net0": hw.net0()}
    if hw.balloon is not None:
        options["balloon"] = str(hw.balloon)
    try:
        await svc.pve.set_config(node, vmid, options | ci.options(), sshkeys=ci.sshkeys)
    except PveError as exc:
        raise failed("qm set", exc) from None
