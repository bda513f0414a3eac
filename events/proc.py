"""The running processes' command lines, read from /proc: how cairn finds a server it (or a
crashed run of it) left behind, which has no pid file it could trust."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def command_lines(proc_root: Path = Path("/proc")) -> Iterator[tuple[int, list[str]]]:
    """Each process's pid and arguments (empty ones dropped); a process that ends while it is
    read, or whose command line cannot be read, is passed over."""
    for entry in proc_root.iterdir() if proc_root.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        yield int(entry.name), [a.decode(errors="replace") for a in argv if a]
