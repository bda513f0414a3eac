"""What an install does on a new guest beyond cairn's init script, as the caller asked
(actors/vm/shape.py): the packages, installed by the init script itself, and the caller's own
script, run as root after it over the same pinned SSH channel.

The script travels as the init script does: on the shell's stdin, never on a command line, and
it is not kept anywhere. Its output is streamed line by line into the install's records, which
are stored, so it is capped (`OUTPUT_MAX` bytes, long lines cut).
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import asyncssh
import attrs

from actors.vm.guest import GuestError, _options, changed_key
from actors.vm.pve import Hardware
from actors.vm.shape import GuestShape, notes

OUTPUT_MAX = 65536  # bytes of a script's output shown in the install's records
LINE_MAX = 500  # characters of one line shown
SCRIPT_TIMEOUT = 3600.0  # seconds a script may run


def shaped(hardware: Hardware, shape: GuestShape) -> Hardware:
    """The create's hardware with what the caller asked for: the NIC's bridge, VLAN and MTU,
    DNS, tags, extra disks, and the notes above cairn's mark."""
    return attrs.evolve(
        hardware,
        bridge=shape.bridge or hardware.bridge,
        vlan=shape.vlan,
        mtu=shape.mtu,
        tags=shape.tags,
        nameserver=shape.nameserver,
        searchdomain=shape.searchdomain,
        disks=shape.disks,
        description=notes(shape.description, hardware.description),
    )


def with_packages(script: str, packages: Sequence[str]) -> str:
    """The init script, ending with the caller's packages installed by its own `install_pkg`
    (apt-get or dnf, waiting for a package manager that holds the lock); its `set -e` fails
    the script, and so the install, if one cannot be installed."""
    if not packages:
        return script
    names = " ".join(shlex.quote(p) for p in packages)
    return f'{script.rstrip()}\n\nlog "installing the packages asked for: {names}"\n' \
        f"install_pkg {names}\nlog \"packages installed\"\n"  # fmt: skip


class Output:
    """A script's output as stream notes, one per line, until `OUTPUT_MAX` bytes were shown."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self._note = note
        self._shown = 0
        self.cut = False

    def line(self, text: str) -> None:
        if self.cut:
            return
        size = len(text.encode())
        if self._shown + size > OUTPUT_MAX:
            self.cut = True
            self._note(f"script output beyond {OUTPUT_MAX} bytes is not shown")
            return
        self._shown += size
        shown = text if len(text) <= LINE_MAX else text[:LINE_MAX] + " [...]"
        self._note(f"script: {shown}")


async def _pump(stream: asyncssh.SSHReader[str], out: Output) -> None:
    async for line in stream:
        out.line(line.rstrip("\n"))


async def run_script(
    ip: str,
    *,
    user: str,
    key: Path,
    port: int,
    host_key: asyncssh.SSHKey,
    script: str,
    note: Callable[[str], None],
    timeout: float = SCRIPT_TIMEOUT,
) -> int:
    """Run the caller's script as root on the guest showing `host_key`; its exit status. Each
    line it prints (stdout and stderr) becomes a note as it comes."""
    out = Output(note)
    try:
        async with (
            asyncio.timeout(timeout),
            asyncssh.connect(ip, **_options(user, key, port, 15.0, host_key)) as conn,
        ):
            process = await conn.create_process("sudo -n bash -s")
            process.stdin.write(script if script.endswith("\n") else script + "\n")
            process.stdin.write_eof()
            await asyncio.gather(_pump(process.stdout, out), _pump(process.stderr, out))
            done = await process.wait(check=False)
    except asyncssh.HostKeyNotVerifiable:
        raise changed_key(ip, host_key) from None
    except TimeoutError:
        raise GuestError(f"the script did not end within {timeout:g} s") from None
    except (OSError, asyncssh.Error) as exc:
        raise GuestError(f"SSH to {user}@{ip} failed: {exc}") from None
    status = done.exit_status
    return 255 if status is None else status
