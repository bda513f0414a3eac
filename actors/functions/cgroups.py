"""cgroup detection (v1, v2 or none) and fresh groups for every sandbox.

Where the memory, pids and cpu controllers are mounted (v1) and cairn may create groups below
its own, each sandbox gets a group per controller with the run's limits written once; a run
enters them through the launcher (see ``sandbox.py``).

On the unified hierarchy (v2: Proxmox VE 7 and later, Debian 11 and later) cairn can only make
groups in a subtree delegated to it (the unit's ``Delegate=yes``). A group with processes may
not hand controllers to its children, so cairn first moves every process of its own group
(itself, its nats-server) into the leaf ``cairn``, then enables memory, pids and cpu for the
children, and each sandbox gets one group with ``memory.max``, ``memory.swap.max``,
``memory.oom.group``, ``pids.max`` and ``cpu.max``.

Where neither is usable the sandbox falls back to rlimits and the run's supervisor
(``supervise.py``); ``describe`` says which limit holds how, for the start-up log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
from collections.abc import Iterable
from pathlib import Path

import attrs

from actors.functions.limits import SandboxLimits

log = logging.getLogger(__name__)

# cpuacct only accounts (CPU used per run, for the benchmark and the logs); the others limit.
CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
CFS_PERIOD_US = 100_000
# v2: the controllers cairn enables for its sandboxes (v2 accounts CPU in cpu.stat everywhere).
V2_CONTROLLERS = ("memory", "pids", "cpu")
# v2: the leaf cairn's own processes move to, so its group may hand controllers down.
LEAF = "cairn"


def v1_mounts(mountinfo: str) -> dict[str, tuple[str, str]]:
    """``controller -> (mount root, mount point)`` for every cgroup v1 hierarchy in
    ``/proc/self/mountinfo`` text."""
    mounts: dict[str, tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        if not sep:
            continue
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        for option in tail[2].split(","):
            if option in CONTROLLERS:
                mounts[option] = (root, point)
    return mounts


def own_paths(proc_cgroup: str) -> dict[str, str]:
    """``controller -> path`` of this process's groups, from ``/proc/self/cgroup`` text."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[1]:
            continue  # "0::/path" is the v2 entry
        for controller in parts[1].split(","):
            if controller in CONTROLLERS:
                paths[controller] = parts[2]
    return paths


def v2_mount(mountinfo: str) -> tuple[str, str] | None:
    """``(mount root, mount point)`` of the cgroup v2 hierarchy, if one is mounted."""
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if sep and len(fields) >= 5 and tail[:1] == ["cgroup2"]:
            return _unescape(fields[3]), _unescape(fields[4])
    return None


def own_v2_dir(mountinfo: str, proc_cgroup: str) -> Path | None:
    """The directory of this process's v2 group ("0::/path" in ``/proc/self/cgroup``)."""
    mount = v2_mount(mountinfo)
    path = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), None)
    if mount is None or path is None:
        return None
    root, point = mount
    relative = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    if relative.startswith(".."):
        return None
    return Path(point) / relative if relative not in (".", "") else Path(point)


def own_dirs(mountinfo: str, proc_cgroup: str) -> dict[str, Path]:
    """The directory of this process's own group for each mounted v1 controller."""
    mounts, paths = v1_mounts(mountinfo), own_paths(proc_cgroup)
    dirs: dict[str, Path] = {}
    for controller, (root, point) in mounts.items():
        path = paths.get(controller)
        if path is None:
            continue
        relative = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
        if relative.startswith(".."):
            continue  # our group lies outside the mounted part of the hierarchy
        dirs[controller] = Path(point) / relative if relative != "." else Path(point)
    return dirs


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal.
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def process_tree(root: int) -> set[int]:
    """``root`` and its descendants, from /proc (empty when it is gone)."""
    tree: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        tree.add(pid)
        for tid in tasks:
            with contextlib.suppress(OSError, ValueError):
                todo += [
                    int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
                ]
    return tree


