"""cgroup v1 detection and one cgroup per runner slot.

Where the memory, pids and cpu controllers are mounted (v1) and cairn may create groups below
its own, each runner slot gets a group per controller with the run's limits written once; a run
enters them through the launcher (see ``sandbox.py``). Where a controller is missing or not
writable the sandbox falls back to rlimits for it. cgroup v2 is not used: on the machines this
was built for the v2 hierarchy holds no controllers.
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
        field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
        .replace("\\134", "\\")
    )  # fmt: skip


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
    """The groups of one runner slot; only one run uses them at a time."""

    dirs: dict[str, Path]

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
        """CPU time used in this slot so far (cpuacct), 0 without the controller."""
        directory = self.dirs.get("cpuacct")
        if directory is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            return int((directory / "cpuacct.usage").read_text())
        return 0

    def oom_kills(self) -> int:
        """How many processes the memory controller has killed in this group so far."""
        directory = self.dirs.get("memory")
        if directory is None:
            return 0
        with contextlib.suppress(OSError):
            for line in (directory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def members(self) -> set[int]:
        pids: set[int] = set()
        for directory in set(self.dirs.values()):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (directory / "cgroup.procs").read_text().split())
        return pids

    def kill_all(self) -> int:
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
    _made: int = 0
    _retired: list[CgroupSlot] = attrs.field(factory=list)

    @property
    def controllers(self) -> tuple[str, ...]:
        return tuple(sorted(self.parents))

    def cpu_ns(self) -> int:
        """CPU time used by every sandbox of this host so far, removed groups included
        (cpuacct charges the parents too); 0 without the controller."""
        directory = self.parents.get("cpuacct")
        if directory is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            return int((directory / "cpuacct.usage").read_text())
        return 0

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
                _configure(controller, directory, self.limits)
                dirs[controller] = directory
        except OSError as exc:
            log.warning("could not create cgroup %s (%s); rlimits for this run", name, exc)
            for directory in made:
                with contextlib.suppress(OSError):
                    directory.rmdir()
            return None
        return CgroupSlot(dirs)

    def retire(self, slot: CgroupSlot) -> None:
        """Remove a used slot's groups (later, if the kernel still holds them)."""
        self._retired.append(slot)
        still: list[CgroupSlot] = []
        for old in self._retired:
            old.kill_all()
            left = False
            for directory in set(old.dirs.values()):
                try:
                    directory.rmdir()
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
            _remove_tree(parent)
        self._retired = []


def _remove_tree(parent: Path) -> None:
    with contextlib.suppress(OSError):
        for child in parent.iterdir():
            if child.is_dir():
                CgroupSlot({"any": child}).kill_all()
                with contextlib.suppress(OSError):
                    child.rmdir()
    with contextlib.suppress(OSError):
        parent.rmdir()


def _remove_stale(base: Path) -> None:
    """Groups of cairn processes that died without cleaning up (their names carry the pid)."""
    with contextlib.suppress(OSError):
        for entry in base.glob("cairn-*-*"):
            pid = entry.name.split("-")[1]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _remove_tree(entry)


def _write(path: Path, value: int) -> None:
    path.write_text(f"{value}\n")


def _configure(controller: str, directory: Path, limits: SandboxLimits) -> None:
    if controller == "memory":
        _write(directory / "memory.limit_in_bytes", limits.memory_bytes)
        memsw = directory / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # memory plus swap: without it a run could spill into swap
            _write(memsw, limits.memory_bytes)
    elif controller == "pids":
        _write(directory / "pids.max", limits.processes)
    elif controller == "cpu":
        _write(directory / "cpu.cfs_period_us", CFS_PERIOD_US)
        _write(directory / "cpu.cfs_quota_us", max(1000, int(limits.cpus * CFS_PERIOD_US)))


def create(
    limits: SandboxLimits,
    *,
    enabled: Iterable[str] = CONTROLLERS,
    proc: Path = Path("/proc/self"),
) -> Cgroups:
    """This host's parent groups for every controller that exists and where a group with the
    limits can be made (tried once with a probe); the others are left to rlimits, logged."""
    try:
        dirs = own_dirs((proc / "mountinfo").read_text(), (proc / "cgroup").read_text())
    except OSError:
        dirs = {}
    name = f"cairn-{os.getpid()}-{secrets.token_hex(3)}"
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
    return Cgroups(parents, limits)
