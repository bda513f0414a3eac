"""Configuration of the service: defaults as documented, and refusals that name the variable."""

import os
import pwd

import pytest

from actors.config import ConfigError
from actors.functions.limits import MIB
from actors.functions.requests import parse_version
from actors.functions.sandbox import HostUser
from actors.functions.settings import FunctionsSettings, host_user


def test_documented_defaults() -> None:
    settings = FunctionsSettings.from_env({})
    assert settings.code_max_size == 262144
    # The CPU limit lies a second past the wall clock, so an endless loop times out.
    assert settings.limits.timeout_s == 30.0 and settings.limits.cpu_seconds == 31
    assert settings.limits.memory_bytes == 256 * MIB
    assert settings.limits.processes == 64
    assert settings.limits.output_bytes == 512 * 1024
    assert settings.limits.tmpfs_bytes == 16 * MIB
    assert settings.queue == 32 and settings.runner and settings.cgroups
    assert settings.warm == 2 * settings.concurrency


def test_each_variable_is_read() -> None:
    settings = FunctionsSettings.from_env(
        {
            "CODE_MAX_SIZE": "1000",
            "RUN_TIMEOUT": "2.5",
            "RUN_MEMORY_MB": "64",
            "RUN_PROCESSES": "8",
            "RUN_OUTPUT_BYTES": "4096",
            "RUN_TMPFS_MB": "2",
            "RUN_CPUS": "0.5",
            "RUN_CONCURRENCY": "3",
            "RUN_QUEUE": "0",
            "RUN_WARM": "0",
            "RUN_CGROUPS": "0",
            "FUNCTIONS_RUNNER": "no",
            "ESBUILD": "/opt/esbuild",
        }
    )
    limits = settings.limits
    assert (settings.code_max_size, limits.timeout_s, limits.cpu_seconds) == (1000, 2.5, 4)
    assert (limits.memory_bytes, limits.processes, limits.output_bytes) == (64 * MIB, 8, 4096)
    assert (limits.tmpfs_bytes, limits.cpus) == (2 * MIB, 0.5)
    assert (settings.concurrency, settings.queue, settings.cgroups, settings.runner) == (
        3,
        0,
        False,
        False,
    )
    assert settings.esbuild == "/opt/esbuild" and settings.warm == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RUN_TIMEOUT", "soon"),
        ("RUN_TIMEOUT", "0"),
        ("RUN_TIMEOUT", "nan"),
        ("RUN_MEMORY_MB", "1"),
        ("RUN_PROCESSES", "-1"),
        ("RUN_CONCURRENCY", "0"),
        ("CODE_MAX_SIZE", "big"),
        ("RUN_CGROUPS", "maybe"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name}: "):
        FunctionsSettings.from_env({name: value})


def test_as_root_sandboxes_run_as_the_sandbox_user_never_as_root() -> None:
    made = pwd.getpwnam("nobody")
    assert host_user("nobody", 0) == HostUser(made.pw_uid, made.pw_gid)
    with pytest.raises(ConfigError, match=r"^RUN_USER: must not be root"):
        host_user("root", 0)
    with pytest.raises(ConfigError, match=r"^RUN_USER: no such user: ops/setup creates"):
        host_user("cairn-no-such-user", 0)
    if os.geteuid() == 0:
        default = FunctionsSettings.from_env({}).user
        assert default == HostUser(
            pwd.getpwnam("cairn-sandbox").pw_uid, pwd.getpwnam("cairn-sandbox").pw_gid
        )
    # A gateway that runs no runner host needs no sandbox user.
    assert FunctionsSettings.from_env({"FUNCTIONS_RUNNER": "0", "RUN_USER": "x"}).user is None


def test_without_root_sandboxes_run_as_cairns_own_user() -> None:
    nobody = pwd.getpwnam("nobody")
    assert host_user(None, nobody.pw_uid) is None
    assert host_user("nobody", nobody.pw_uid) is None
    with pytest.raises(ConfigError, match=r"^RUN_USER: switching users needs root"):
        host_user("cairn-sandbox", nobody.pw_uid)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("", None),
        ("12", 12),
        ("+12", 12),
        ("-3", -3),
        ("9223372036854775807", 9223372036854775807),
        ("9223372036854775808", None),
        ("-9223372036854775809", None),
        ("1e3", None),
        ("1.0", None),
        (" 1", None),
        ("١٢", None),  # Unicode digits are not an int64 in Go either
    ],
)
def test_version_query(raw: str | None, expected: int | None) -> None:
    assert parse_version(raw) == expected