@attrs.define(eq=False)  # identity: a slot is one set of groups, kept in sets
class CgroupSlot:
    """The groups of one sandbox (on v2 one group holds every controller)."""

    dirs: dict[str, Path]
    version: int = 1

    @property
    def memory(self) -> bool:
        return "memory" in self.dirs

    @property
    def pids(self) -> bool:
        return "pids" in self.dirs

    def procs_files(self) -> list[str]:
        # Controllers mounted together (cpu,cpuacct) share one directory: enter it once.
        return list(dict.fromkeys(str(d / "cgroup.procs") for d in self.dirs.values()))

    def cpu_ns(self) -> int:
        """CPU time used in this slot so far (cpuacct or cpu.stat), 0 without it."""
        return _cpu_ns(self.dirs, self.version)

    def oom_kills(self) -> int:
        """How many processes the memory controller has killed in this group so far (what
        tells an OOM kill apart from any other death)."""
        directory = self.dirs.get("memory")
        if directory is None:
            return 0
        # v1 counts them in memory.oom_control, v2 in memory.events.
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        return _field(directory / name, "oom_kill")

    def members(self) -> set[int]:
        pids: set[int] = set()
        for directory in set(self.dirs.values()):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
        return pids

    def kill_all(self) -> int:
        if self.version == 2:
            # The whole group at once, forks in flight included (Linux 5.14 and later).
            for directory in set(self.dirs.values()):
                with contextlib.suppress(OSError):
                    _write(directory / "cgroup.kill", 1)
        members = self.members()
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return len(members)

    async def empty(self, timeout: float = 2.0) -> bool:
        """Kill whatever is left in the groups and wait until they are empty."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.kill_all():
            if loop.time() > deadline:
                log.warning("cgroup slot %s still has processes", self.dirs)
                return False
            await asyncio.sleep(0.002)
        return True


@attrs.define
class Cgroups:
    """This runner host's parent group per controller; every sandbox gets fresh groups below.

    Groups are never reused: the tasks of a dead pid namespace stay charged to pids.current
    for about two seconds after they exit, so a reused group would start the next run short
    of its process allowance (and node deadlocks at start when it cannot create its worker
    threads). Creating a group costs a few sysfs writes; entering one is the expensive part,
    and that is paid either way."""

    parents: dict[str, Path]
    limits: SandboxLimits
    # 1 or 2; 0 when no controller is usable (then ``reason`` says why).
    version: int = 1
    reason: str = ""
    _made: int = 0
    _retired: list[CgroupSlot] = attrs.field(factory=list)

    @property
    def controllers(self) -> tuple[str, ...]:
        return tuple(sorted(self.parents))

    def cpu_ns(self) -> int:
        """CPU time used by every sandbox of this host so far, removed groups included
        (a parent is charged for its children); 0 without the controller."""
        return _cpu_ns(self.parents, self.version)

    def new_slot(self) -> CgroupSlot | None:
        """Fresh groups with the run's limits, or None when no controller is usable (or one
        failed just now: the run then falls back to rlimits, never runs unlimited)."""
        if not self.parents:
            return None
        self._made += 1
        name = f"run-{self._made}"
        dirs: dict[str, Path] = {}
        made: list[Path] = []
        try:
            for controller, parent in self.parents.items():
                directory = parent / name
                if directory not in made:
                    directory.mkdir()
                    made.append(directory)
                _configure(controller, directory, self.limits, self.version)
                dirs[controller] = directory
        except OSError as exc:
            log.warning("could not create cgroup %s (%s); rlimits for this run", name, exc)
            for directory in made:
                with contextlib.suppress(OSError):
                    _rmdir(directory)
            return None
        return CgroupSlot(dirs, self.version)

    def retire(self, slot: CgroupSlot) -> None:
        """Remove a used slot's groups (later, if the kernel still holds them)."""
        self._retired.append(slot)
        still: list[CgroupSlot] = []
        for old in self._retired:
            old.kill_all()
            left = False
            for directory in set(old.dirs.values()):
                try:
                    _rmdir(directory)
                except FileNotFoundError:
                    pass
                except OSError:
                    left = True
            if left:
                still.append(old)
        self._retired = still

    def remove(self) -> None:
        """Remove every group of this host (used ones and any left behind) and the parents."""
        for parent in set(self.parents.values()):
            _remove_tree(parent, self.version)
        self._retired = []


