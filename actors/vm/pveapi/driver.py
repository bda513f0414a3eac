"""The API driver as a transport: the command lines the VM service speaks, sent to pveproxy.

The rest of the VM service says what to do as `qm`/`pvesh`/`pvesm` argv lists and reads what
those commands print. This transport answers the same lines through the REST API of the node
it stands for, so every step, message and stage stays the same whichever driver runs:
`translate` (pure, golden-tested) turns a line into one request, the transport sends it, waits
for its task when it has one, and `render` prints the answer as the command would have.

`pvesh get|create|set|delete <path>` maps one to one onto GET/POST/PUT/DELETE, which is how
the install pipeline asks for what only the API does (download-url, create with import-from).
Root-only options a token cannot use are dropped: `--skiplock` (api.md §1.2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from actors.vm.pve_output import CommandResult
from actors.vm.pveapi import errors
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.tasks import TaskLost, wait_task
from actors.vm.pveapi.wire import encode_text, looks_like_upid, sshkeys_param
from actors.vm.transport import LineSink

# Flags cairn's command lines give without a value.
_FLAGS = {"purge", "skiplock", "with-local-disks", "online", "current", "verbose", "forceStop"}
_ROOT_ONLY = {"skiplock"}


class Untranslatable(ValueError):
    pass


@attrs.frozen
class Request:
    method: str
    path: str
    params: dict[str, Any]
    render: str  # json | status | config | storage | storages | task


def _options(args: list[str]) -> tuple[list[str], dict[str, str]]:
    positional: list[str] = []
    options: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if eq:
                options[name] = value
            elif name in _FLAGS and (i + 1 == len(args) or args[i + 1].startswith("--")):
                options[name] = "1"
            else:
                if i + 1 == len(args):
                    raise Untranslatable(f"option --{name} has no value")
                options[name] = args[i + 1]
                i += 1
        else:
            positional.append(arg)
        i += 1
    return positional, {k: v for k, v in options.items() if k not in _ROOT_ONLY}


def _with_keys(options: dict[str, str], stdin: bytes | None) -> dict[str, str]:
    """`--sshkeys FILE` (the CLI reads the file): the keys come on stdin, sent urlencoded."""
    if "sshkeys" in options:
        if options["sshkeys"] not in ("/dev/stdin", "-") or stdin is None:
            raise Untranslatable("sshkeys must come on stdin through the API")
        options = {**options, "sshkeys": sshkeys_param(stdin.decode())}
    return options


def translate(node: str, argv: list[str], stdin: bytes | None = None) -> Request:
    """One command line as the REST request that does the same on `node`."""
    if not argv:
        raise Untranslatable("empty command line")
    program, rest = argv[0].rsplit("/", 1)[-1], list(argv[1:])
    base = f"/nodes/{node}"
    if program == "pvesh" and rest:
        verb, pos_opts = rest[0], rest[1:]
        pos, opts = _options(pos_opts)
        if len(pos) != 1:
            raise Untranslatable("pvesh needs exactly one API path")
        opts.pop("output-format", None)
        method = {"get": "GET", "create": "POST", "set": "PUT", "delete": "DELETE"}.get(verb)
        if method is None:
            raise Untranslatable(f"pvesh {verb} is not an API call")
        return Request(method, "/" + pos[0].strip("/"), dict(_with_keys(opts, stdin)), "json")
    if program == "pvesm" and rest[:1] == ["status"]:
        _, opts = _options(rest[1:])
        if "storage" in opts:
            return Request("GET", f"{base}/storage/{opts['storage']}/status", {}, "storage")
        params = {k: v for k, v in opts.items() if k in ("content", "enabled")}
        return Request("GET", f"{base}/storage", params, "storages")
    if program != "qm" or not rest:
        raise Untranslatable(f"{' '.join(argv[:2])} has no API equivalent in cairn's driver")
    command = rest[0]
    if command == "disk" and rest[1:2] == ["resize"]:
        pos, opts = _options(rest[2:])
        if len(pos) != 3:
            raise Untranslatable("qm disk resize <vmid> <disk> <size>")
        return Request(
            "PUT", f"{base}/qemu/{pos[0]}/resize", {"disk": pos[1], "size": pos[2]}, "task"
        )
    pos, opts = _options(rest[1:])
    if not pos or not pos[0].isdigit():
        raise Untranslatable(f"qm {command} needs a VM id")
    vm = f"{base}/qemu/{pos[0]}"
    if command == "status":
        return Request("GET", f"{vm}/status/current", {}, "status")
    if command == "config":
        return Request(
            "GET", f"{vm}/config", {k: v for k, v in opts.items() if k == "current"}, "config"
        )
    if command in ("start", "stop", "shutdown", "reboot"):
        return Request("POST", f"{vm}/status/{command}", opts, "task")
    if command == "destroy":
        return Request("DELETE", vm, opts, "task")
    if command == "create":
        return Request("POST", f"{base}/qemu", {"vmid": pos[0], **_with_keys(opts, stdin)}, "task")
    if command == "set":
        return Request("POST", f"{vm}/config", _with_keys(opts, stdin), "task")
    if command == "migrate":
        if len(pos) != 2:
            raise Untranslatable("qm migrate <vmid> <target>")
        return Request("POST", f"{vm}/migrate", {"target": pos[1], **opts}, "task")
    raise Untranslatable(f"qm {command} has no API equivalent in cairn's driver")


def _storage_row(name: str, entry: Mapping[str, Any]) -> str:
    if not int(entry.get("enabled", 1)):
        status = "disabled"
    elif int(entry.get("active", 0)):
        status = "active"
    else:
        status = "inactive"
    total, used, avail = (int(entry.get(k, 0) or 0) // 1024 for k in ("total", "used", "avail"))
    pct = 100.0 * used / total if total else 0.0
    return f"{name} {entry.get('type', '?')} {status} {total} {used} {avail} {pct:.2f}%\n"


def render(request: Request, data: Any) -> str:
    """What the command line would have printed, from the API's answer."""
    if request.render == "status":
        return f"status: {data.get('qmpstatus') or data.get('status')}\n"
    if request.render == "config":
        lines = []
        for key in sorted(data):
            if key == "digest":
                continue
            value = data[key]
            if key == "description":
                value = encode_text(str(value))
            lines.append(f"{key}: {value}\n")
        return "".join(lines)
    header = "Name Type Status Total Used Available %\n"
    if request.render == "storage":
        return header + _storage_row(request.path.split("/")[-2], data)
    if request.render == "storages":
        return header + "".join(_storage_row(e["storage"], e) for e in data)
    if data is None:
        return ""
    return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


