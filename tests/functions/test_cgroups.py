"""cgroup v1 detection from /proc text (golden), and real groups where this machine allows."""

import os
from pathlib import Path

import pytest

from actors.functions import cgroups
from actors.functions.limits import MIB, SandboxLimits

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PROC_CGROUP = """\
9:name=systemd:/
8:pids:/docker/abc/inner
4:memory:/process_api/9bc1
2:cpuacct:/
1:cpu:/
0::/
"""


def test_v1_mounts_finds_only_the_controllers_we_use() -> None:
    assert cgroups.v1_mounts(MOUNTINFO) == {
        "cpu": ("/", "/sys/fs/cgroup/cpu"),
        "cpuacct": ("/", "/sys/fs/cgroup/cpuacct"),
        "memory": ("/", "/sys/fs/cgroup/memory"),
        "pids": ("/docker/abc", "/sys/fs/cgroup/pids"),
    }


def test_own_dirs_joins_mount_point_and_our_path_below_the_mount_root() -> None:
    assert cgroups.own_dirs(MOUNTINFO, PROC_CGROUP) == {
        "cpu": Path("/sys/fs/cgroup/cpu"),
        "cpuacct": Path("/sys/fs/cgroup/cpuacct"),
        "memory": Path("/sys/fs/cgroup/memory/process_api/9bc1"),
        "pids": Path("/sys/fs/cgroup/pids/inner"),
    }


def test_a_group_outside_the_mounted_root_is_not_used() -> None:
    proc = "8:pids:/elsewhere\n"
    assert cgroups.own_dirs(MOUNTINFO, proc) == {}


def test_co_mounted_controllers_share_one_directory() -> None:
    mountinfo = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    dirs = cgroups.own_dirs(mountinfo, "3:cpu,cpuacct:/x\n")
    assert dirs == {
        "cpu": Path("/sys/fs/cgroup/cpu,cpuacct/x"),
        "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct/x"),
    }
    slot = cgroups.CgroupSlot(dirs)
    assert slot.procs_files() == ["/sys/fs/cgroup/cpu,cpuacct/x/cgroup.procs"]


def test_v2_only_machine_has_no_v1_controllers() -> None:
    mountinfo = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert cgroups.own_dirs(mountinfo, "0::/user.slice\n") == {}


def test_missing_proc_files_mean_rlimits_only(tmp_path: Path) -> None:
    made = cgroups.create(SandboxLimits(), proc=tmp_path)
    assert made.parents == {} and made.new_slot() is None