def _remove_tree(parent: Path, version: int = 1) -> None:
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            if child.is_dir():
                CgroupSlot({"any": child}, version).kill_all()
                with contextlib.suppress(OSError):
                    _rmdir(child)
    with contextlib.suppress(OSError):
        _rmdir(parent)


def _remove_stale(base: Path, version: int = 1) -> None:
    """Groups of cairn processes that died without cleaning up (their names carry the pid):
    what a sandbox of theirs left running is killed here, at the next start."""
    with contextlib.suppress(OSError):
        for entry in base.glob("cairn-*-*"):
            pid = entry.name.split("-")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _remove_tree(entry, version)


def _write(path: Path, value: int | str) -> None:
    # Every write to a cgroup file goes through here (tests follow them in order).
    path.write_text(f"{value}\n")


def _rmdir(path: Path) -> None:
    path.rmdir()


def _field(path: Path, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file, 0 when absent or unreadable."""
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


def _cpu_ns(dirs: dict[str, Path], version: int) -> int:
    if version == 2:
        directory = next(iter(dirs.values()), None)
        return _field(directory / "cpu.stat", "usage_usec") * 1000 if directory else 0
    directory = dirs.get("cpuacct")
    if directory is None:
        return 0
    with contextlib.suppress(OSError, ValueError):
        return int((directory / "cpuacct.usage").read_text())
    return 0


def _configure(controller: str, directory: Path, limits: SandboxLimits, version: int = 1) -> None:
    if version == 2:
        _configure_v2(controller, directory, limits)
    elif controller == "memory":
        _write(directory / "memory.limit_in_bytes", limits.memory_bytes)
        memsw = directory / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # memory plus swap: without it a run could spill into swap
            _write(memsw, limits.memory_bytes)
    elif controller == "pids":
        _write(directory / "pids.max", limits.processes)
    elif controller == "cpu":
        _write(directory / "cpu.cfs_period_us", CFS_PERIOD_US)
        _write(directory / "cpu.cfs_quota_us", max(1000, int(limits.cpus * CFS_PERIOD_US)))


def _configure_v2(controller: str, directory: Path, limits: SandboxLimits) -> None:
    if controller == "memory":
        _write(directory / "memory.max", limits.memory_bytes)
        # No swap at all (the file is missing where the kernel does not account swap), and
        # an OOM kill ends the whole run, not only its largest process.
        with contextlib.suppress(OSError):
            _write(directory / "memory.swap.max", 0)
        with contextlib.suppress(OSError):
            _write(directory / "memory.oom.group", 1)
    elif controller == "pids":
        _write(directory / "pids.max", limits.processes)
    elif controller == "cpu":
        quota = max(1000, int(limits.cpus * CFS_PERIOD_US))
        _write(directory / "cpu.max", f"{quota} {CFS_PERIOD_US}")


def create(
    limits: SandboxLimits,
    *,
    enabled: Iterable[str] = CONTROLLERS,
    proc: Path = Path("/proc/self"),
) -> Cgroups:
    """This host's parent groups for every controller that exists and where a group with the
    limits can be made (tried once with a probe); the others are left to rlimits, logged."""
    try:
        mountinfo, proc_cgroup = (proc / "mountinfo").read_text(), (proc / "cgroup").read_text()
    except OSError:
        return Cgroups({}, limits, 0, "/proc/self/cgroup is unreadable")
    dirs = own_dirs(mountinfo, proc_cgroup)
    name = f"cairn-{os.getpid()}-{secrets.token_hex(3)}"
    if not any(controller in dirs for controller in enabled):
        own = own_v2_dir(mountinfo, proc_cgroup)
        mount = v2_mount(mountinfo)
        if own is None or mount is None:
            return Cgroups({}, limits, 0, "no cgroup v1 controller or v2 hierarchy is mounted")
        if own == Path(mount[1]):
            # Moving "our" processes to a leaf there would move every process of the host.
            return Cgroups({}, limits, 0, "cairn runs in the root cgroup, which it never divides")
        return create_v2(limits, own, name, enabled)
    parents: dict[str, Path] = {}
    for controller in enabled:
        base = dirs.get(controller)
        if base is None:
            continue
        parent = base / name
        if parent in parents.values():  # co-mounted with a controller already set up
            parents[controller] = parent
            continue
        _remove_stale(base)
        probe = parent / "probe"
        try:
            parent.mkdir()
            probe.mkdir()
            _configure(controller, probe, limits)
        except OSError as exc:
            log.warning("cgroup %s not usable (%s); rlimits instead", controller, exc)
            for directory in (probe, parent):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            continue
        probe.rmdir()
        parents[controller] = parent
    if not parents:
        return Cgroups({}, limits, 0, "cgroup v1 controllers are not writable")
    return Cgroups(parents, limits, 1)


def create_v2(
    limits: SandboxLimits, own: Path, name: str, enabled: Iterable[str] = V2_CONTROLLERS
) -> Cgroups:
    """Groups below ``own`` (this process's v2 group, delegated to it): cairn's processes move
    to the leaf, the controllers are enabled for its children and for the sandboxes' parent
    ``name``, and a probe group takes the limits. Anything refused means no cgroups (the
    reason is kept for the log): a half-set-up tree is never used."""
    try:
        available = (own / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return Cgroups({}, limits, 0, f"cgroup v2 group {own} is unreadable ({exc.strerror})")
    wanted = [c for c in V2_CONTROLLERS if c in available and c in enabled]
    if not wanted:
        return Cgroups({}, limits, 0, f"cgroup v2 group {own} has no controller delegated")
    control = " ".join(f"+{c}" for c in wanted)
    parent = own / name
    try:
        _into_leaf(own)
        _write(own / "cgroup.subtree_control", control)
        _remove_stale(own, 2)
        parent.mkdir()
        _write(parent / "cgroup.subtree_control", control)
        probe = parent / "probe"
        probe.mkdir()
        for controller in wanted:
            _configure(controller, probe, limits, 2)
        _rmdir(probe)
    except OSError as exc:
        _remove_tree(parent, 2)
        reason = f"cgroup v2 group {own} is not delegated to cairn ({exc.strerror or exc})"
        return Cgroups({}, limits, 0, reason)
    return Cgroups(dict.fromkeys(wanted, parent), limits, 2)


def _into_leaf(own: Path, tries: int = 5) -> None:
    """Move every process of ``own`` into its leaf (a child forked meanwhile lands in ``own``
    and is moved on the next pass). Only a group holding nothing but cairn and its children
    is taken as delegated to it: root in a login session's group would otherwise move the
    session's shell. Raises OSError when ``own`` is not cairn's or does not empty."""
    leaf = own / LEAF
    for attempt in range(tries):
        pids = (own / "cgroup.procs").read_text().split()
        if not pids:
            return
        foreign = {int(pid) for pid in pids} - process_tree(os.getpid())
        if foreign and attempt == 0:
            raise OSError(f"it holds processes that are not cairn's ({len(foreign)})")
        leaf.mkdir(exist_ok=True)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                _write(leaf / "cgroup.procs", pid)
    raise OSError(f"processes keep appearing in {own}")


def describe(groups: Cgroups | None) -> str:
    """Which limit of a run holds how, for the start-up log."""
    parents = groups.parents if groups is not None else {}
    version = groups.version if groups is not None else 0
    memory = {
        2: "memory.max (swap off, the whole run killed on OOM)",
        1: "memory.limit_in_bytes",
    }
    if "memory" in parents:
        held_memory = f"cgroup v{version} {memory[version]}"
    else:
        held_memory = "RLIMIT_AS (Python) / RLIMIT_DATA (node) per process, summed every 20 ms"
    processes = (
        f"cgroup v{version} pids.max"
        if "pids" in parents
        else "RLIMIT_NPROC in the sandbox's own user namespace"
    )
    cpu = {2: "cpu.max", 1: "cpu.cfs_quota_us"}
    share = f"cgroup v{version} {cpu[version]}" if "cpu" in parents else "not held (no cgroup)"
    if version:
        where = f"cgroup v{version}"
    elif groups is None:
        where = "no cgroups (RUN_CGROUPS=0)"
    else:
        where = f"no cgroups ({groups.reason})"
    return (
        f"sandbox limits on {where}: memory by {held_memory}; processes by {processes}; "
        f"CPU share {share}; tmpfs files counted every 20 ms; CPU time, file size and open "
        "files by rlimits"
    )
