"""`cairn vm list|show|install|start|stop|shutdown|reboot|destroy|set|task|snapshot|change`: the VM
service over HTTP (docs/vm.md has the routes; docs/cli.md this command line).

Installs, starts, reboots and migrations (``set --node``) print their stages as the service
streams them, a line per record under the stage's name, and end with the task's outcome: exit 0
when its last record is a success, 1 when it failed (its message on stderr), 3 when the
connection ended first (the task goes on in cairn: ``cairn vm task ID`` follows it again).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gateway.cli import vm_shape
from gateway.cli.client import (
    DENIED,
    INTERRUPTED,
    REFUSED,
    UNREACHABLE,
    USAGE,
    CliError,
    Event,
    Target,
    call,
    stream,
)
from gateway.cli.common import Io, add_command, clean, listing, size_gb, size_mb, table

SERVICE = "vm"


def _vm_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not a VM id: {text!r}") from None
    if not 1 <= value <= 999_999_999:
        raise ValueError(f"not a VM id: {text!r}")
    return value


_vm_id.__name__ = "VM id"  # argparse names the type in its message


# -- reading ----------------------------------------------------------------------------------


LIST_COLUMNS = ("VMID", "NAME", "STATE", "NODE", "IP", "OS", "CPU", "MEMORY", "DISK", "CAIRN")


def list_table(body: dict[str, Any]) -> str:
    rows = [
        (
            vm.get("vmid"),
            vm.get("name"),
            vm.get("state") or ("running" if vm.get("running") else "stopped"),
            vm.get("node"),
            vm.get("ip"),
            vm.get("os"),
            vm.get("cpu"),
            size_mb(vm.get("memory")),
            size_gb(vm.get("disk")),
            "yes" if vm.get("created_by_cairn") else "no",
        )
        for vm in body.get("list") or []
    ]
    lines = [table(LIST_COLUMNS, rows)] if rows else ["no VMs"]
    count = len(rows)
    where = "simulated cluster" if body.get("simulated") else "cluster"
    lines.append(f"{count} VM{'' if count == 1 else 's'} ({where})")
    return "\n".join(lines)


def cmd_list(args: Any, t: Target, io: Io) -> int:
    body = call(t, "GET", "/vm/list").json()
    io.show(body, list_table)
    return 0


SHOW_FIELDS = (
    "vmid", "name", "state", "node", "ip", "user", "os", "version", "cpu", "memory",
    "memory_used", "disk", "created_by_cairn", "mark", "created_at", "created_by", "task",
)  # fmt: skip


# Sizes as the list and the console show them: the service counts memory in MB (MiB, as
# Proxmox does) and disks in GB (Proxmox's G, which is GiB).
SHOW_SIZES = {"memory": size_mb, "memory_used": size_mb, "disk": size_gb}


def show_text(vm: dict[str, Any]) -> str:
    width = max(len(k) for k in SHOW_FIELDS)
    lines = []
    for key in SHOW_FIELDS:
        if key in vm:
            value = vm[key]
            if key in SHOW_SIZES and isinstance(value, int | float):
                value = SHOW_SIZES[key](value)
            shown = "-" if value is None else ("yes" if value is True else value)
            shown = "no" if value is False else shown
            lines.append(f"{key.ljust(width)}  {clean(shown)}")
    last = vm.get("last_task")
    if isinstance(last, dict):
        outcome = {True: "ok", False: "failed", None: "running"}.get(last.get("ok"), "?")
        text = f"{last.get('command')} {outcome}"
        if last.get("error"):
            text += f": {last['error']}"
        if last.get("by"):
            text += f" (by {last['by']})"
        lines.append(f"{'last_task'.ljust(width)}  {clean(text)}")
    return "\n".join(lines)


def cmd_show(args: Any, t: Target, io: Io) -> int:
    body = call(t, "GET", f"/vm/{args.id}").json()
    io.show(body, show_text)
    return 0


# -- tasks ------------------------------------------------------------------------------------


def follow(events: Any, io: Io, what: str) -> dict[str, Any]:
    """Print a task's records as they arrive; the outcome: ``records``, ``vm_id``, ``ip``.
    A failed task raises CliError(REFUSED), a stream cut short CliError(UNREACHABLE)."""
    records: list[dict[str, Any]] = []
    last_step: str | None = None
    closed = False
    live = io.live
    for ev in events:
        assert isinstance(ev, Event)
        if ev.event == "close":
            closed = True
            break
        data = ev.data
        if not isinstance(data, dict):
            continue
        if ev.event == "stopping":  # cairn itself is stopping
            raise CliError(UNREACHABLE, str(data.get("message") or "cairn is stopping"))
        if ev.event == "revoked":  # the token was revoked while the stream was open
            raise CliError(DENIED, str(data.get("message") or "the token was revoked"))
        records.append(data)
        if live is not None:
            step = str(data.get("step", ""))
            if step != last_step:
                print(clean(step), file=live, flush=True)
                last_step = step
            print(f"  {clean(data.get('message', ''))}", file=live, flush=True)
    last = records[-1] if records else {}
    if not closed or last.get("status") not in ("success", "error"):
        raise CliError(
            UNREACHABLE,
            f"the stream of the {what} ended before the task did; it goes on in cairn"
            + (f": follow it with `cairn vm task {last['vm_id']}`" if "vm_id" in last else ""),
        )
    if last.get("status") == "error":
        raise CliError(REFUSED, f"{what} failed: {last.get('message', '')}")
    outcome: dict[str, Any] = {"ok": True, "records": records}
    for key in ("vm_id", "ip"):
        if key in last:
            outcome[key] = last[key]
    return outcome


def run_task(t: Target, io: Io, path: str, body: Any, what: str) -> dict[str, Any]:
    """Start (or with no body, re-attach to) a task and follow it: its outcome."""
    with stream(t, "GET" if body is None else "POST", path, body) as answer:
        if answer.events is None:  # a plain answer: the task did not start
            assert answer.plain is not None
            raise CliError(REFUSED, answer.plain.text().strip() or f"{what}: no stream")
        task = answer.headers.get("X-Task-Id")
        vm = answer.headers.get("X-VM-Id")
        if io.live is not None and vm:
            print(f"{what}: VM {clean(vm)}, task {clean(task or '?')}", file=io.live, flush=True)
        try:
            outcome = follow(answer.events, io, what)
        except CliError as exc:
            if exc.code == UNREACHABLE and vm and "cairn vm task" not in exc.message:
                exc.message += f": follow it with `cairn vm task {vm}`"
            raise
        except KeyboardInterrupt:
            again = f": follow it with `cairn vm task {vm}`" if vm else ""
            raise CliError(
                INTERRUPTED, f"interrupted; the {what} goes on in cairn{again}"
            ) from None
    outcome["task"] = task
    if vm and "vm_id" not in outcome:
        outcome["vm_id"] = int(vm) if vm.isdigit() else vm
    return outcome


def tasked(io: Io, outcome: dict[str, Any]) -> int:
    if io.json:
        io.document(outcome)
    return 0


def _read_file(path: str, what: str) -> str:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else "unreadable"
        raise CliError(USAGE, f"cannot read {what} {path}: {why}") from None
    return text


def install_body(args: Any) -> dict[str, Any]:
    """The install request from the options (pure but for the files it reads)."""
    body: dict[str, Any] = {"os": args.os, "version": args.os_version}
    for key in ("name", "id", "node", "cpu", "ram", "user"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    boot, _ = vm_shape.disks(args.disk)
    if boot is not None:
        body["disk"] = boot
    if args.pubkey is not None:
        body["pubkey"] = args.pubkey
    elif args.pubkey_file is not None:
        body["pubkey"] = _read_file(args.pubkey_file, "the public key").strip()
    if args.password_file is not None:
        lines = _read_file(args.password_file, "the password file").splitlines()
        if not lines or not lines[0]:
            raise CliError(USAGE, f"the password file {args.password_file} is empty")
        body["passwd"] = lines[0]
    return body | vm_shape.install_fields(args, _read_file)


def cmd_install(args: Any, t: Target, io: Io) -> int:
    return tasked(io, run_task(t, io, "/vm/install", install_body(args), "install"))


def cmd_task(args: Any, t: Target, io: Io) -> int:
    return tasked(io, run_task(t, io, f"/vm/{args.id}/task", None, "task"))


def cmd_streamed(action: str) -> Any:
    def handler(args: Any, t: Target, io: Io) -> int:
        return tasked(io, run_task(t, io, f"/vm/{args.id}/{action}", {}, action))

    return handler


DONE = {"stop": "stopped", "shutdown": "shut down", "destroy": "destroyed"}


def cmd_plain(action: str) -> Any:
    def handler(args: Any, t: Target, io: Io) -> int:
        answer = call(t, "POST", f"/vm/{args.id}/{action}")
        if io.json:
            io.document({"ok": True, "vm_id": args.id, "action": action})
        else:
            io.say(f"VM {args.id} {DONE[action]} ({clean(answer.text().strip())})")
        return 0

    return handler


# What each change of `vm set` prints once done, with the unit it was given in.
SET_SAYS = {
    "cpu": lambda value: f"cpu set to {value}",
    "memory": lambda value: f"memory set to {size_mb(value)}",
    "disk": lambda value: f"disk grown by {clean(value)}",
}


def cmd_set(args: Any, t: Target, io: Io) -> int:
    changes = [
        (what, value)
        for what, value in (
            ("cpu", args.cpu),
            ("memory", args.memory),
            ("disk", args.disk),
            ("node", args.node),
        )
        if value is not None
    ]
    reshaped = vm_shape.set_changes(args)
    drive = getattr(args, "drive", None)
    if drive is not None and args.disk is None:
        raise CliError(USAGE, "vm set: --drive names the disk --disk grows; give --disk too")
    if not changes and not reshaped:
        raise CliError(
            USAGE,
            "vm set: give at least one of --cpu, --memory, --disk, --node, --tag, --no-tags, "
            "--description, --bridge, --vlan, --mtu",
        )
    done: list[str] = []
    result: dict[str, Any] = {"ok": True, "vm_id": args.id, "set": {}}
    for what, value in changes:
        path = f"/vm/{args.id}/set/{what}"
        try:
            if what == "node":
                result["migration"] = run_task(t, io, path, {"node": value}, "migration")
            elif what == "disk" and drive is not None:
                call(t, "POST", path, {"disk": value, "drive": drive})
                io.say(f"VM {args.id}: disk {clean(drive)} grown by {clean(value)}")
            else:
                call(t, "POST", path, {what: value})
                io.say(f"VM {args.id}: {SET_SAYS[what](value)}")
        except CliError as exc:
            if done:
                exc.message += f" (already set: {', '.join(done)})"
            raise
        done.append(what)
        result["set"][what] = value
    for what, body, said in reshaped:
        try:
            call(t, "POST", f"/vm/{args.id}/set/{what}", body)
        except CliError as exc:
            if done:
                exc.message += f" (already set: {', '.join(done)})"
            raise
        io.say(f"VM {args.id}: {said}")
        done.append(what)
        result["set"][what] = body
    if io.json:
        io.document(result)
    return 0


# -- snapshots --------------------------------------------------------------------------------


SNAPSHOT_COLUMNS = ("NAME", "CREATED", "PARENT", "RAM", "BY", "DESCRIPTION")


def _snapshot_row(s: dict[str, Any]) -> tuple[Any, ...]:
    return (
        s.get("name"),
        s.get("created"),
        s.get("parent"),
        "yes" if s.get("vmstate") else "no",
        s.get("by"),
        str(s.get("description") or "").split("\n")[0] or None,
    )


def snapshot_table(snaps: list[dict[str, Any]]) -> str:
    return listing(SNAPSHOT_COLUMNS, snaps, _snapshot_row, "no snapshots")


def cmd_snapshot_list(args: Any, t: Target, io: Io) -> int:
    snaps = call(t, "GET", f"/vm/{args.id}/snapshots").json()
    io.show(snaps, snapshot_table)
    return 0


def cmd_snapshot_create(args: Any, t: Target, io: Io) -> int:
    body: dict[str, Any] = {"name": args.name, "vmstate": args.vmstate}
    if args.description is not None:
        body["description"] = args.description
    return tasked(io, run_task(t, io, f"/vm/{args.id}/snapshots", body, "snapshot"))


def cmd_snapshot_rollback(args: Any, t: Target, io: Io) -> int:
    path = f"/vm/{args.id}/snapshots/{quote(args.name, safe='')}/rollback"
    return tasked(io, run_task(t, io, path, {}, "rollback"))


def cmd_snapshot_delete(args: Any, t: Target, io: Io) -> int:
    answer = call(t, "DELETE", f"/vm/{args.id}/snapshots/{quote(args.name, safe='')}")
    if io.json:
        io.document({"ok": True, "vm_id": args.id, "deleted": args.name})
    else:
        io.say(
            f"VM {args.id}: snapshot {clean(args.name)} deleted ({clean(answer.text().strip())})"
        )
    return 0


def register_snapshot(sub: Any) -> None:
    snapshot = sub.add_parser("snapshot", help="list, take, roll back to and delete snapshots")
    inner = snapshot.add_subparsers(dest="snapshot_command", required=True)
    listing = add_command(inner, SERVICE, "list", cmd_snapshot_list, "a VM's snapshots")
    listing.add_argument("id", type=_vm_id)
    create = add_command(
        inner, SERVICE, "create", cmd_snapshot_create, "take a snapshot (stages shown live)"
    )
    create.add_argument("id", type=_vm_id)
    create.add_argument("name", help="a letter, then letters, digits, - or _ (2-40)")
    create.add_argument("--description", help="what the snapshot is for")
    create.add_argument("--vmstate", action="store_true", help="save the RAM of a running VM too")
    for name, handler, text in (
        ("rollback", cmd_snapshot_rollback, "go back to a snapshot (stages shown live)"),
        ("delete", cmd_snapshot_delete, "delete a snapshot"),
    ):
        parser = add_command(inner, SERVICE, name, handler, text)
        parser.add_argument("id", type=_vm_id)
        parser.add_argument("name")


# -- safe changes -----------------------------------------------------------------------------


def cmd_change(args: Any, t: Target, io: Io) -> int:
    """The change's body from the argument or a file (- for stdin), as POST /api/vm/<id>/change
    takes it; the service checks it (its 400 message is printed as it is)."""
    if (args.body is None) == (args.file is None):
        raise CliError(USAGE, "give the change as a JSON argument or with --file FILE (not both)")
    text = args.body if args.body is not None else _read_file(args.file, "the change")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(USAGE, f"the change is not JSON: {exc.msg} (line {exc.lineno})") from None
    return tasked(io, run_task(t, io, f"/vm/{args.id}/change", body, "change"))


def register_change(sub: Any) -> None:
    change = add_command(
        sub,
        SERVICE,
        "change",
        cmd_change,
        "change a running VM safely: snapshot, steps, checks; rolled back if they fail",
    )
    change.add_argument("id", type=_vm_id)
    change.add_argument(
        "body", nargs="?", help='the change as JSON: {"steps": [...], "verify": {...}}'
    )
    change.add_argument(
        "--file", metavar="FILE", help="read the change's JSON from FILE (- for stdin)"
    )


# -- templates --------------------------------------------------------------------------------


TEMPLATE_COLUMNS = ("VMID", "NODE", "OS", "VERSION", "CHECKSUM", "STATE", "CLONES")


def _template_row(r: dict[str, Any]) -> tuple[Any, ...]:
    return (
        r.get("vmid"),
        r.get("node"),
        r.get("os"),
        r.get("version"),
        str(r.get("checksum") or "")[:19],
        f"{r.get('state')}{', current' if r.get('current') else ''}",
        ", ".join(str(v) for v in r.get("clones") or []) or None,
    )


def template_table(rows: list[dict[str, Any]]) -> str:
    return listing(TEMPLATE_COLUMNS, rows, _template_row, "no templates")


def cmd_templates(args: Any, t: Target, io: Io) -> int:
    if args.prune:
        result = call(t, "POST", "/vm/templates/prune").json()
        if io.json:
            io.document(result)
            return 0
        removed = ", ".join(str(v) for v in result.get("removed") or []) or "none"
        io.say(f"removed: {removed}")
        for kept in result.get("kept") or []:
            io.say(f"kept {kept.get('vmid')}: {clean(str(kept.get('reason')))}")
        return 0
    rows = call(t, "GET", "/vm/templates").json()
    io.show(rows, template_table)
    return 0


# -- the command line -------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    vm = subparsers.add_parser(
        "vm", help="VMs over HTTP: list, show, install, start, stop, shutdown, reboot, destroy…"
    )
    sub = vm.add_subparsers(dest="vm_command", required=True)
    add_command(sub, SERVICE, "list", cmd_list, "every VM of the cluster")
    show = add_command(sub, SERVICE, "show", cmd_show, "one VM's detail")
    show.add_argument("id", type=_vm_id)

    install = add_command(sub, SERVICE, "install", cmd_install, "install a VM, stages shown live")
    install.add_argument("--os", required=True, help="debian, ubuntu or rockylinux")
    install.add_argument("--version", dest="os_version", required=True, help="e.g. 12, 24.04, 9")
    install.add_argument("--name")
    install.add_argument("--id", type=_vm_id, help="the VM id (default: the next free one)")
    install.add_argument("--node", help="the node (default: cairn chooses)")
    install.add_argument("--cpu", type=int, help="vCPUs (default 2)")
    # --memory as in `vm set`; --ram, the install body's field name, stays for old scripts.
    install.add_argument("--memory", "--ram", dest="ram", type=int, help="MB (default 2048)")
    install.add_argument(
        "--disk",
        action="append",
        help="the boot disk's size, e.g. 32G (default 16G); SIZE@STORAGE adds an extra disk "
        "(repeat for more)",
    )
    install.add_argument("--user", help="the login user (default: the image's)")
    keys = install.add_mutually_exclusive_group()
    keys.add_argument("--pubkey", help="an SSH public key (the key's text)")
    keys.add_argument("--pubkey-file", metavar="FILE", help="an SSH public key file (.pub)")
    install.add_argument(
        "--password-file",
        metavar="FILE",
        help="the user's password, first line of FILE (- for stdin); without it cairn makes "
        "one and shows it once",
    )
    vm_shape.add_install_options(install)

    for action, text in (
        ("start", "start a stopped VM (until SSH answers)"),
        ("reboot", "reboot a running VM (until SSH answers again)"),
    ):
        add_command(sub, SERVICE, action, cmd_streamed(action), text).add_argument(
            "id", type=_vm_id
        )
    for action, text in (
        ("stop", "power a VM off at once"),
        ("shutdown", "ask a VM to power down (ACPI)"),
        ("destroy", "destroy a stopped VM cairn created, with its disks"),
    ):
        add_command(sub, SERVICE, action, cmd_plain(action), text).add_argument("id", type=_vm_id)

    setting = add_command(
        sub,
        SERVICE,
        "set",
        cmd_set,
        "resize, migrate or re-network a stopped VM; tag it or note it",
    )
    setting.add_argument("id", type=_vm_id)
    setting.add_argument("--cpu", type=int, help="vCPUs (1-32)")
    setting.add_argument("--memory", type=int, help="MB (at least 512)")
    setting.add_argument("--disk", help="grow the disk by this much, e.g. 8G")
    setting.add_argument(
        "--drive",
        help="the disk --disk grows: scsi0, the boot disk (default), or scsi1... an extra disk",
    )
    setting.add_argument("--node", help="migrate to this node (stages shown live)")
    vm_shape.add_set_options(setting)

    task = add_command(sub, SERVICE, "task", cmd_task, "follow a VM's latest task again")
    task.add_argument("id", type=_vm_id)
    register_snapshot(sub)
    register_change(sub)
    templates = add_command(
        sub, SERVICE, "templates", cmd_templates, "the templates installs clone, per node"
    )
    templates.add_argument(
        "--prune",
        action="store_true",
        help="remove the templates nothing clones any more and no clone depends on",
    )
