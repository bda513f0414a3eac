"""The sandbox command line, built by pure functions so golden tests pin every flag.

A sandbox is ``dash -c <launcher> cairn-sandbox bwrap ... dash -c <dispatcher>``:

* The launcher is what a ``preexec_fn`` would otherwise do (unsafe here: actors are threads):
  it moves itself into the slot's cgroups, sets the rlimits, then ``exec``s bwrap, so bwrap and
  everything below it start inside the limits.
* bwrap builds the namespaces and mounts, then runs the dispatcher as uid 65534.
* The dispatcher waits for one line on stdin naming the runtime, then ``exec``s it; the runtime
  reads the rest of stdin (code and input).

All of that happens before a run is asked for: entering a cgroup v1 waits for an RCU grace
period (≈20 ms on a busy machine) and the shells and namespaces cost more, so a runner slot
keeps one sandbox started and waiting, and a run only pays for the runtime itself. The result
pipe keeps its descriptor number (dash cannot move descriptors above 9); the wrapper learns the
number on stdin.
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
# The dispatcher was told a runtime it does not know.
UNKNOWN_RUNTIME = 126


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


def runtime_word(language: Language) -> str:
    """The line the dispatcher reads to choose the runtime."""
    return "python" if language is Language.PYTHON else "node"


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


def dispatcher_script(runtimes: Runtimes, limits: SandboxLimits, *, memory_cgroup: bool) -> str:
    """Runs inside the sandbox: read the runtime's name, exec it. Without a memory cgroup,
    Python gets RLIMIT_AS here (node never: V8 fails under it)."""
    python = shlex.join(program_argv(Language.PYTHON, runtimes, limits))
    node = shlex.join(program_argv(Language.JAVASCRIPT, runtimes, limits))
    python_limit = "" if memory_cgroup else f"ulimit -v {limits.memory_bytes // 1024}; "
    return (
        "read -r runtime\n"
        'case "$runtime" in\n'
        f"python) {python_limit}exec {python} ;;\n"
        f"node) exec {node} ;;\n"
        "esac\n"
        f"exit {UNKNOWN_RUNTIME}"
    )


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


def rlimits(limits: SandboxLimits, *, pids_cgroup: bool) -> list[Rlimit]:
    """The rlimits of every process of a run. Without a pids cgroup RLIMIT_NPROC stands in
    (which the kernel does not enforce for root: the docs say so)."""
    out = [
        Rlimit("-c", 0),
        Rlimit("-t", limits.cpu_seconds),
        Rlimit("-f", max(1, limits.tmpfs_bytes // 512)),  # dash counts 512-byte blocks
        Rlimit("-n", limits.open_files),
    ]
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
    runtimes: Runtimes,
    limits: SandboxLimits,
    *,
    wrappers_host_dir: str,
    cgroup_procs: Sequence[str],
    memory_cgroup: bool,
    pids_cgroup: bool,
) -> list[str]:
    """The whole command line of one waiting sandbox."""
    dispatcher = [
        runtimes.shell,
        "-c",
        dispatcher_script(runtimes, limits, memory_cgroup=memory_cgroup),
    ]
    inner = bwrap_argv(
        dispatcher, wrappers_host_dir=wrappers_host_dir, limits=limits, bwrap=runtimes.bwrap
    )
    launcher = launcher_script(cgroup_procs, rlimits(limits, pids_cgroup=pids_cgroup))
    return [runtimes.shell, "-c", launcher, "cairn-sandbox", *inner]
