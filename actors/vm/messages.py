"""The commands the VM actors take over NATS: built by the gateway, checked by the actor host by
the same rules as the HTTP layer (``actors/vm/requests.py``), whoever sent them.

NATS permissions keep everyone but cairn's gateways from sending these (``events/permissions.py``);
this is the wall behind that: a command that would be refused over HTTP is refused here with the
same message, so nothing the HTTP layer would not do reaches ``qm``.

An install crosses the bus with the client's body as it came (the host parses it again) less its
password, which crosses only as a SHA-512 crypt hash: what cairn gives ``qm set --cipassword``,
and nothing a reader of the bus could log in with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from actors.audit import BadBy, parse_by
from actors.vm.change_request import parse_change
from actors.vm.drives import parse_drive
from actors.vm.lifecycle import Command
from actors.vm.requests import (
    BadRequest,
    InstallRequest,
    parse_install,
    parse_set_cpu,
    parse_set_disk,
    parse_set_memory,
    parse_set_node,
    parse_snapshot,
    parse_snapshot_name,
)
from actors.vm.settings import VmSettings
from actors.vm.shape import ShapeError, parse_set_description, parse_set_network, parse_set_tags

# A task id as the gateway makes them (uuid4().hex).
_TASK = re.compile(r"^[0-9a-f]{32}$")
# `$6$[rounds=N$]salt$hash`, as actors/vm/shacrypt.py writes it.
_SHA512_CRYPT = re.compile(r"^\$6\$(rounds=[0-9]{4,9}\$)?[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{86}$")


@attrs.frozen
class InstallCommand:
    task: str
    request: InstallRequest
    by: str | None = None  # who asked (the audit trail): a token's name or "ip:<address>"


@attrs.frozen
class DoCommand:
    task: str
    vmid: int
    command: Command
    args: dict[str, Any]
    by: str | None = None


def install_payload(
    task: str, body: Mapping[str, Any], password_hash: str, by: str | None = None
) -> dict[str, Any]:
    """What the gateway sends on ``cairn.cmd.vm.install``."""
    fields = {k: v for k, v in body.items() if k != "passwd"}
    return {"task": task, "body": fields, "passwd_hash": password_hash, "by": by}


def do_payload(
    task: str, vmid: int, command: Command, args: Mapping[str, Any], by: str | None = None
) -> dict[str, Any]:
    """What the gateway sends on ``cairn.cmd.vm.do``."""
    return {"task": task, "vmid": vmid, "command": command.value, "args": dict(args), "by": by}


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what}: must be a JSON object")
    return value


def _task(payload: dict[str, Any]) -> str:
    task = payload.get("task")
    if not isinstance(task, str) or not _TASK.match(task):
        raise BadRequest("task: must be a task id (32 hexadecimal digits)")
    return task


def _by(payload: dict[str, Any]) -> str | None:
    try:
        return parse_by(payload.get("by"))
    except BadBy as exc:
        raise BadRequest(exc.message) from None


def parse_vmid(payload: Any) -> int:
    """The ``vmid`` of a command or query: a whole number (one no VM has is answered 404
    further on, as over HTTP)."""
    vmid = _object(payload, "command").get("vmid")
    if type(vmid) is not int or vmid < 0:
        raise BadRequest(f"invalid VM id {str(vmid)[:20]!r}")
    return vmid


def parse_install_command(payload: Any, settings: VmSettings) -> InstallCommand:
    data = _object(payload, "command")
    task = _task(data)
    body = _object(data.get("body"), "body")
    if "passwd" in body:
        raise BadRequest("passwd: crosses the bus only hashed (passwd_hash)")
    request = parse_install(body, settings)
    password_hash = data.get("passwd_hash")
    if not isinstance(password_hash, str) or not _SHA512_CRYPT.match(password_hash):
        raise BadRequest("passwd_hash: must be a SHA-512 crypt hash ($6$...)")
    return InstallCommand(task, attrs.evolve(request, password_hash=password_hash), _by(data))


def parse_do_command(payload: Any, settings: VmSettings) -> DoCommand:
    data = _object(payload, "command")
    task = _task(data)
    vmid = parse_vmid(data)
    name = data.get("command")
    if not isinstance(name, str) or name not in set(Command) or name == Command.INSTALL:
        raise BadRequest(f"command: unknown command {str(name)[:40]!r}")
    command = Command(name)
    return DoCommand(task, vmid, command, _args(command, _object(data.get("args", {}), "args"),
                                                settings), _by(data))  # fmt: skip


def parse_reshape(command: Command, body: Any) -> dict[str, Any]:
    """The body of `set/tags`, `set/description` or `set/network` as the command's arguments
    (the same rules over HTTP and NATS); BadRequest with the field's message."""
    try:
        if command is Command.SET_TAGS:
            return {"tags": list(parse_set_tags(body))}
        if command is Command.SET_DESCRIPTION:
            return {"description": parse_set_description(body)}
        return parse_set_network(body)
    except ShapeError as exc:
        raise BadRequest(str(exc)) from None


def set_args(command: Command, body: Any, settings: VmSettings) -> dict[str, Any]:
    """The arguments of a ``set/...`` command from its route's body: the HTTP body itself, or
    what a command over NATS carries (``_args``), under the same rules."""
    if command is Command.SET_CPU:
        return {"cpu": parse_set_cpu(body, settings)}
    if command is Command.SET_MEMORY:
        return {"memory": parse_set_memory(body, settings)}
    if command is Command.SET_NODE:
        return {"node": parse_set_node(body, settings)}
    if command is Command.SET_DISK:
        args: dict[str, Any] = {"grow_gb": parse_set_disk(body)}
        if isinstance(body, dict) and "drive" in body:
            args["drive"] = parse_drive(body["drive"])
        return args
    return parse_reshape(command, body)


_SETS = (
    Command.SET_CPU,
    Command.SET_MEMORY,
    Command.SET_NODE,
    Command.SET_TAGS,
    Command.SET_DESCRIPTION,
    Command.SET_NETWORK,
)


def _args(command: Command, args: dict[str, Any], settings: VmSettings) -> dict[str, Any]:
    """The arguments of ``command``, checked as the HTTP body they came from was."""
    if command in _SETS:
        return set_args(command, args, settings)
    if command is Command.SET_DISK:
        # The arguments hold the growth as a number of GB; the route's body said it as text.
        grow = args.get("grow_gb")
        if type(grow) is not int:
            raise BadRequest("disk: must be a whole number followed by G, like 16G")
        return set_args(command, {**args, "disk": f"{grow}G"}, settings)
    if command is Command.SNAPSHOT:
        return parse_snapshot(args)
    if command is Command.CHANGE:
        return parse_change(args, settings)
    if command in (Command.ROLLBACK, Command.DELETE_SNAPSHOT):
        if set(args) != {"name"}:
            raise BadRequest(f"{command.value} takes the snapshot's name only")
        return {"name": parse_snapshot_name(args["name"])}
    if args:
        raise BadRequest(f"{command.value} takes no arguments")
    return {}
