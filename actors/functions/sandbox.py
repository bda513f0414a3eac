"""The sandbox command line, built by pure functions so golden tests pin every flag.

A sandbox is ``dash -c <launcher> cairn-sandbox [setpriv ...] bwrap ... <program>``:

* The launcher is what a ``preexec_fn`` would otherwise do (unsafe here: actors are threads):
  it moves itself into the slot's cgroups and sets the rlimits (both need the server's
  rights), then ``exec``s the rest, so everything below it starts inside the limits.
* setpriv drops to the sandbox's host user (``RUN_USER``) when cairn runs as root: no process
  of a sandbox is ever host uid 0. bwrap then runs unprivileged, in a user namespace of its own.
* bwrap builds the namespaces and mounts, loads the seccomp filter (see ``seccomp.py``) and
  runs the program as uid 65534 inside. A runtime's wrapper boots and then blocks reading
  stdin (code and input).

Files the program needs (the wrappers) are given by content through descriptors
(``--ro-bind-data``), and a host program (esbuild) as an open descriptor it is run from, so no
host path appears in the sandbox's mounts or in the command line its pid 1 shows, and the
sandbox's user need not reach the checkout. Descriptors keep their numbers (dash cannot move
descriptors above 9).

All of that can happen before a run is asked for (entering a cgroup v1 alone waits for an RCU
grace period, ≈20 ms on a busy machine; node takes ≈40 ms of CPU to boot here), so the runner
host keeps sandboxes started and waiting, each used for exactly one run.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

import attrs

from actors.functions.languages import Language
from actors.functions.limits import MIB, SandboxLimits

SANDBOX_UID = 65534
HOME = "/home/sandbox"
WRAPPER_DIR = "/cairn"
# The launcher's own failure (a cgroup it could not enter): never a code the runtimes use.
LAUNCH_FAILED = 125
# Go reserves about 70 MiB of writable address space before it allocates anything: without a
# memory cgroup, esbuild's RLIMIT_DATA is the run's memory plus this.
GO_RUNTIME_DATA = 80 * MIB
# node does not boot under an RLIMIT_DATA of 32 MiB and does under 48 MiB (measured, node 20):
# without a memory cgroup its RLIMIT_DATA is the run's memory, never less than this.
NODE_MIN_DATA = 64 * MIB


# Who uid 65534 is inside, so getpwuid() (Python's pwd and getpass, node's os.userInfo())
# answers instead of failing. "nobody" is the name the kernel's overflow uid has everywhere: it
# is also what host files owned by unmapped users (root's /usr) show as inside.
ACCOUNT_FILES = {
    "/etc/passwd": f"nobody:x:{SANDBOX_UID}:{SANDBOX_UID}:nobody:{HOME}:/usr/sbin/nologin\n",
    "/etc/group": f"nogroup:x:{SANDBOX_UID}:\n",
}


@attrs.frozen
class Runtimes:
    python: str = "/usr/bin/python3"
    node: str = "/usr/bin/node"
    bwrap: str = "/usr/bin/bwrap"
    shell: str = "/bin/dash"
    setpriv: str = "/usr/bin/setpriv"


@attrs.frozen
class HostUser:
    """The host uid and gid every sandboxed process runs as (cairn switches to them when it
    runs as root; otherwise sandboxes run as cairn's own user)."""

    uid: int
    gid: int


@attrs.frozen
class Rlimit:
    """One ``ulimit`` line (dash flags and units); ``hard`` when it differs from the soft
    limit."""

    flag: str
    value: int
    hard: int | None = None


@attrs.frozen
class Program:
    """What runs inside a sandbox."""

    argv: tuple[str, ...]
    # Files given by content, by where they appear inside (read-only); their descriptors are
    # passed in the same order.
    files: tuple[str, ...] = ()
    # A host program given by descriptor and run as ``/proc/self/fd/N`` (then ``argv`` holds
    # only its arguments): neither its path nor its directory need be visible, or reachable
    # by the sandbox's user.
    executable: str | None = None
    # How memory is capped per process where no memory cgroup is usable: "-v" (RLIMIT_AS) or
    # "-d" (RLIMIT_DATA: private writable mappings only, which V8 and Go survive where they
    # fail under RLIMIT_AS: both reserve far more address space than they use).
    memory_rlimit: str = "-v"
    # Bytes the program reserves before it allocates anything (added to the run's memory),
    # and the least it starts under.
    reserved: int = 0
    least: int = 0


def runtime_of(language: Language) -> str:
    """The runtime a language runs on; sandboxes are started per runtime."""
    return "python" if language is Language.PYTHON else "node"


RUNTIMES = ("python", "node")
LANGUAGE_OF_RUNTIME = {"python": Language.PYTHON, "node": Language.JAVASCRIPT}
WRAPPER_FILE = {"python": "run.py", "node": "run.js"}


def program_for(language: Language, runtimes: Runtimes, limits: SandboxLimits) -> Program:
    """The runtime and the wrapper it starts, as seen inside the sandbox."""
    wrapper = f"{WRAPPER_DIR}/{WRAPPER_FILE[runtime_of(language)]}"
    files = (wrapper, *ACCOUNT_FILES)
    if language is Language.PYTHON:
        # -I: no environment or user site; -S: no site import (≈10 ms per run; the standard
        # library is all a function gets); -B: /usr is read-only anyway.
        return Program((runtimes.python, "-I", "-S", "-B", wrapper), files, None, "-v")
    # V8 must fail cleanly ("heap out of memory") before the cgroup's OOM killer (or, without
    # one, RLIMIT_DATA) steps in. Buffers, ArrayBuffers, WebAssembly memories and worker
    # threads live outside that heap: only the cgroup or RLIMIT_DATA holds them.
    heap_mib = max(16, limits.memory_mib * 3 // 4)
    argv = (runtimes.node, f"--max-old-space-size={heap_mib}", wrapper)
    return Program(argv, files, None, "-d", least=NODE_MIN_DATA)


def esbuild_program(esbuild: str, flags: Sequence[str]) -> Program:
    """esbuild reading TypeScript on stdin (Go: RLIMIT_DATA caps it where RLIMIT_AS cannot)."""
    return Program(tuple(flags), executable=esbuild, memory_rlimit="-d", reserved=GO_RUNTIME_DATA)


@attrs.frozen
class Descriptors:
    """The numbers, in the sandbox's launcher, of what a sandbox is given by descriptor."""

    files: tuple[int, ...] = ()  # one per ``Program.files``
    executable: int | None = None
    seccomp: int | None = None


def bwrap_argv(
    program: Program,
    given: Descriptors,
    *,
    limits: SandboxLimits,
    bwrap: str = "/usr/bin/bwrap",
    inner_processes: int | None = None,
    shell: str = "/bin/dash",
) -> list[str]:
    """The bubblewrap command line: every namespace unshared (so no network at all), uid 65534
    with no capabilities, an empty environment, read-only /usr, /proc read-only and no /sys, a
    fresh size-capped tmpfs for /tmp and the home directory, a read-only root and /dev (device
    nodes still work), the program's files by content and the seccomp filter.

    ``inner_processes``: RLIMIT_NPROC set inside the sandbox, by a shell that then execs the
    program (used where no pids cgroup exists). The kernel counts RLIMIT_NPROC per user *and
    user namespace* (and checks each level up against the limit its creator had): inside,
    uid 65534 of this sandbox's own namespace has only this run's tasks, so the limit holds
    per run, while the launcher's larger one still bounds all sandboxes of the host user."""
    if len(given.files) != len(program.files) or (
        (program.executable is None) != (given.executable is None)
    ):
        raise ValueError("one descriptor for each file and for the executable")
    tmpfs = str(limits.tmpfs_bytes)
    files = [
        a
        for fd, dest in zip(given.files, program.files, strict=True)
        for a in ("--ro-bind-data", str(fd), dest)
    ]
    seccomp = ["--seccomp", str(given.seccomp)] if given.seccomp is not None else []
    command = [f"/proc/self/fd/{given.executable}"] if given.executable is not None else []
    if inner_processes is not None:
        cap = f'ulimit -p {inner_processes} || exit {LAUNCH_FAILED}\nexec "$@"'
        command = [shell, "-c", cap, "sandbox", *command]
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
        # All of /proc, sysctls included: nothing in it is the code's to write.
        "--remount-ro", "/proc",
        "--dev", "/dev",
        "--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp",
        "--perms", "0700", "--size", tmpfs, "--tmpfs", HOME,
        *files,
        "--remount-ro", "/",
        "--remount-ro", "/dev",
        "--chdir", HOME,
        "--clearenv",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "HOME", HOME,
        "--setenv", "LANG", "C.UTF-8",
        *seccomp,
        "--",
        *command,
        *program.argv,
    ]  # fmt: skip


def drop_argv(user: HostUser | None, setpriv: str) -> list[str]:
    """The switch to the sandbox's host user (nothing when cairn cannot switch: it is then not
    root, and the sandbox runs as cairn's own user). No supplementary groups, and no way back
    up through a set-uid program."""
    if user is None:
        return []
    return [
        setpriv,
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        "--clear-groups",
        "--no-new-privs",
        "--",
    ]


def rlimits(
    program: Program,
    limits: SandboxLimits,
    *,
    memory_cgroup: bool,
) -> list[Rlimit]:
    """The rlimits the launcher sets for every process of a run. Memory comes from the cgroup
    when there is one; without, from the program's memory rlimit per process (the supervisor
    in ``supervise.py`` adds up the run's processes). Processes are never capped here: the
    kernel would count every task of the host user against that cap (other sandboxes, and
    cairn's own threads when they share its uid), so one run could starve the others; the
    per-run cap is set inside the sandbox instead (see ``bwrap_argv``). The CPU limit is
    soft: SIGXCPU ends the process with "CPU time limit exceeded"; the hard limit a second
    later kills one that ignores it."""
    out = [
        Rlimit("-c", 0),
        Rlimit("-t", limits.cpu_seconds, limits.cpu_seconds + 1),
        Rlimit("-f", max(1, limits.tmpfs_bytes // 512)),  # dash counts 512-byte blocks
        Rlimit("-n", limits.open_files),
    ]
    if not memory_cgroup:
        memory = max(limits.memory_bytes + program.reserved, program.least)
        out.append(Rlimit(program.memory_rlimit, memory // 1024))  # KiB
    return out


def launcher_script(cgroup_procs: Sequence[str], limits: Sequence[Rlimit]) -> str:
    """The dash script that enters the cgroups, sets the rlimits and execs its arguments.
    Only our own paths and numbers go in; never user input."""
    lines = [f"echo $$ > {shlex.quote(path)} || exit {LAUNCH_FAILED}" for path in cgroup_procs]
    for limit in limits:
        if limit.hard is None:
            lines.append(f"ulimit {limit.flag} {limit.value} || exit {LAUNCH_FAILED}")
        else:
            # The soft limit first: a hard limit below the current soft one is refused.
            lines.append(f"ulimit -S {limit.flag} {limit.value} || exit {LAUNCH_FAILED}")
            lines.append(f"ulimit -H {limit.flag} {limit.hard} || exit {LAUNCH_FAILED}")
    # dash exports PWD, which would show the server's working directory through /proc/1.
    lines.append("unset PWD OLDPWD")
    lines.append('exec "$@"')
    return "\n".join(lines)


def sandbox_argv(
    program: Program,
    runtimes: Runtimes,
    limits: SandboxLimits,
    *,
    user: HostUser | None,
    given: Descriptors,
    cgroup_procs: Sequence[str],
    memory_cgroup: bool,
    pids_cgroup: bool,
) -> list[str]:
    """The whole command line of one sandbox running ``program``."""
    inner = bwrap_argv(
        program,
        given,
        limits=limits,
        bwrap=runtimes.bwrap,
        # The outer bwrap is the run's too, but counts only in the host user's tally.
        inner_processes=None if pids_cgroup else limits.processes - 1,
        shell=runtimes.shell,
    )
    limit_lines = rlimits(program, limits, memory_cgroup=memory_cgroup)
    launcher = launcher_script(cgroup_procs, limit_lines)
    drop = drop_argv(user, runtimes.setpriv)
    return [runtimes.shell, "-c", launcher, "cairn-sandbox", *drop, *inner]
