"""The seccomp filter every sandboxed process runs under (bwrap ``--seccomp``), built once per
process with libseccomp (through pyseccomp) and handed to each sandbox by content.

Everything not listed is allowed: the namespaces, the empty capability set and the unprivileged
host user are the main walls; this list takes away the kernel interfaces that have been the
way through such walls, or that reach outside the sandbox's network namespace. A denied call
fails with EPERM ("Operation not permitted"), never a kill, so the code sees a clear error.
docs/functions.md explains each entry.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import Any

# Syscalls denied whatever their arguments, by why.
DENIED: dict[str, tuple[str, ...]] = {
    # Large, young kernel surfaces behind many privilege escalations.
    "io_uring": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "userfaultfd": ("userfaultfd",),
    "bpf": ("bpf",),
    "perf_event_open": ("perf_event_open",),
    # Reading or writing other processes' memory.
    "tracing": ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"),
    # The kernel keyring is not namespaced.
    "keyring": ("keyctl", "add_key", "request_key"),
    # Loading kernels and modules.
    "kernel": (
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
    ),
    # Mounts and namespaces: the sandbox's are fixed when the code starts.
    "mounts": (
        "mount",
        "umount2",
        "pivot_root",
        "setns",
        "unshare",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
    ),
    # File handles bypass the mount tree ("shocker").
    "handles": ("name_to_handle_at", "open_by_handle_at"),
}

# clone() flags that make a namespace: such a clone is denied (threads and processes are not).
CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}
AF_UNIX = 1
# personality(0xffffffff) only reads the persona; every other value changes it (turning off
# address-space randomisation, for one).
PERSONALITY_QUERY = 0xFFFFFFFF


class SeccompUnavailable(Exception):
    pass


def _libseccomp() -> Any:
    try:
        import pyseccomp
    except (ImportError, RuntimeError) as exc:  # RuntimeError: libseccomp.so.2 not found
        raise SeccompUnavailable(
            f"the sandbox's seccomp filter needs libseccomp ({exc}): run ops/setup"
        ) from exc
    return pyseccomp


@functools.cache
def program() -> bytes:
    """The filter as the BPF program bwrap loads. Built once per process (≈1 ms)."""
    sc = _libseccomp()
    eperm = sc.ERRNO(errno.EPERM)
    rules = sc.SyscallFilter(sc.ALLOW)
    # Another ABI on the same machine (i386 or x32 calls on x86_64) gets EPERM for every call:
    # a rule written for one ABI's numbers must not be skipped through another's.
    rules.set_attr(sc.Attr.ACT_BADARCH, eperm)
    for name in denied_syscalls():
        rules.add_rule(eperm, name)
    for name in ("socket", "socketpair"):
        rules.add_rule(eperm, name, sc.Arg(0, sc.NE, AF_UNIX))
    rules.add_rule(eperm, "personality", sc.Arg(0, sc.NE, PERSONALITY_QUERY))
    for flag in CLONE_NEW.values():
        rules.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 takes its flags in memory, out of a filter's reach: ENOSYS makes the C library
    # fall back to clone, whose flags the rules above see.
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    fd = os.memfd_create("cairn-seccomp")
    try:
        with open(fd, "wb", closefd=False) as sink:
            rules.export_bpf(sink)
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


def denied_syscalls() -> list[str]:
    """Every unconditionally denied syscall that exists on this machine's architecture (some
    exist only on some: ``umount2`` is the only umount on aarch64)."""
    sc = _libseccomp()
    known = []
    for group in DENIED.values():
        for name in group:
            if sc.resolve_syscall(sc.Arch.NATIVE, name) >= 0:
                known.append(name)
    return known