class ApiTransport:
    """A node's transport over pveproxy; all nodes share one client (one connection pool)."""

    def __init__(self, client: PveClient, node: str, *, task_timeout: float = 900.0) -> None:
        self.client = client
        self.node = node
        self.task_timeout = task_timeout

    async def run(
        self, argv: list[str], *, stdin: bytes | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        try:
            request = translate(self.node, argv, stdin)
        except Untranslatable as exc:
            return CommandResult(255, "", f"cairn: {exc}\n")
        try:
            async with self.client.busy():  # a shutdown's close waits for the task's end
                return await self._send(request, on_line)
        except TaskLost as exc:
            return CommandResult(255, "", f"{exc.text}\n")
        except errors.ApiError as exc:
            return CommandResult(2 if exc.not_found else 255, "", exc.text + "\n")

    async def _send(self, request: Request, on_line: LineSink | None) -> CommandResult:
        data = await self.client.request(request.method, request.path, request.params)
        if not looks_like_upid(data):
            return CommandResult(0, render(request, data), "")
        outcome = await wait_task(self.client, data, on_line=on_line, timeout=self.task_timeout)
        log = "".join(line + "\n" for line in outcome.log)
        if not outcome.ok:
            return CommandResult(255, log, outcome.exitstatus + "\n")
        return CommandResult(0, log, "")

    async def close(self) -> None:
        await self.client.close()
