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
lvm makes no base volumes). Always on the install's own node: the CLI driver's templates for
other nodes are made from the main node's (pernode.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import unquote

import attrs

from actors.vm.guest import ensure_key
from actors.vm.jobs import Services, StageFailed, Stages, failed
from actors.vm.osimages import OsImage
from actors.vm.ownership import CLONE_LINE, mark_line
from actors.vm.pve import AlreadyExists, Clone, CloudInit, Hardware, PveError, VmConfig
from actors.vm.shacrypt import sha512_crypt
from actors.vm.unfinished import building_note

TEMPLATE_LINE = "cairn template: "
_CLONE = re.compile(r"^cairn linked clone of template (\d+)\s*$")
_LINE = re.compile(r"^cairn template: (\S+) (\S+) (\w+):([0-9a-f]+|unpublished)\s*$")
LINKABLE = frozenset({"lvmthin", "zfspool", "rbd", "dir", "nfs", "cifs"})
_CTIME = re.compile(r"(?:^|,)ctime=(\d+)")
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


@attrs.define
class Slot:
    """One template key's lock (one build at a time) and the template last found for it,
    so later installs clone without asking Proxmox to list the cluster first."""

    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    found: Template | None = None


def slot(svc: Services, key: Key) -> Slot:
    got: Slot = svc.templates.setdefault(key, Slot())
    return got


def forget(svc: Services, vmid: int) -> None:
    """A template that is gone (pruned, or removed by an admin) is looked for again."""
    for s in svc.templates.values():
        if s.found is not None and s.found.vmid == vmid:
            s.found = None


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
    built: int = 0  # seconds since the epoch Proxmox made it (`meta: ...,ctime=`)

    @classmethod
    def made(cls, vmid: int, node: str, key: Key, config: VmConfig) -> Template:
        """The template of ``key`` that cairn has just made (built or copied) on ``node``."""
        disk = config.get("scsi0") or None
        return cls(vmid, node, key.os, key.version, key.algorithm, key.digest, True, disk)


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
        ctime = _CTIME.search(config.get("meta"))
        out.append(
            Template(
                r.vmid,
                r.node,
                *found,
                ready=ready,
                disk=config.get("scsi0") or None,
                built=int(ctime[1]) if ctime else 0,
            )
        )
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
    here = slot(svc, key)
    async with here.lock:
        if here.found is not None:
            return here.found
        for t in await listing(svc):
            if (t.os, t.version, t.digest, t.node) != (key.os, key.version, key.digest, key.node):
                continue
            if t.ready:
                here.found = t
                return t
            st.note(f"removing template {t.vmid}, left half built")
            await _destroy(svc, t.node, t.vmid)
        st.note(f"no template of {key.short()} on {key.node} yet: building it")
        await _drop_stale_cache(svc, b.image, key)
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
            vmid = await free_id(svc)
            tb = build(vmid, hardware, cloud_init)
            # Stored before the create: a restart in the middle knows which id to settle.
            await st.noted(building_note(vmid, place.made_on(tb)))
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
        here.found = Template.made(vmid, node, key, config)
        return here.found


async def _drop_stale_cache(svc: Services, image: OsImage, key: Key) -> None:
    """cairn's cached copy (the CLI driver's source) goes if the distribution has published
    another image since: the new template must hold the image its checksum names."""
    path = svc.images.path_for(image)
    if key.digest == "unpublished" or not path.is_file():
        return

    def digest() -> str:
        h = hashlib.new(key.algorithm)
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()

    if await asyncio.to_thread(digest) != key.digest:
        path.unlink(missing_ok=True)


async def free_id(svc: Services) -> int:
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


def full_reason(t: Template, kind: str, storage: str) -> str | None:
    """Why this install's clone must be a full one, or None for a linked clone (made on the
    install's node: nothing migrates it off its template's)."""
    if not linkable(kind, t.disk):
        return f"storage {storage} ({kind}) cannot make linked clones"
    return None


async def clone(
    svc: Services,
    t: Template,
    vmid: int,
    name: str,
    description: str,
    *,
    full: bool,
    target: str | None = None,
) -> None:
    if not full:  # the template must stay while this VM lives: say so where anyone sees it
        description += f"\n{CLONE_LINE}{t.vmid}"
    # A pool-scoped token may allocate ids in its pool only: the clone goes there, as a create.
    spec = Clone(
        name=name, full=full, description=description, target=target, pool=svc.settings.pool
    )
    try:
        await svc.pve.clone(t.node, t.vmid, vmid, spec)
    except PveError:
        forget(svc, t.vmid)  # perhaps gone: the next install looks again
        raise


def cloned_from(config: VmConfig) -> int | None:
    for line in unquote(config.get("description")).splitlines():
        if m := _CLONE.match(line.strip()):
            return int(m[1])
    return None


