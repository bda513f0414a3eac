"""`cairn vm install`'s options that shape the guest (docs/vm.md, "Shaping the guest"), and
`cairn vm set`'s for tags, notes and the NIC: the options as the request body's fields. The
service checks every value; here only what the command line itself spells (`--disk
32G@local-lvm`, a script file) is read."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from gateway.cli.client import USAGE, CliError


def add_install_options(install: argparse.ArgumentParser) -> None:
    shape = install.add_argument_group("shaping the guest (docs/vm.md)")
    shape.add_argument(
        "--script-file",
        metavar="FILE",
        help="a shell script run as root after the init script (- for stdin)",
    )
    shape.add_argument(
        "--keep-on-script-failure",
        action="store_true",
        help="keep the VM when the script fails (the install goes on)",
    )
    shape.add_argument(
        "--package", action="append", metavar="NAME", help="a package to install (repeat for more)"
    )
    shape.add_argument("--bridge", help="the NIC's bridge (default: VM_BRIDGE)")
    shape.add_argument("--vlan", type=int, help="the NIC's VLAN tag (1-4094)")
    shape.add_argument("--mtu", type=int, help="the NIC's MTU")
    shape.add_argument(
        "--nameserver", action="append", metavar="ADDRESS", help="a DNS server (repeat for up to 3)"
    )
    shape.add_argument(
        "--searchdomain",
        action="append",
        metavar="DOMAIN",
        help="a DNS search domain (repeat for up to 6)",
    )
    shape.add_argument("--tag", action="append", metavar="TAG", help="a Proxmox tag (repeat)")
    shape.add_argument("--description", metavar="TEXT", help="the VM's notes")


def disks(given: str | list[str] | None) -> tuple[str | None, list[dict[str, str]]]:
    """`--disk` values: the boot disk's size (`32G`) and extra disks (`32G@local-lvm`)."""
    values = [given] if isinstance(given, str) else list(given or [])
    boot = [v for v in values if "@" not in v]
    if len(boot) > 1:
        raise CliError(USAGE, "--disk: one size for the boot disk; extra disks are SIZE@STORAGE")
    extra = []
    for value in values:
        if "@" in value:
            size, _, storage = value.partition("@")
            if not size or not storage:
                raise CliError(
                    USAGE, f"--disk {value}: an extra disk is SIZE@STORAGE, like 32G@local-lvm"
                )
            extra.append({"size": size, "storage": storage})
    return (boot[0] if boot else None), extra


def install_fields(args: Any, read: Callable[[str, str], str]) -> dict[str, Any]:
    """The shaping fields of an install body from the options; `read(path, what)` reads a
    file the way the other options' files are read."""
    body: dict[str, Any] = {}
    script_file = getattr(args, "script_file", None)
    if script_file is not None:
        body["script"] = read(script_file, "the script")
        if getattr(args, "keep_on_script_failure", False):
            body["script_failure"] = "keep"
    single = {"packages": "package", "tags": "tag"}
    for field, option in single.items():
        if getattr(args, option, None):
            body[field] = list(getattr(args, option))
    for field in ("bridge", "vlan", "mtu", "description"):
        if getattr(args, field, None) is not None:
            body[field] = getattr(args, field)
    for field in ("nameserver", "searchdomain"):
        if getattr(args, field, None):
            body[field] = " ".join(getattr(args, field))
    _, extra = disks(getattr(args, "disk", None))
    if extra:
        body["disks"] = extra
    return body


def add_set_options(setting: argparse.ArgumentParser) -> None:
    setting.add_argument(
        "--tag", action="append", metavar="TAG", help="the VM's tags become these (repeat)"
    )
    setting.add_argument("--no-tags", action="store_true", help="leave only the OS's tag")
    setting.add_argument("--description", metavar="TEXT", help="the VM's notes ('' clears)")
    setting.add_argument("--bridge", help="move the NIC to this bridge (VM stopped)")
    setting.add_argument("--vlan", type=int, help="the NIC's VLAN tag, 0 for none (VM stopped)")
    setting.add_argument("--mtu", type=int, help="the NIC's MTU, 0 for the bridge's (VM stopped)")


def set_changes(args: Any) -> list[tuple[str, dict[str, Any], str]]:
    """(route under set/, body, what to say once done) of each change `vm set` was given."""
    out: list[tuple[str, dict[str, Any], str]] = []
    tags = [] if getattr(args, "no_tags", False) else getattr(args, "tag", None)
    if tags is not None:
        out.append(("tags", {"tags": list(tags)}, f"tags set to {', '.join(tags) or 'none'}"))
    if getattr(args, "description", None) is not None:
        out.append(("description", {"description": args.description}, "notes set"))
    network: dict[str, Any] = {}
    if getattr(args, "bridge", None) is not None:
        network["bridge"] = args.bridge
    for field in ("vlan", "mtu"):
        value = getattr(args, field, None)
        if value is not None:
            network[field] = value or None  # 0: remove it
    if network:
        said = ", ".join(f"{k} {v if v is not None else 'removed'}" for k, v in network.items())
        out.append(("network", network, f"network set: {said}"))
    return out
