"""A real sandbox (bubblewrap, cgroups where writable) shared by the tests of a module."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.functions import cgroups
from actors.functions.limits import MIB, SandboxLimits
from actors.functions.runner import Sandbox
from actors.functions.transpile import Transpiler, find_esbuild

TEST_LIMITS = SandboxLimits(
    timeout_s=10, cpu_seconds=10, memory_bytes=128 * MIB, processes=32, output_bytes=64 * 1024,
    tmpfs_bytes=4 * MIB,
)  # fmt: skip


@pytest.fixture(scope="module")
def cgroup_set() -> Iterator[cgroups.Cgroups]:
    made = cgroups.create(2, TEST_LIMITS)
    yield made
    made.remove()


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(TEST_LIMITS)


@pytest.fixture
def transpiler(tmp_path: Path) -> Transpiler:
    return Transpiler(find_esbuild({}), tmp_path / "ts-cache")
