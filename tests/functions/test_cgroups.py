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
