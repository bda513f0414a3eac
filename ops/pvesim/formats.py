"""Output formats of the real `qm`, `pvesh` and `pvesm` (pure functions).

Every function here reproduces a format the real commands print, byte for byte, so a parser
tested against the simulator reads a real node's output alike (the tests hold the samples).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_UNITS = (("T", TIB), ("G", GIB), ("M", MIB), ("K", KIB))


def format_size(size: int) -> str:
    """`size=` of a drive: the largest unit that divides exactly (PC JSONSchema::format_size)."""
    for suffix, unit in _UNITS:
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")


def parse_size(text: str) -> int | None:
    """A drive `size=` or a resize amount without the `+` (a unit-less number is bytes)."""
    m = _SIZE_RE.match(text)
    if not m:
        return None
    unit = dict(_UNITS).get(m.group(2), 1)
    return int(float(m.group(1)) * unit)


def render_bytes(size: float) -> str:
    """PC Format::render_bytes: one decimal, binary units."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    value = float(size)
    idx = 0
    while value >= 1024 and idx < len(units) - 1:
        value /= 1024
        idx += 1
    return f"{value:.1f} {units[idx]}"


def uri_escape(text: str) -> str:
    """Perl URI::Escape::uri_escape: everything except A-Za-z0-9-._~ is percent-encoded."""
    return quote(text, safe="-._~")


def format_qm_status(status: str) -> str:
    return f"status: {status}\n"


def format_key_values(values: Mapping[str, Any]) -> str:
    """`qm status --verbose` and `qm config`: `key: value`, keys sorted ASCII."""
    return "".join(f"{key}: {values[key]}\n" for key in sorted(values))


def encode_text(text: str) -> str:
    """PVE::Tools::encode_text: control and high-bit characters and `:` percent-encoded."""
    safe = "".join(chr(c) for c in range(0x20, 0x7F) if c != 0x3A)
    return quote(text.encode(), safe=safe)


def format_qm_config(config: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in config.items() if k != "digest"}
    if "cipassword" in shown:
        shown["cipassword"] = "**********"
    if "description" in shown:
        shown["description"] = encode_text(str(shown["description"]))
    return format_key_values(shown)