async def clones(svc: Services) -> dict[int, list[int]]:
    """template id -> the VMs (of cairn's range) that are linked clones of it."""
    try:
        resources = await svc.pve.cluster_vms()
    except PveError as exc:
        raise StageFailed(f"cannot list the cluster's VMs: {exc.text}") from None
    ours = [r for r in resources if r.vmid in svc.settings.id_range]

    async def parent(node: str, vmid: int) -> int | None:
        try:
            return cloned_from(await svc.pve.vm_config(node, vmid))
        except PveError:
            return None

    parents = await asyncio.gather(*(parent(r.node, r.vmid) for r in ours))
    out: dict[int, list[int]] = {}
    for r, tid in zip(ours, parents, strict=True):
        if tid is not None:
            out.setdefault(tid, []).append(r.vmid)
    return out


def row(t: Template, linked: list[int], current: bool) -> dict[str, Any]:
    """One template as `GET /api/vm/templates` shows it."""
    return {
        "vmid": t.vmid,
        "node": t.node,
        "os": t.os,
        "version": t.version,
        "checksum": f"{t.algorithm}:{t.digest}",
        "state": "ready" if t.ready else "half built",
        "current": current,
        "clones": sorted(linked),
    }


def newest(found: list[Template]) -> set[int]:
    """The template each (os, version, node) installs clone now: the newest, as a refresh
    builds its new template after the old one (made at the same second: the higher id)."""
    best: dict[tuple[str, str, str], Template] = {}
    for t in found:
        k = (t.os, t.version, t.node)
        if t.ready and (k not in best or (t.built, t.vmid) > (best[k].built, best[k].vmid)):
            best[k] = t
    return {t.vmid for t in best.values()}


async def rows(svc: Services) -> list[dict[str, Any]]:
    found = await listing(svc)
    linked = await clones(svc)
    current = newest(found)
    return [row(t, linked.get(t.vmid, []), t.vmid in current) for t in found]


async def prune(svc: Services) -> dict[str, Any]:
    """Remove the templates no install will clone again (superseded by a newer image, or
    left half built) and no linked clone depends on; keep the others, saying why."""
    found = await listing(svc)
    linked = await clones(svc)
    current = newest(found)
    removed: list[int] = []
    kept: list[dict[str, Any]] = []
    for t in found:
        lock = slot(svc, Key(t.os, t.version, t.algorithm, t.digest, t.node)).lock
        if t.vmid in current:
            kept.append({"vmid": t.vmid, "reason": "installs clone it"})
        elif linked.get(t.vmid):
            ids = ", ".join(str(v) for v in sorted(linked[t.vmid]))
            kept.append({"vmid": t.vmid, "reason": f"linked clones depend on it: {ids}"})
        elif lock.locked():
            kept.append({"vmid": t.vmid, "reason": "being built"})
        else:
            try:
                await svc.pve.destroy(t.node, t.vmid)
            except PveError as exc:  # Proxmox's own refusal (a clone cairn does not know)
                kept.append({"vmid": t.vmid, "reason": exc.text})
                continue
            forget(svc, t.vmid)
            removed.append(t.vmid)
    return {"removed": removed, "kept": kept}


async def configure(
    svc: Services, node: str, vmid: int, hw: Hardware, ci: CloudInit, *, linked_to: int | None
) -> None:
    """The clone's own hardware and cloud-init, over what it inherited from the template: the
    same options a create would be given (so what the caller shaped, its network, DNS, extra
    disks, tags and notes, reaches a clone too), but the name, which the clone already has."""
    options = {k: v for k, v in hw.options().items() if k != "name"}
    if linked_to is not None:  # the line clone() wrote, kept under the caller's notes
        options["description"] += f"\n{CLONE_LINE}{linked_to}"
    try:
        await svc.pve.set_config(node, vmid, options | ci.options(), sshkeys=ci.sshkeys)
    except PveError as exc:
        raise failed("qm set", exc) from None


async def parent_of(svc: Services, node: str, vmid: int) -> int | None:
    """The template VM `vmid` is a linked clone of (None: not one, or unreadable)."""
    try:
        return cloned_from(await svc.pve.vm_config(node, vmid))
    except PveError:
        return None


async def drop_if_unused(svc: Services, tid: int) -> str | None:
    """Once one of its linked clones is destroyed: template `tid` goes too if installs no
    longer clone it (a newer image's template replaced it) and no other linked clone needs
    it. What was done, as a sentence for the destroy's stream (None: it stays, as it should).
    """
    try:
        found = await listing(svc)
        t = next((t for t in found if t.vmid == tid), None)
        if t is None or not t.ready or t.vmid in newest(found):
            return None
        if (await clones(svc)).get(tid):
            return None
    except StageFailed:
        return None  # the cluster cannot be read now: `cairn vm templates --prune` later
    if slot(svc, Key(t.os, t.version, t.algorithm, t.digest, t.node)).lock.locked():
        return None
    try:
        await svc.pve.destroy(t.node, tid)
    except PveError as exc:  # Proxmox's own refusal (a linked clone cairn does not know)
        return f"template {tid} ({t.os} {t.version}) kept: {exc.text}"
    forget(svc, tid)
    return (
        f"template {tid} ({t.os} {t.version}) removed from {t.node}: its last linked clone "
        "is gone and installs clone a newer image's template"
    )
