"""The sandbox command line, built by pure functions so golden tests pin every flag.

A sandbox is ``dash -c <launcher> cairn-sandbox bwrap ... <runtime> <wrapper>``:

* The launcher is what a ``preexec_fn`` would otherwise do (unsafe here: actors are threads):
  it moves itself into the slot's cgroups, sets the rlimits, then ``exec``s bwrap, so bwrap and
  everything below it start inside the limits.
* bwrap builds the namespaces and mounts, then runs the runtime (python3 or node) on our
  wrapper as uid 65534; the wrapper boots and then blocks reading stdin (code and input).

All of that can happen before a run is asked for (entering a cgroup v1 alone waits for an RCU
grace period, ≈20 ms on a busy machine; node takes ≈40 ms of CPU to boot here), so the runner
host keeps sandboxes started and waiting, each used for exactly one run. The result pipe keeps
its descriptor number (dash cannot move descriptors above 9); the wrapper learns the number on
stdin.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import attrs

from actors.functions.languages import Language
from actors.functions.limits import SandboxLimits

SANDBOX_UID = 65534
HOME = "/home/sandbox"
WRAPPER_DIR = "/cairn"
# The launcher's own failure (a cgroup it could not enter): never a code the runtimes use.
LAUNCH_FAILED = 125


@attrs.frozen
class Runtimes:
    python: str = "/usr/bin/python3"
    node: str = "/usr/bin/node"
    bwrap: str = "/usr/bin/bwrap"
    shell: str = "/bin/dash"


@attrs.frozen
class Rlimit:
    """One ``ulimit`` line (dash flags and units)."""

    flag: str
    value: int


def runtime_of(language: Language) -> str:
    """The runtime a language runs on; sandboxes are started per runtime."""
    return "python" if language is Language.PYTHON else "node"


RUNTIMES = ("python", "node")
LANGUAGE_OF_RUNTIME = {"python": Language.PYTHON, "node": Language.JAVASCRIPT}


def program_argv(language: Language, runtimes: Runtimes, limits: SandboxLimits) -> list[str]:
    """The runtime and the wrapper it starts, as seen inside the sandbox."""
    if language is Language.PYTHON:
        # -I: no environment or user site; -S: no site import (≈10 ms per run; the standard
        # library is all a function gets); -B: /usr is read-only anyway.
        return [runtimes.python, "-I", "-S", "-B", f"{WRAPPER_DIR}/run.py"]
    # V8 must fail cleanly ("heap out of memory") before the cgroup's OOM killer steps in;
    # RLIMIT_AS is never used for node (V8 reserves far more address space than it uses).
    heap_mib = max(16, limits.memory_mib * 3 // 4)
    return [runtimes.node, f"--max-old-space-size={heap_mib}", f"{WRAPPER_DIR}/run.js"]


def bwrap_argv(
    program: Sequence[str],
    *,
    wrappers_host_dir: str,
    limits: SandboxLimits,
    bwrap: str = "/usr/bin/bwrap",
) -> list[str]:
    """The bubblewrap command line: every namespace unshared (so no network at all), uid 65534
    with no capabilities, an empty environment, read-only /usr, a fresh size-capped tmpfs for
    /tmp and the home directory, and a read-only root and /dev (device nodes still work)."""
    tmpfs = str(limits.tmpfs_bytes)
    return [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        "--cap-drop", "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin",
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp",
        "--perms", "0700", "--size", tmpfs, "--tmpfs", HOME,
        "--ro-bind", wrappers_host_dir, WRAPPER_DIR,
        "--remount-ro", "/",
        "--remount-ro", "/dev",
        "--chdir", HOME,
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", HOME,
        "--setenv", "LANG", "C.UTF-8",
        "--",
        *program,
    ]  # fmt: skip


def rlimits(
    language: Language, limits: SandboxLimits, *, memory_cgroup: bool, pids_cgroup: bool
) -> list[Rlimit]:
    """The rlimits of every process of a run. Memory and process caps come from the cgroup when
    there is one; without, Python gets RLIMIT_AS (node never: V8 fails under it) and every run
    RLIMIT_NPROC (which the kernel does not enforce for root: the docs say so)."""
    out = [
        Rlimit("-c", 0),
        Rlimit("-t", limits.cpu_seconds),
        Rlimit("-f", max(1, limits.tmpfs_bytes // 512)),  # dash counts 512-byte blocks
        Rlimit("-n", limits.open_files),
    ]
    if not memory_cgroup and language is Language.PYTHON:
        out.append(Rlimit("-v", limits.memory_bytes // 1024))  # KiB
    if not pids_cgroup:
        out.append(Rlimit("-p", limits.processes))
    return out


def launcher_script(cgroup_procs: Sequence[str], limits: Sequence[Rlimit]) -> str:
    """The dash script that enters the cgroups, sets the rlimits and execs its arguments.
    Only our own paths and numbers go in; never user input."""
    lines = [f"echo $$ > {shlex.quote(path)} || exit {LAUNCH_FAILED}" for path in cgroup_procs]
    lines += [f"ulimit {limit.flag} {limit.value} || exit {LAUNCH_FAILED}" for limit in limits]
    # dash exports PWD, which would show the server's working directory through /proc/1.
    lines.append("unset PWD OLDPWD")
    lines.append('exec "$@"')
    return "\n".join(lines)


def sandbox_argv(
    language: Language,
    runtimes: Runtimes,
    limits: SandboxLimits,
    *,
    wrappers_host_dir: str,
    cgroup_procs: Sequence[str],
    memory_cgroup: bool,
    pids_cgroup: bool,
) -> list[str]:
    """The whole command line of one sandbox for ``language``'s runtime."""
    inner = bwrap_argv(
        program_argv(language, runtimes, limits),
        wrappers_host_dir=wrappers_host_dir,
        limits=limits,
        bwrap=runtimes.bwrap,
    )
    limit_lines = rlimits(language, limits, memory_cgroup=memory_cgroup, pids_cgroup=pids_cgroup)
    launcher = launcher_script(cgroup_procs, limit_lines)
    return [runtimes.shell, "-c", launcher, "cairn-sandbox", *inner]