def format_qm_list(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows need vmid, name, status, maxmem (bytes), maxdisk (bytes), pid. No rows: nothing."""
    ordered = sorted(rows, key=lambda r: int(r["vmid"]))
    if not ordered:
        return ""
    out = [
        f"{'VMID':>10} {'NAME':<20} {'STATUS':<10} {'MEM(MB)':<10} {'BOOTDISK(GB)':>12} "
        f"{'PID':<10}\n"
    ]
    for r in ordered:
        mem = int(r["maxmem"]) // MIB
        disk = int(r["maxdisk"]) / GIB
        out.append(
            f"{r['vmid']:>10} {r['name']:<20} {r['status']:<10} {mem:<10} {disk:>12.2f} "
            f"{r['pid']:<10}\n"
        )
    return "".join(out)


def format_update_line(vmid: int, params: Mapping[str, Any]) -> str:
    """First line of `qm set`: params sorted, cipassword hidden."""
    parts = []
    for key in sorted(params):
        value = "<hidden>" if key == "cipassword" else params[key]
        parts.append(f"-{key} {value}")
    return f"update VM {vmid}: {' '.join(parts)}\n"


def format_param_error(errors: Mapping[str, str], usage: str) -> str:
    lines = ["400 Parameter verification failed."]
    lines += [f"{key}: {errors[key]}" for key in sorted(errors)]
    lines.append(usage)
    return "\n".join(lines) + "\n"


def format_json(value: Any) -> str:
    """pvesh `--output-format json`: one line of canonical (sorted, compact) JSON."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n"


def format_json_pretty(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=3) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def format_text_table(value: Any) -> str:
    """pvesh's default `text` output: a bordered table (CLIFormatter, UTF-8 borders)."""
    if isinstance(value, list):
        rows = [r for r in value if isinstance(r, dict)]
        if not rows:
            return "".join(f"{_cell(v)}\n" for v in value)
        columns = sorted({k for r in rows for k in r})
        table = [[_cell(r.get(c, "")) for c in columns] for r in rows]
        header = columns
    elif isinstance(value, dict):
        header = ["key", "value"]
        table = [[k, _cell(value[k])] for k in sorted(value)]
    else:
        return f"{_cell(value)}\n"
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(header)]

    def line(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right + "\n"

    def row(cells: Sequence[str]) -> str:
        return "│" + "│".join(f" {c:<{w}} " for c, w in zip(cells, widths, strict=True)) + "│\n"

    out = line("┌", "┬", "┐", "─") + row(header) + line("╞", "╪", "╡", "═")
    for i, cells in enumerate(table):
        out += row(cells)
        if i < len(table) - 1:
            out += line("├", "┼", "┤", "─")
    return out + line("└", "┴", "┘", "─")


def format_pvesm_status(rows: Iterable[Mapping[str, Any]], *, kib_header: bool = False) -> str:
    """Rows need name, type, status, total, used, avail (KiB). Sorted by storage id. The Name
    column is the longest id plus one wide, no floor (ST CLI/pvesm.pm $print_status); the
    header is PVE 8's unless `kib_header` asks for libpve-storage-perl >= 9.0.14's."""
    ordered = sorted(rows, key=lambda r: str(r["name"]))
    width = max((len(str(r["name"])) for r in ordered), default=0) + 1
    if kib_header:
        heads = ("Total (KiB)", "Used (KiB)", "Available (KiB)")
    else:
        heads = ("Total", "Used", "Available")
    out = [
        f"{'Name':<{width}} {'Type':>10} {'Status':>10} {heads[0]:>15} {heads[1]:>15} "
        f"{heads[2]:>15} {'%':>8}\n"
    ]
    for r in ordered:
        if r["status"] == "disabled":
            pct = "N/A"
        elif int(r["total"]):
            pct = f"{int(r['used']) * 100 / int(r['total']):.2f}%"
        else:
            pct = "0.00%"
        out.append(
            f"{r['name']:<{width}} {r['type']:>10} {r['status']:>10} {int(r['total']):>15} "
            f"{int(r['used']):>15} {int(r['avail']):>15} {pct:>8}\n"
        )
    return "".join(out)


def format_task_line(timestamp: str, message: str, *, error: bool = False) -> str:
    """Migration task log line (GC AbstractMigrate $msg2text)."""
    return f"{timestamp} {'ERROR: ' if error else ''}{message}\n"


def format_duration(seconds: float) -> str:
    total = int(seconds)
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


def format_transferred(done: int, total: int, percent: float) -> str:
    return f"transferred {render_bytes(done)} of {render_bytes(total)} ({percent:.2f}%)\n"


def format_dd_copied(copied: int, seconds: float) -> str:
    """GNU dd's progress line: `<n> bytes (<SI>, <IEC>) copied, <s> s, <rate>`."""

    def si(n: float) -> str:
        for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if n >= factor:
                return f"{n / factor:.1f} {unit}" if n / factor < 10 else f"{n / factor:.0f} {unit}"
        return f"{n:.0f} B"

    def iec(n: float) -> str:
        for unit, factor in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
            if n >= factor:
                return f"{n / factor:.1f} {unit}" if n / factor < 10 else f"{n / factor:.0f} {unit}"
        return f"{n:.0f} B"

    rate = copied / seconds if seconds > 0 else copied
    return f"{copied} bytes ({si(copied)}, {iec(copied)}) copied, {seconds:.4g} s, {si(rate)}/s\n"


def format_zfs_size(size: int) -> str:
    """`zfs send -v` sizes (zfs_nicenum): 1024-based, three significant digits, `2.31G`."""
    value = float(size)
    suffixes = ["", "K", "M", "G", "T", "P"]
    i = 0
    while value >= 1024 and i < len(suffixes) - 1:
        value /= 1024
        i += 1
    if i == 0:
        return str(size)
    for decimals in (2, 1, 0):
        text = f"{value:.{decimals}f}"
        if len(text.replace(".", "")) <= 3 or decimals == 0:
            return text + suffixes[i]
    return f"{value:.0f}{suffixes[i]}"  # pragma: no cover - the loop always returns