def test_real_groups_carry_the_limits_are_fresh_per_run_and_are_removed() -> None:
    limits = SandboxLimits(memory_bytes=64 * MIB, processes=9, cpus=0.5)
    made = cgroups.create(limits)
    if not made.parents:
        pytest.skip("no writable cgroup v1 controllers on this machine")
    try:
        slot = made.new_slot()
        other = made.new_slot()
        assert slot is not None and other is not None
        assert set(slot.dirs.values()).isdisjoint(other.dirs.values())
        if "memory" in slot.dirs:
            value = int((slot.dirs["memory"] / "memory.limit_in_bytes").read_text())
            assert value == 64 * MIB
        if "pids" in slot.dirs:
            assert (slot.dirs["pids"] / "pids.max").read_text().strip() == "9"
        if "cpu" in slot.dirs:
            assert (slot.dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert slot.members() == set()
        made.retire(slot)
        assert not any(d.exists() for d in slot.dirs.values())
    finally:
        made.remove()
    assert not any(os.path.exists(p) for p in made.parents.values())


# -- cgroup v2, against a directory laid out like a delegated /sys/fs/cgroup subtree ----------


class DelegatedTree:
    """A directory standing in for the unified hierarchy with ``system.slice/cairn.service``
    delegated to cairn (what systemd makes of ``Delegate=yes``). It keeps the kernel's rules
    cairn depends on: writing a pid to ``cgroup.procs`` moves it out of every other group, a
    group with processes cannot hand controllers to children, and only controllers the
    parent hands down can be enabled. Every write is recorded, in order."""

    def __init__(self, base: Path, pids: list[int]) -> None:
        self.mount = base / "sys" / "fs" / "cgroup"
        self.own = self.mount / "system.slice" / "cairn.service"
        self.own.mkdir(parents=True)
        (self.own / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
        (self.own / "cgroup.subtree_control").write_text("\n")
        (self.own / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in pids))
        self.writes: list[tuple[str, str]] = []
        self.proc = base / "proc"
        self.proc.mkdir()
        (self.proc / "mountinfo").write_text(
            f"30 23 0:26 / {self.mount} rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw,nsdelegate\n"
        )
        (self.proc / "cgroup").write_text("0::/system.slice/cairn.service\n")

    def write(self, path: Path, value: int | str) -> None:
        text = str(value)
        self.writes.append((str(path.relative_to(self.own)), text))
        controller = path.name.split(".")[0]
        if controller in ("memory", "pids", "cpu") and controller not in self.controllers(
            path.parent
        ):
            raise OSError(2, "No such file or directory")  # its parent did not hand it down
        if path.name == "cgroup.procs":
            for other in self.own.rglob("cgroup.procs"):
                kept = [p for p in other.read_text().split() if p != text]
                other.write_text("".join(f"{p}\n" for p in kept))
            with path.open("a") as out:
                out.write(f"{text}\n")
            return
        if path.name == "cgroup.subtree_control":
            group = path.parent
            if (group / "cgroup.procs").exists() and (group / "cgroup.procs").read_text().split():
                raise OSError(16, "Device or resource busy")  # no internal processes
            if any(c.lstrip("+") not in self.controllers(group) for c in text.split()):
                raise OSError(2, "No such file or directory")
        path.write_text(f"{text}\n")

    def controllers(self, group: Path) -> list[str]:
        """What ``group`` may enable: what its parent hands down (the delegated group's were
        handed down by systemd)."""
        if group == self.own:
            return (group / "cgroup.controllers").read_text().split()
        try:
            text = (group.parent / "cgroup.subtree_control").read_text()
        except FileNotFoundError:
            return []
        return [c.lstrip("+") for c in text.split()]

    def rmdir(self, path: Path) -> None:
        if (path / "cgroup.procs").exists() and (path / "cgroup.procs").read_text().split():
            raise OSError(16, "Device or resource busy")
        for child in path.iterdir():
            child.unlink()
        path.rmdir()


@pytest.fixture
def delegated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DelegatedTree:
    # cairn and a child of its own (its nats-server, here a child of the test).
    tree = DelegatedTree(tmp_path, [os.getpid()])
    monkeypatch.setattr(cgroups, "_write", tree.write)
    monkeypatch.setattr(cgroups, "_rmdir", tree.rmdir)
    return tree


V2_LIMITS = SandboxLimits(memory_bytes=64 * MIB, processes=9, cpus=0.5)


def test_v2_moves_cairn_to_a_leaf_then_hands_the_controllers_down(
    delegated: DelegatedTree,
) -> None:
    made = cgroups.create(V2_LIMITS, proc=delegated.proc)
    assert (made.version, made.reason) == (2, "")
    parent = made.parents["memory"]
    assert made.parents == dict.fromkeys(("memory", "pids", "cpu"), parent)
    assert parent.parent == delegated.own and parent.name.startswith(f"cairn-{os.getpid()}-")
    name = parent.name
    assert delegated.writes == [
        ("cairn/cgroup.procs", str(os.getpid())),
        ("cgroup.subtree_control", "+memory +pids +cpu"),
        (f"{name}/cgroup.subtree_control", "+memory +pids +cpu"),
        (f"{name}/probe/memory.max", str(64 * MIB)),
        (f"{name}/probe/memory.swap.max", "0"),
        (f"{name}/probe/memory.oom.group", "1"),
        (f"{name}/probe/pids.max", "9"),
        (f"{name}/probe/cpu.max", "50000 100000"),
    ]
    assert (delegated.own / "cairn" / "cgroup.procs").read_text().split() == [str(os.getpid())]
    assert not (parent / "probe").exists()

    # Each sandbox: one fresh group with every limit, entered through one cgroup.procs.
    delegated.writes.clear()
    slot = made.new_slot()
    assert slot is not None and slot.version == 2 and slot.memory and slot.pids
    assert slot.procs_files() == [str(parent / "run-1" / "cgroup.procs")]
    assert delegated.writes == [
        (f"{name}/run-1/memory.max", str(64 * MIB)),
        (f"{name}/run-1/memory.swap.max", "0"),
        (f"{name}/run-1/memory.oom.group", "1"),
        (f"{name}/run-1/pids.max", "9"),
        (f"{name}/run-1/cpu.max", "50000 100000"),
    ]
    # memory.events tells an OOM kill apart from any other death.
    (parent / "run-1" / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    (parent / "run-1" / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\n")
    assert (slot.oom_kills(), slot.cpu_ns()) == (1, 1_500_000)
    # After the run: the whole group killed at once, then removed.
    delegated.writes.clear()
    made.retire(slot)
    assert delegated.writes == [(f"{name}/run-1/cgroup.kill", "1")]
    assert not (parent / "run-1").exists()
    made.remove()
    assert not parent.exists() and (delegated.own / "cairn").exists()
    assert "cgroup v2 memory.max" in cgroups.describe(made)


def test_v2_without_swap_accounting_still_limits_memory(
    delegated: DelegatedTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse_swap(path: Path, value: int | str) -> None:
        if path.name in ("memory.swap.max", "memory.oom.group"):
            raise PermissionError(13, "Permission denied")  # no such file: the kernel's EACCES
        delegated.write(path, value)

    monkeypatch.setattr(cgroups, "_write", refuse_swap)
    made = cgroups.create(V2_LIMITS, proc=delegated.proc)
    slot = made.new_slot()
    assert made.version == 2 and slot is not None
    assert (slot.dirs["memory"] / "memory.max").read_text() == f"{64 * MIB}\n"


def test_v2_uses_only_the_controllers_handed_down(delegated: DelegatedTree) -> None:
    (delegated.own / "cgroup.controllers").write_text("cpuset io memory pids\n")  # no cpu
    made = cgroups.create(V2_LIMITS, proc=delegated.proc)
    assert made.controllers == ("memory", "pids")
    assert ("cgroup.subtree_control", "+memory +pids") in delegated.writes
    assert "CPU share not held" in cgroups.describe(made)


def test_v2_without_delegation_falls_back_and_says_why(
    delegated: DelegatedTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path, value: int | str) -> None:
        raise PermissionError(13, "Permission denied")  # the unit's user, no Delegate=yes

    monkeypatch.setattr(cgroups, "_write", refuse)
    made = cgroups.create(V2_LIMITS, proc=delegated.proc)
    assert (made.parents, made.version) == ({}, 0)
    assert made.reason == (
        f"cgroup v2 group {delegated.own} is not delegated to cairn (Permission denied)"
    )
    assert not list(delegated.own.glob("cairn-*"))  # nothing left half-made
    assert f"no cgroups ({made.reason})" in cgroups.describe(made)
    assert "RLIMIT_NPROC in the sandbox's own user namespace" in cgroups.describe(made)


def test_v2_never_moves_processes_that_are_not_cairns(delegated: DelegatedTree) -> None:
    # Root's login shell shares the group: it is not cairn's to move.
    (delegated.own / "cgroup.procs").write_text(f"{os.getppid()}\n{os.getpid()}\n")
    made = cgroups.create(V2_LIMITS, proc=delegated.proc)
    assert made.version == 0 and "not cairn's" in made.reason
    assert delegated.writes == []


def test_v2_never_divides_the_root_group(delegated: DelegatedTree) -> None:
    (delegated.proc / "cgroup").write_text("0::/\n")
    made = cgroups.create(V2_LIMITS, proc=delegated.proc)
    assert made.version == 0 and "root cgroup" in made.reason
    assert delegated.writes == []


def test_v2_removes_the_groups_a_dead_cairn_left(delegated: DelegatedTree) -> None:
    stale = delegated.own / "cairn-999999999-abcdef" / "run-3"
    stale.mkdir(parents=True)
    (stale / "cgroup.procs").write_text("")
    cgroups.create(V2_LIMITS, proc=delegated.proc)
    assert ("cairn-999999999-abcdef/run-3/cgroup.kill", "1") in delegated.writes
    assert not stale.parent.exists()


def test_own_v2_dir_below_a_mount_root() -> None:
    mountinfo = "30 23 0:26 /lxc/101 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert cgroups.own_v2_dir(mountinfo, "0::/lxc/101/system.slice/cairn.service\n") == Path(
        "/sys/fs/cgroup/system.slice/cairn.service"
    )
    assert cgroups.own_v2_dir(mountinfo, "0::/elsewhere\n") is None
    assert cgroups.own_v2_dir(MOUNTINFO.replace("cgroup2 cgroup2", "x x"), "0::/\n") is None
