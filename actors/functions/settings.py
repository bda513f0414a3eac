"""Configuration of the script execution service (every variable is in docs/functions.md)."""

from __future__ import annotations

import math
import os
import pwd
from collections.abc import Mapping

import attrs

from actors.config import ConfigError, env_bool, env_float, env_int, env_str
from actors.functions.limits import MIB, SandboxLimits
from actors.functions.sandbox import HostUser, Runtimes
from events import resources

DEFAULT_CODE_MAX_SIZE = 262_144
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_QUEUE = 32
# The host user sandboxes run as when cairn runs as root (ops/setup creates it).
DEFAULT_RUN_USER = "cairn-sandbox"


@attrs.frozen
class FunctionsSettings:
    code_max_size: int = DEFAULT_CODE_MAX_SIZE
    limits: SandboxLimits = attrs.field(factory=SandboxLimits)
    concurrency: int = 2
    queue: int = DEFAULT_QUEUE
    # Sandboxes per runtime (python, node) kept started and waiting for a run.
    warm: int = 4
    # Whether this process runs a runner host too (runner hosts elsewhere share the load).
    runner: bool = True
    cgroups: bool = True
    runtimes: Runtimes = attrs.field(factory=Runtimes)
    esbuild: str | None = None
    # Who sandboxed code runs as on the host: None when cairn is not root (then its own user).
    user: HostUser | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> FunctionsSettings:
        timeout = env_float(env, "RUN_TIMEOUT", DEFAULT_TIMEOUT_S, min=0.01)
        if timeout > 24 * 3600:
            raise ConfigError("RUN_TIMEOUT", "must be at most 86400 seconds", str(timeout))
        limits = SandboxLimits(
            timeout_s=timeout,
            # A second past the wall clock: a plain endless loop ends by the time-out, with the
            # same message in every language (a runtime's boot counts as CPU time too).
            cpu_seconds=_int(env, "RUN_CPU_SECONDS", math.ceil(timeout) + 1, 1),
            memory_bytes=_int(env, "RUN_MEMORY_MB", 256, 16) * MIB,
            processes=_int(env, "RUN_PROCESSES", 64, 4),
            output_bytes=_int(env, "RUN_OUTPUT_BYTES", 512 * 1024, 1024),
            tmpfs_bytes=_int(env, "RUN_TMPFS_MB", 16, 1) * MIB,
            cpus=env_float(env, "RUN_CPUS", 1.0, min=0.01),
        )
        defaults = Runtimes()
        concurrency = _int(env, "RUN_CONCURRENCY", os.cpu_count() or 2, 1)
        runner = env_bool(env, "FUNCTIONS_RUNNER", True)
        run_user = env_str(env, "RUN_USER")
        user = host_user(run_user, os.geteuid()) if runner else None
        return cls(
            code_max_size=_int(env, "CODE_MAX_SIZE", DEFAULT_CODE_MAX_SIZE, 1),
            limits=limits,
            concurrency=concurrency,
            queue=_int(env, "RUN_QUEUE", DEFAULT_QUEUE, 0),
            # Measured: twice the concurrency kept ~55 runs/s where 1x gave ~41 (2 cores).
            warm=_int(env, "RUN_WARM", 2 * concurrency, 0),
            runner=runner,
            cgroups=env_bool(env, "RUN_CGROUPS", True),
            runtimes=Runtimes(
                python=env_str(env, "RUN_PYTHON") or defaults.python,
                node=env_str(env, "RUN_NODE") or defaults.node,
                bwrap=env_str(env, "BWRAP") or defaults.bwrap,
            ),
            esbuild=resources.esbuild(env),
            user=user,
        )


def host_user(name: str | None, euid: int) -> HostUser | None:
    """The host user sandboxes run as. As root: ``RUN_USER`` (default ``cairn-sandbox``), which
    must exist and must not be root. Otherwise cairn cannot switch users: sandboxes run as its
    own user (``RUN_USER`` may only name that one)."""
    if euid != 0:
        try:
            own = pwd.getpwuid(euid).pw_name
        except KeyError:
            own = str(euid)
        if name and name != own:
            raise ConfigError(
                "RUN_USER",
                f"switching users needs root (cairn runs as {own}): leave it unset",
                name,
            )
        return None
    name = name or DEFAULT_RUN_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ConfigError(
            "RUN_USER",
            "no such user: ops/setup creates cairn-sandbox (useradd --system --user-group "
            "--no-create-home --shell /usr/sbin/nologin cairn-sandbox)",
            name,
        ) from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise ConfigError("RUN_USER", "must not be root or in the root group", name)
    return HostUser(entry.pw_uid, entry.pw_gid)


def _int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = env_int(env, name, default, min=minimum)
    assert value is not None
    return value
