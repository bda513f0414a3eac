"""The CLI adapter's parsers of what `qm`, `pvesh` and `pvesm` print (private to actors/vm/cli).

Pure functions over text, pinned by golden tests. They never trust the output to be complete:
a VM that pvestatd has not yet seen is listed with `status: unknown` and no name or sizes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from actors.vm.pve import NodeResource, VmResource, node_resources, vm_resources


class OutputError(ValueError):
    """Output that does not have the shape the command documents."""


@attrs.frozen
class CommandResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def error_text(self) -> str:
        """The message a failed command gave: stderr lines joined, else stdout's last line."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        if lines:
            return "; ".join(lines)
        out = [ln.strip() for ln in self.stdout.splitlines() if ln.strip()]
        return out[-1] if out else f"exit status {self.rc}"


def parse_status(stdout: str) -> str:
    """`qm status` prints `status: <state>`."""
    for line in stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "status":
            return value.strip()
    raise OutputError(f"no status line in {stdout!r}")


@attrs.frozen
class StorageRow:
    name: str
    type: str
    status: str
    total_kib: int
    used_kib: int
    available_kib: int

    @property
    def usable(self) -> bool:
        return self.status == "active"


def parse_pvesm_status(stdout: str) -> list[StorageRow]:
    """`pvesm status`: a header (old or `(KiB)` variant) then whitespace-separated rows."""
    rows: list[StorageRow] = []
    for line in stdout.splitlines():
        parts = line.split()
        if not parts or parts[0] == "Name":
            continue
        if len(parts) < 6:
            raise OutputError(f"short pvesm row {line!r}")
        try:
            total, used, avail = (int(p) for p in parts[3:6])
        except ValueError:
            raise OutputError(f"bad numbers in pvesm row {line!r}") from None
        rows.append(StorageRow(parts[0], parts[1], parts[2], total, used, avail))
    return rows


_IMPORTED_NEW = re.compile(r"^unused\d+: successfully imported disk '([^']+)'\s*$")
_IMPORTED_OLD = re.compile(r"^Successfully imported disk as 'unused\d+:([^']+)'\s*$")


def parse_imported_volid(stdout: str) -> str:
    """The volume `qm disk import` created, from its last line (new or pre-8.2.7 wording).

    Taking the volid from the output, not building `<storage>:vm-<id>-disk-0`, is what makes
    dir/nfs storage (`local:120/vm-120-disk-0.raw`) work.
    """
    for line in reversed(stdout.splitlines()):
        for pattern in (_IMPORTED_NEW, _IMPORTED_OLD):
            match = pattern.match(line.strip())
            if match:
                return match.group(1)
    raise OutputError("qm disk import did not report the imported volume")


def resize_error(result: CommandResult) -> str | None:
    """Why a `qm disk resize` failed, or None if it worked.

    The resize runs as a worker whose failure is printed but, since PVE 8, exits 0; so stderr
    is read as well as the exit status. lvm's `WARNING:` lines are not failures.
    """
    lines = [
        ln.strip()
        for ln in result.stderr.splitlines()
        if ln.strip() and not ln.strip().upper().startswith("WARNING")
    ]
    if result.rc != 0:
        return "; ".join(lines) or f"exit status {result.rc}"
    return "; ".join(lines) or None


def parse_config(stdout: str) -> dict[str, str]:
    """`qm config`: sorted `key: value` lines (a `[PENDING]` section, if any, is skipped)."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        if line.startswith("["):
            break
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


_SIZE = re.compile(r"(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)(?:,|$)")
_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def disk_size_bytes(drive: str) -> int | None:
    """`size=` of a drive string like `local-lvm:vm-120-disk-0,size=32G`."""
    match = _SIZE.search(drive)
    if not match:
        return None
    return int(float(match.group(1)) * _UNIT[match.group(2)])


def _load_array(stdout: str) -> list[Any]:
    try:
        data = json.loads(stdout or "[]")
    except json.JSONDecodeError as exc:
        raise OutputError(f"pvesh printed no JSON: {exc}") from None
    if not isinstance(data, list):
        raise OutputError("pvesh /cluster/resources did not print an array")
    return data


def parse_vm_resources(stdout: str) -> list[VmResource]:
    """QEMU guests from `/cluster/resources --type vm`; LXC entries are not ours and skipped."""
    return vm_resources(_load_array(stdout))


def parse_node_resources(stdout: str) -> list[NodeResource]:
    return node_resources(_load_array(stdout))


def parse_node_cpu_flags(stdout: str) -> str:
    try:
        data = json.loads(stdout)
        flags = data["cpuinfo"]["flags"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise OutputError("no cpuinfo.flags in node status") from None
    if not isinstance(flags, str):
        raise OutputError("cpuinfo.flags is not a string")
    return flags
