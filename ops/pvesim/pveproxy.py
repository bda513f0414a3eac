"""The simulated pveproxy: Proxmox VE's REST API over HTTPS on loopback.

It serves the endpoints cairn's API driver uses on the same state as the fake `qm`, `pvesh`
and `pvesm`, so one simulated cluster can be driven both ways. Every asynchronous call is a
task with a UPID, a per-node log and an exit status; the VM work inside a task is the fake
`qm` itself, run in-process as the node the path names. What PVE checks before it forks a
worker (permissions, parameters, a missing or locked VM, a duplicate VMID) fails the HTTP
request; what it checks inside the worker fails the task (a 200 with a UPID that fails).

Authentication is by API token only (`Authorization: PVEAPIToken=USER@REALM!NAME=SECRET`);
401s come at once (no 3 s delay) with an empty body. `settings.api.version` picks the PVE
release imitated (7.4, 8.2, 8.4, 9.1), each with the behaviour that release changed.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import attrs
from aiohttp import web

from . import cloudinit, pvesh, snapshots, workers
from . import qm as fake_qm
from . import resources as res
from . import termproxy as term
from . import vmconfig as vc
from .access import DEFAULT_VERSION, VERSIONS, api_settings, privileges
from .args import CliError, parse
from .context import Ctx, take_failure
from .state import Store, Txn
from .tls import fingerprint, make_certificate, server_context

_TOKEN_HEADER = re.compile(r"(?:^|\s)PVEAPIToken(?:=| )([^;]*)")
_NOT_IN_SCHEMA = (
    "property is not defined in schema and the schema does not allow additional properties"
)
_IMPORT_SYNTAX = "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"
_URLENCODED = re.compile(r"^[-%a-zA-Z0-9_.!~*'()]*$")
_IMPORT_NAME = re.compile(r"^[a-zA-Z0-9\-.+=_]+\.(ova|qcow2|raw|vmdk)$")
_ISO_NAME = re.compile(r"^[a-zA-Z0-9\-.+=_]+\.(iso|img)$")

# QS $check_vm_modify_config_perm: option -> privilege group.
_CPU = {"cores", "cpu", "sockets", "numa", "vcpus", "cpulimit", "cpuunits", "affinity"}
_MEMORY = {"memory", "balloon", "shares"}
_HWTYPE = {"scsihw", "vga", "machine", "smbios1", "bios", "kvm", "hotplug", "keyboard"}
_OPTIONS = {
    "name",
    "ostype",
    "agent",
    "description",
    "onboot",
    "protection",
    "tags",
    "startup",
    "template",
}
_CLOUDINIT = {
    "ciuser",
    "cipassword",
    "sshkeys",
    "ciupgrade",
    "nameserver",
    "searchdomain",
    "citype",
    "cicustom",
}
_DISK = {"boot", "bootdisk"}
_NOT_CONFIG = {
    "node",
    "vmid",
    "pool",
    "storage",
    "start",
    "unique",
    "force",
    "archive",
    "digest",
    "skiplock",
    "delete",
    "revert",
    "background_delay",
    "import-working-storage",
}


class HttpError(Exception):
    def __init__(self, status: int, message: str, errors: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = dict(errors or {})


def param_exc(name: str, message: str) -> HttpError:
    return HttpError(400, "Parameter verification failed.", {name: message})


def enum_error(value: str, values: tuple[str, ...] | list[str]) -> str:
    return f"value '{value}' does not have a value in the enumeration '{', '.join(values)}'"


def perm_error(path: str, priv: str) -> HttpError:
    return HttpError(403, f"Permission check failed ({path}, {priv})")


def _param_errors(text: str) -> dict[str, str] | None:
    """The `<param>: <message>` lines of a fake command's `400 Parameter verification failed.`
    block; None if the text is not one."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("400 Parameter verification failed."):
        return None
    found: dict[str, str] = {}
    for line in lines[1:]:
        key, sep, msg = line.partition(": ")
        if sep and re.fullmatch(r"[a-z][a-z0-9_\-\[\]]*", key):
            found[key] = msg
    return found


def cli_to_http(exc: CliError) -> HttpError:
    errors = _param_errors(exc.text)
    if errors is not None:
        return HttpError(400, "Parameter verification failed.", errors)
    if "Unknown option:" in exc.text:
        name = exc.text.split("Unknown option:", 1)[1].split()[0]
        return HttpError(400, "Parameter verification failed.", {name: _NOT_IN_SCHEMA})
    return HttpError(500, exc.text.strip())


@attrs.define
class Task:
    upid: str
    node: str
    type: str
    id: str
    user: str
    pid: int
    pstart: int
    starttime: int
    lines: list[str] = attrs.field(factory=list)
    exitstatus: str | None = None
    worked: bool = False  # the worker got past its checks (PVE had forked it by then)
    forked: threading.Event = attrs.field(factory=threading.Event)
    done: threading.Event = attrs.field(factory=threading.Event)
    killed: bool = False  # the worker died mid-work (kill_tasks)

    def status(self) -> dict[str, Any]:
        user, _, token = self.user.partition("!")
        out: dict[str, Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.type,
            "id": self.id,
            "user": user,
            "status": "stopped" if self.exitstatus is not None else "running",
        }
        if token:
            out["tokenid"] = token
        if self.exitstatus is not None:
            out["exitstatus"] = self.exitstatus
        return out


class _TaskCtx(Ctx):
    """A fake command's context whose output is a task's log; its first work delay is the
    moment PVE would have forked the worker (the checks before it have passed)."""

    def __init__(self, store: Store, node: str, task: Task, stdin: str) -> None:
        self.errors: list[str] = []
        super().__init__(store, node, self._out, self._err, lambda: stdin)
        self.task = task

    def _out(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip():
                self.task.lines.append(line)

    def _err(self, text: str) -> None:
        self.errors.append(text)
        self._out(text)

    def delay(self, kind: str, factor: float = 1.0) -> None:
        self.task.worked = True
        self.task.forked.set()
        super().delay(kind, factor)
        if self.task.killed:
            raise TaskKilled(self.task.upid)


class TaskKilled(BaseException):
    """A worker killed mid-work (its daemon restarted, its node crashed): it stops where it
    is and cleans up nothing, so a create leaves its placeholder locked."""


@attrs.frozen
class Exchange:
    method: str
    path: str
    params: dict[str, str]
    status: int
    data: Any


@attrs.frozen
class Call:
    method: str
    path: str
    params: dict[str, str]
    tokenid: str
    token: dict[str, Any]
    match: tuple[str, ...]


Handler = Callable[["PveProxy", Call], Any]


@attrs.define
class TermSession:
    """One termproxy waiting on its port for its one connection (termproxy.py)."""

    port: int
    node: str
    vmid: int
    user: str
    task: Task
    connected: bool = False
    ended: threading.Event = attrs.field(factory=threading.Event)


class PveProxy:
    def __init__(self, store: Store, executor: Executor, *, host: str = "127.0.0.1") -> None:
        self.store = store
        self.executor = executor
        self.host = host
        self.port: int | None = None
        self.tasks: dict[str, Task] = {}
        # The last requests and answers, for tests that check them against PVE's schema.
        self.journal: collections.deque[Exchange] = collections.deque(maxlen=10000)
        self._runner: web.AppRunner | None = None
        self._pid = 0x3C0000 + os.getpid() % 0x1000
        self._lock = threading.Lock()
        self.cert_path: Path | None = None
        self.terms: dict[int, TermSession] = {}  # termproxy sessions by port
        self._ticket_secret = os.urandom(32)

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self, port: int, node: str, address: str) -> None:
        self.cert_path, key_path = make_certificate(self.store.root / "pveproxy", node, address)
        app = web.Application(client_max_size=512 * 1024)
        app.router.add_route("*", "/api2/json/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, port, ssl_context=server_context(self.cert_path, key_path)
        )
        await site.start()
        self.port = port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def fingerprint(self) -> str:
        assert self.cert_path is not None
        return fingerprint(self.cert_path)

    # --- HTTP ---------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"].strip("/")
        method = request.method
        loop = asyncio.get_running_loop()
        try:
            api = await loop.run_in_executor(self.executor, self._api_settings)
            tokenid, token = self._authenticate(request, api)
            body = await request.read()
            if method in ("GET", "DELETE") and body:
                raise HttpError(501, f"Unexpected content for method '{method}'")
            params: dict[str, str] = {k: v for k, v in request.query.items()}
            if body:
                if request.content_type == "application/json":
                    decoded = json.loads(body)
                    params.update({k: _json_param(v) for k, v in decoded.items()})
                else:
                    form = await request.post()
                    params.update({k: str(v) for k, v in form.items() if k not in params})
            handler, match = _route(method, path)
            call = Call(method, path, params, tokenid, token, match)
            data, extra = await loop.run_in_executor(self.executor, self._call, handler, call)
        except HttpError as exc:
            if exc.status != 401:
                self.journal.append(Exchange(method, path, dict(request.query), exc.status, None))
            return self._error(exc)
        self.journal.append(Exchange(method, path, params, 200, data))
        if (
            handler is get_vncwebsocket
            and request.headers.get("Upgrade", "").lower() == "websocket"
        ):
            return await self._terminal(request, call)
        payload = {"data": data, **extra}
        return web.Response(
            body=json.dumps(payload, separators=(",", ":")).encode(),
            content_type="application/json",
            charset="UTF-8",
            headers={"Server": "pve-api-daemon/3.0", "Cache-Control": "max-age=0"},
        )

    def _error(self, exc: HttpError) -> web.Response:
        reason = exc.message.strip().splitlines()[0] if exc.message.strip() else "error"
        headers = {"Server": "pve-api-daemon/3.0", "Connection": "close"}
        if exc.status == 401:
            return web.Response(status=401, reason=reason, headers=headers)
        body: dict[str, Any] = {"data": None}
        if exc.errors:
            body["errors"] = {k: v + "\n" for k, v in exc.errors.items()}
        if self.version() >= "8.4":  # pve-http-server 5.2.0 changed this answer
            body["message"] = exc.message.strip() + "\n"
        return web.Response(
            status=exc.status,
            reason=reason,
            body=json.dumps(body).encode(),
            content_type="application/json",
            headers=headers,
        )

    def _api_settings(self) -> dict[str, Any]:
        with self.store.locked() as txn:
            return api_settings(txn.cluster["settings"])

    def version(self) -> str:
        return str(self._api_settings().get("version") or DEFAULT_VERSION)

    def _authenticate(
        self, request: web.Request, api: Mapping[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        header = request.headers.get("Authorization", "")
        match = _TOKEN_HEADER.search(header)
        if match is None:
            raise HttpError(401, "No ticket")
        value = unquote(match.group(1))
        tokenid, sep, secret = value.rpartition("=")
        token = dict(api.get("tokens", {}).get(tokenid) or {})
        if not sep or not token or not token.get("enabled", True):
            raise HttpError(401, "Authentication failed!")
        if token.get("expire") and float(token["expire"]) < time.time():
            raise HttpError(401, "Authentication failed!")
        if not secrets_equal(str(token.get("secret", "")), secret):
            raise HttpError(401, "Authentication failed!")
        return tokenid, token

    def _call(self, handler: Handler, call: Call) -> tuple[Any, dict[str, Any]]:
        with self.store.locked() as txn:
            failure = take_failure(txn, f"api {call.method} {handler.__name__}", "", None)
        if failure is not None:
            raise HttpError(failure.exit_code, failure.message)
        try:
            result = handler(self, call)
        except CliError as exc:
            raise cli_to_http(exc) from None
        if isinstance(result, tuple):
            return result[0], result[1]
        return result, {}

    # --- the termproxy behind vncwebsocket (termproxy.py) -------------------------------------

    def term_ticket(self, user: str, path: str) -> str:
        return term.assemble_ticket(self._ticket_secret, user, path)

    def term_ticket_ok(self, ticket: str, user: str, path: str) -> bool:
        return term.verify_ticket(self._ticket_secret, ticket, user, path)

    async def _terminal(self, request: web.Request, call: Call) -> web.StreamResponse:
        """pveproxy's websocket to the termproxy on `port`, and that termproxy."""
        offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        if "binary" not in offered:  # pveproxy speaks `binary` (or `base64`, not imitated)
            return self._error(HttpError(400, "websocket protocol 'binary' required"))
        ws = web.WebSocketResponse(protocols=("binary",), max_msg_size=term.MAX_LEN + 64)
        await ws.prepare(request)
        port, vmid = int(call.params["port"]), int(call.match[1])
        session = self.terms.get(port)
        if session is None or session.connected or session.vmid != vmid:
            await ws.close()  # nothing listens there: pveproxy's connect fails
            return ws
        session.connected = True
        loop = asyncio.get_running_loop()
        console = term.SerialConsole(f"t{vmid}")
        buf, authed = b"", False
        try:
            async for msg in ws:
                if msg.type == web.WSMsgType.BINARY:
                    buf += msg.data
                elif msg.type == web.WSMsgType.TEXT:
                    buf += msg.data.encode()
                else:
                    break
                if not authed:
                    parsed = term.parse_auth(buf)
                    if parsed is None:
                        continue
                    user, ticket, buf = parsed
                    path = f"/vms/{vmid}"
                    if user != session.user or not self.term_ticket_ok(ticket, user, path):
                        break  # termproxy closes without a word
                    if not await loop.run_in_executor(
                        self.executor, self.can, call, path, "VM.Console"
                    ):
                        break
                    authed = True
                    await ws.send_bytes(b"OK")
                    rec = await loop.run_in_executor(self.executor, self.vm_rec, session.node, vmid)
                    if rec["status"] != "running":
                        await ws.send_bytes(f"VM {vmid} not running\r\n".encode())
                        break
                    await ws.send_bytes(console.banner())
                messages, buf = term.parse_messages(buf)
                for message in messages:
                    if isinstance(message, term.Data):
                        out = console.feed(message.data)
                        if out:
                            await ws.send_bytes(out)
                    elif isinstance(message, term.Resize):
                        console.resize(message.cols, message.rows)
        except term.ProtocolError:
            pass
        finally:
            session.ended.set()
            self.terms.pop(port, None)
            await ws.close()
        return ws

    # --- helpers for handlers -----------------------------------------------------------------

    def pools(self, txn: Txn) -> dict[str, list[int]]:
        return dict(api_settings(txn.cluster["settings"]).get("pools", {}))

    def can(self, call: Call, path: str, *privs: str, any_of: bool = False) -> bool:
        with self.store.locked() as txn:
            have = privileges(call.token, path, self.pools(txn))
        return bool(have & set(privs)) if any_of else set(privs) <= have

    def need(self, call: Call, path: str, *privs: str, any_of: bool = False) -> None:
        if not self.can(call, path, *privs, any_of=any_of):
            if any_of:
                raise perm_error(path, "|".join(privs))
            with self.store.locked() as txn:
                have = privileges(call.token, path, self.pools(txn))
            raise perm_error(path, next(p for p in privs if p not in have))

    def check_params(
        self, call: Call, allowed: Mapping[str, str], required: tuple[str, ...] = ()
    ) -> None:
        """PVE's schema check: unknown names, booleans 0/1, integers, each a 400."""
        errors: dict[str, str] = {}
        for name in required:
            if name not in call.params:
                errors[name] = "property is missing and it is not optional"
        for name, value in call.params.items():
            kind = allowed.get(name) or allowed.get(re.sub(r"\d+$", "[n]", name))
            if kind is None:
                errors[name] = _NOT_IN_SCHEMA
            elif kind == "boolean" and value not in ("0", "1"):
                errors[name] = f"type check ('boolean') failed - got '{value}'"
            elif kind == "integer" and not re.fullmatch(r"[+-]?\d+", value):
                errors[name] = f"type check ('integer') failed - got '{value}'"
        if errors:
            raise HttpError(400, "Parameter verification failed.", errors)

    def new_task(self, node: str, kind: str, ident: str, user: str) -> Task:
        with self._lock:
            self._pid += 1
            pid = self._pid
        now = int(time.time())
        pstart = int(time.monotonic() * 100) & 0xFFFFFFF
        upid = f"UPID:{node}:{pid:08X}:{pstart:08X}:{now:08X}:{kind}:{ident}:{user}:"
        task = Task(upid, node, kind, ident, user, pid, pstart, now)
        self.tasks[upid] = task
        return task

    def run_task(
        self, task: Task, work: Callable[[Task], str | None], *, wait_fork: bool = False
    ) -> str:
        """Run `work` as the task's worker; it returns None for success or the error text.
        With `wait_fork`, the request waits until the worker forked (its checks before the
        fork passed); a failure before that is the request's 500, and no task is left."""

        def worker() -> None:
            try:
                error = work(task)
            except TaskKilled:
                # No `TASK ...` line: PVE reads such a log as "unexpected status".
                task.exitstatus = "unexpected status"
                task.forked.set()
                task.done.set()
                return
            except CliError as exc:
                error = exc.text.strip()
            except Exception as exc:  # a simulator bug must still end the task
                error = f"internal error: {exc}"
            task.forked.set()
            warns = sum(1 for ln in task.lines if ln.startswith("WARN: "))
            if error:
                error = " ".join(error.split("\n")).strip()
                task.lines.append(f"TASK ERROR: {error}")
                task.exitstatus = error
            elif warns:
                task.lines.append(f"TASK WARNINGS: {warns}")
                task.exitstatus = f"WARNINGS: {warns}"
            else:
                task.lines.append("TASK OK")
                task.exitstatus = "OK"
            task.done.set()

        threading.Thread(target=worker, name=f"pveproxy-{task.type}", daemon=True).start()
        if wait_fork:
            task.forked.wait(60)
            if task.done.is_set() and task.exitstatus != "OK" and not task.worked:
                self.tasks.pop(task.upid, None)
                raise HttpError(500, str(task.exitstatus))
        return task.upid

    def run_qm(self, task: Task, argv: list[str], stdin: str = "") -> str | None:
        """One fake `qm` command as the task's node; its failure text, or None."""
        ctx = _TaskCtx(self.store, task.node, task, stdin)
        self.store.log_command(task.node, ["qm", *argv])  # as the CLI's: one log, both drivers
        rc = fake_qm.run(ctx, argv)
        if rc != 0:
            return "".join(ctx.errors).strip() or f"exit code {rc}"
        if argv[:2] == ["disk", "resize"] and ctx.errors:
            return "".join(ctx.errors).strip()  # a resize's failure exits 0 in the CLI only
        return None

    def run_qm_sync(self, node: str, argv: list[str], stdin: str = "") -> None:
        task = Task("", node, "sync", "", "", 0, 0, 0)
        error = self.run_qm(task, argv, stdin)
        if error:
            raise cli_to_http(CliError(error))

    def kill_tasks(self, vmid: int) -> list[str]:
        """Kill the running workers of VM `vmid` mid-work, as a pvedaemon restart or a node
        crash does; their UPIDs."""
        killed = []
        for task in list(self.tasks.values()):
            if task.id == str(vmid) and not task.done.is_set():
                task.killed = True
                killed.append(task.upid)
        with self.store.locked() as txn:
            # The placeholder a killed worker leaves (a clone's is another VM's: the new id's)
            # is gone for every reader of the node's task list, pvesh's too.
            for where, rec in txn.all_vms():
                if rec.get("worker_upid") in killed:
                    rec.pop("worker_pid", None)
                    rec.pop("worker_upid", None)
                    txn.save_vm(where, rec)
        return killed

    def worker_alive(self, rec: dict[str, Any]) -> bool:
        """Whether the worker a create placeholder names still runs: one of this pveproxy's
        tasks, or a process (a `qm create` run on the node)."""
        if int(rec["worker_pid"]) != os.getpid():
            return workers.pid_alive(int(rec["worker_pid"]))
        task = self.tasks.get(str(rec.get("worker_upid", "")))
        return task is not None and not task.done.is_set() and not task.killed

    def vm_rec(self, node: str, vmid: int) -> dict[str, Any]:
        with self.store.locked() as txn:
            if node not in txn.nodes:
                raise HttpError(500, f"no such cluster node '{node}'")
            rec = txn.vm_on(node, vmid)
        if rec is None:
            raise HttpError(
                500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist"
            )
        return rec


def secrets_equal(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


def _json_param(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


# --- routes -------------------------------------------------------------------------------------

_ROUTES: list[tuple[str, re.Pattern[str], Handler]] = []


def route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        _ROUTES.append((method, re.compile(pattern), fn))
        return fn

    return register


def _route(method: str, path: str) -> tuple[Handler, tuple[str, ...]]:
    for m, pattern, fn in _ROUTES:
        found = pattern.fullmatch(path)
        if found and m == method:
            return fn, found.groups()
    raise HttpError(501, f"Method '{method} {path}' not implemented")


_NODE = r"([a-zA-Z0-9][a-zA-Z0-9\-]*)"
_VMID = r"(\d+)"


def _vmid(text: str) -> int:
    if not re.fullmatch(r"[1-9][0-9]{2,8}", text):
        raise HttpError(
            400,
            "Parameter verification failed.",
            {"vmid": "invalid format - value does not look like a valid VM ID"},
        )
    return int(text)


def _node_route(
    proxy: PveProxy, call: Call, params: Mapping[str, str], required: tuple[str, ...] = ()
) -> str:
    """The node of a /nodes/{node}/... call, its parameters checked (`node` among them)."""
    proxy.check_params(call, {"node": "string", **params}, required)
    return call.match[0]


def _vm_route(
    proxy: PveProxy, call: Call, params: Mapping[str, str], required: tuple[str, ...] = ()
) -> tuple[str, int]:
    """The node and VM of a /nodes/{node}/qemu/{vmid}/... call, its parameters checked: every
    such route takes `node` and `vmid` besides its own."""
    node, vmid = call.match[0], _vmid(call.match[1])
    proxy.check_params(call, {"node": "string", "vmid": "integer", **params}, required)
    return node, vmid


def _only_root(name: str) -> HttpError:
    """An option PVE reserves for root@pam, which an API token never is."""
    return HttpError(
        400, "Parameter verification failed.", {name: "Only root may use this option."}
    )


def _refuse_skiplock(call: Call) -> None:
    if call.params.get("skiplock") == "1":
        raise _only_root("skiplock")


def _need_allocate(proxy: PveProxy, call: Call, pool: str | None, vmid: int) -> None:
    """VM.Allocate for a new VM id: on its pool when one is named (which must exist), else on
    the id itself; create and clone check it alike."""
    if pool is not None:
        with proxy.store.locked() as txn:
            if pool not in proxy.pools(txn):
                raise HttpError(403, f"Permission check failed (pool '{pool}' does not exist)")
        if not proxy.can(call, f"/pool/{pool}", "VM.Allocate"):
            proxy.need(call, f"/vms/{vmid}", "VM.Allocate")
    else:
        proxy.need(call, f"/vms/{vmid}", "VM.Allocate")


def _checked_argv(
    params: Mapping[str, str], drop: set[str], command: str, vmid: int
) -> tuple[list[str], str]:
    """The `qm` arguments of an API call, refused with the API's 400 before any task starts
    when the command line would not parse."""
    argv, stdin = _as_argv(params, drop)
    try:
        parse(fake_qm.SPECS[command], [str(vmid), *argv])
    except CliError as exc:
        raise cli_to_http(exc) from None
    return argv, stdin


def _join_pool(proxy: PveProxy, pool: str, vmid: int) -> None:
    """A VM made into a pool (create or clone) is listed there once its task succeeded."""
    with proxy.store.locked() as txn:
        api = api_settings(txn.cluster["settings"])
        api.setdefault("pools", {}).setdefault(pool, []).append(vmid)
        txn.cluster["settings"]["api"] = api
        txn.save_cluster()


def _qm_task(proxy: PveProxy, call: Call, node: str, kind: str, vmid: int, argv: list[str]) -> str:
    """Start a task whose worker is one `qm` command."""
    task = proxy.new_task(node, kind, str(vmid), call.tokenid)
    return proxy.run_task(task, lambda t: proxy.run_qm(t, argv))


def _pvesh_get(proxy: PveProxy, node: str, path: str, options: dict[str, Any]) -> Any:
    ctx = Ctx(proxy.store, node, lambda _t: None, lambda _t: None, lambda: "")
    return pvesh.get(ctx, path, options)


def _main(proxy: PveProxy) -> str:
    with proxy.store.locked() as txn:
        return txn.main


@route("GET", r"/version")
def get_version(proxy: PveProxy, call: Call) -> Any:
    release = proxy.version()
    return {"version": VERSIONS[release], "release": release, "repoid": "14a22df3"}


_STORAGE_AUDIT = ("Datastore.Audit", "Datastore.AllocateSpace")
_STATS = ("cpu", "mem", "disk", "maxcpu", "maxmem", "maxdisk", "uptime")


@route("GET", r"/access/permissions")
def get_permissions(proxy: PveProxy, call: Call) -> Any:
    """The caller's own privileges per ACL path (any user may ask about itself)."""
    proxy.check_params(call, {"path": "string", "userid": "string"})
    acl: Mapping[str, list[str]] = call.token.get("acl", {})
    return {path: {priv: 1 for priv in privs} for path, privs in acl.items()}


@route("GET", r"/nodes")
def get_nodes(proxy: PveProxy, call: Call) -> Any:
    proxy.check_params(call, {})
    out = []
    for entry in _pvesh_get(proxy, _main(proxy), "/nodes", {}):
        if not proxy.can(call, f"/nodes/{entry['node']}", "Sys.Audit"):
            entry = {k: v for k, v in entry.items() if k not in _STATS}
        out.append(entry)
    return out


@route("GET", rf"/nodes/{_NODE}/status")
def get_node_status(proxy: PveProxy, call: Call) -> Any:
    node = _node_route(proxy, call, {})
    proxy.need(call, f"/nodes/{node}", "Sys.Audit")
    return _pvesh_get(proxy, _main(proxy), f"/nodes/{node}/status", {})


@route("GET", rf"/nodes/{_NODE}/network")
def get_node_network(proxy: PveProxy, call: Call) -> Any:
    node = _node_route(proxy, call, {"type": "string"})
    kind = call.params.get("type")
    if kind is not None and kind not in res.NETWORK_TYPES:
        raise HttpError(
            400, "Parameter verification failed.", {"type": enum_error(kind, res.NETWORK_TYPES)}
        )
    proxy.need(call, f"/nodes/{node}", "Sys.Audit")
    options = {"type": kind} if kind else {}
    return _pvesh_get(proxy, _main(proxy), f"/nodes/{node}/network", options)


@route("GET", r"/cluster/resources")
def get_resources(proxy: PveProxy, call: Call) -> Any:
    proxy.check_params(call, {"type": "string"})
    kind = call.params.get("type")
    if kind is not None and kind not in ("vm", "storage", "node", "sdn"):
        raise HttpError(
            400,
            "Parameter verification failed.",
            {"type": enum_error(kind, ("vm", "storage", "node", "sdn"))},
        )
    options = {"type": kind} if kind else {}
    out = []
    for entry in _pvesh_get(proxy, _main(proxy), "/cluster/resources", options):
        kind = entry["type"]
        # Guests and storages without the audit privilege are silently omitted, nodes lose
        # their figures (MG API2/Cluster.pm resources, API2Tools.pm extract_node_stats).
        if kind in ("qemu", "lxc") and not proxy.can(call, f"/vms/{entry['vmid']}", "VM.Audit"):
            continue
        if kind == "storage" and not proxy.can(
            call, f"/storage/{entry['storage']}", *_STORAGE_AUDIT, any_of=True
        ):
            continue
        if kind == "node" and not proxy.can(call, f"/nodes/{entry['node']}", "Sys.Audit"):
            entry = {k: v for k, v in entry.items() if k not in _STATS}
        out.append(entry)
    return out


@route("GET", r"/cluster/nextid")
def get_nextid(proxy: PveProxy, call: Call) -> Any:
    proxy.check_params(call, {"vmid": "integer"})
    options: dict[str, Any] = {}
    if "vmid" in call.params:
        options["vmid"] = int(call.params["vmid"])
    return _pvesh_get(proxy, _main(proxy), "/cluster/nextid", options)


def _storage_failure(proxy: PveProxy, node: str) -> None:
    """An injected `pvesm status` failure stands for the storage layer failing (a 500 here)."""
    with proxy.store.locked() as txn:
        failure = take_failure(txn, "pvesm status", node, None)
    if failure is not None:
        raise HttpError(500, failure.message)


@route("GET", rf"/nodes/{_NODE}/storage")
def get_storages(proxy: PveProxy, call: Call) -> Any:
    node = _node_route(
        proxy,
        call,
        {
            "content": "string",
            "enabled": "boolean",
            "storage": "string",
            "target": "string",
            "format": "boolean",
        },
    )
    _storage_failure(proxy, node)
    with proxy.store.locked() as txn:
        storages, volumes = txn.storages, txn.volumes(node)
    out = []
    for name, info in sorted(storages.items()):
        content = call.params.get("content")
        if content and content not in str(info["content"]).split(","):
            continue
        if call.params.get("enabled") == "1" and info.get("disable"):
            continue
        if not proxy.can(
            call, f"/storage/{name}", "Datastore.Audit", "Datastore.AllocateSpace", any_of=True
        ):
            continue
        out.append(res.storage_entry(name, info, volumes.get(name, {})))
    return out


@route("GET", rf"/nodes/{_NODE}/storage/([^/]+)/status")
def get_storage_status(proxy: PveProxy, call: Call) -> Any:
    node, storage = call.match
    proxy.check_params(call, {"node": "string", "storage": "string"})
    proxy.need(
        call, f"/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace", any_of=True
    )
    _storage_failure(proxy, node)
    with proxy.store.locked() as txn:
        info = txn.storages.get(storage)
        volumes = txn.volumes(node).get(storage, {})
    if info is None:
        raise HttpError(400, "Parameter verification failed.", {"storage": "No such storage."})
    entry = res.storage_entry(storage, info, volumes)
    entry.pop("storage")
    entry.pop("used_fraction", None)  # the list's alone (ST Status.pm index)
    return entry


@route("GET", rf"/nodes/{_NODE}/storage/([^/]+)/content")
def get_storage_content(proxy: PveProxy, call: Call) -> Any:
    node, storage = call.match
    proxy.check_params(
        call, {"node": "string", "storage": "string", "content": "string", "vmid": "integer"}
    )
    proxy.need(
        call, f"/storage/{storage}", "Datastore.Audit", "Datastore.AllocateSpace", any_of=True
    )
    with proxy.store.locked() as txn:
        if storage not in txn.storages:
            raise HttpError(400, "Parameter verification failed.", {"storage": "No such storage."})
        pool = txn.volumes(node).get(storage, {})
    out = []
    for volname, vol in sorted(pool.items()):
        content = "import" if volname.startswith("import/") else "images"
        if call.params.get("content") not in (None, content):
            continue
        entry = {
            "volid": f"{storage}:{volname}",
            "content": content,
            "size": int(vol["size"]),
            "format": vol.get("format") or "raw",
            "ctime": int(vol.get("ctime", 0)),
        }
        if vol.get("vmid") is not None:
            entry["vmid"] = int(vol["vmid"])
        out.append(entry)
    return out


def import_path(root: Path, node: str, storage: str, filename: str) -> Path:
    return root / "files" / node / storage / "import" / filename


@route("POST", rf"/nodes/{_NODE}/storage/([^/]+)/download-url")
def post_download_url(proxy: PveProxy, call: Call) -> Any:
    node, storage = call.match
    version = proxy.version()
    allowed = {
        "node": "string",
        "storage": "string",
        "url": "string",
        "filename": "string",
        "content": "string",
        "checksum": "string",
        "checksum-algorithm": "string",
        "verify-certificates": "boolean",
    }
    if version >= "8.2":
        allowed["compression"] = "string"
    proxy.check_params(call, allowed, ("url", "filename", "content"))
    p = call.params
    contents = ["iso", "vztmpl"] + (["import"] if version >= "8.4" else [])
    errors: dict[str, str] = {}
    if p["content"] not in contents:
        errors["content"] = enum_error(p["content"], contents)
    if not re.match(r"^https?://.*", p["url"]):
        errors["url"] = "value does not match the regex pattern"
    filename = re.sub(r"[^a-zA-Z0-9_.\-]", "_", p["filename"].rsplit("/", 1)[-1])
    rule = _IMPORT_NAME if p["content"] == "import" else _ISO_NAME
    if "content" not in errors and not rule.match(filename):
        errors["filename"] = "invalid filename or wrong extension"
    algo = p.get("checksum-algorithm")
    algos = ("md5", "sha1", "sha224", "sha256", "sha384", "sha512")
    if algo is not None and algo not in algos:
        errors["checksum-algorithm"] = enum_error(algo, algos)
    if ("checksum" in p) != (algo is not None):
        errors["checksum" if algo else "checksum-algorithm"] = (
            "property is missing and it is not optional"
        )
    if errors:
        raise HttpError(400, "Parameter verification failed.", errors)
    proxy.need(call, f"/storage/{storage}", "Datastore.AllocateTemplate")
    if not (
        proxy.can(call, "/", "Sys.Audit", "Sys.Modify")
        or (version >= "8.2" and proxy.can(call, f"/nodes/{node}", "Sys.AccessNetwork"))
    ):
        raise perm_error(
            f"/nodes/{node}", "Sys.AccessNetwork" if version >= "8.2" else "Sys.Modify"
        )
    with proxy.store.locked() as txn:
        if node not in txn.nodes:
            raise HttpError(500, f"no such cluster node '{node}'")
        info = txn.storages.get(storage)
    if info is None:
        raise HttpError(500, f"storage '{storage}' does not exist")
    if not vc.is_file_storage(str(info["type"])):
        raise HttpError(
            500, f"can't upload to storage type '{info['type']}', not a file based storage!"
        )
    if p["content"] not in str(info["content"]).split(","):
        raise HttpError(
            500, f"storage '{storage}' is not configured for content-type '{p['content']}'"
        )
    target = import_path(proxy.store.root, node, storage, filename)

    def work(task: Task) -> str | None:
        if p["content"] == "import" and p.get("compression"):
            return "decompression not supported for import"
        shown = f"/var/lib/vz/import/{filename}"
        if target.exists():
            if "checksum" in p and _digest(target, str(algo)) == p["checksum"].lower():
                task.lines.append("OK, got correct file already, no need to download")
                return None
            return f"refusing to override existing file '{shown}'"
        task.lines.append(f"downloading {p['url']} to {shown}")
        part = target.with_name(f"{filename}.tmp.{task.pid}")
        part.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(p["url"], timeout=60) as resp, part.open("wb") as fh:
                while chunk := resp.read(1 << 20):
                    fh.write(chunk)
        except (urllib.error.URLError, OSError) as exc:
            part.unlink(missing_ok=True)
            return f"download failed: {exc}"
        if "checksum" in p:
            got = _digest(part, str(algo))
            if got != p["checksum"].lower():
                part.unlink(missing_ok=True)
                return f"checksum mismatch: got '{got}' != expect '{p['checksum'].lower()}'"
            task.lines.append("calculating checksum...OK, checksum verified")
        os.replace(part, target)
        with proxy.store.locked() as txn:
            volumes = txn.volumes(node)
            fmt = filename.rsplit(".", 1)[-1]
            volumes.setdefault(storage, {})[f"import/{filename}"] = {
                "size": target.stat().st_size,
                "vmid": None,
                "image": str(target),
                "format": fmt,
                "ctime": int(time.time()),
            }
            txn.save_volumes(node, volumes)
        task.lines.append(f"download of '{p['url']}' to '{shown}' finished")
        return None

    task = proxy.new_task(node, "download", filename, call.tokenid)
    return proxy.run_task(task, work)


def _digest(path: Path, algo: str) -> str:
    h = hashlib.new(algo)
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@route("GET", rf"/nodes/{_NODE}/qemu")
def get_qemu_list(proxy: PveProxy, call: Call) -> Any:
    node = _node_route(proxy, call, {"full": "boolean"})
    return [
        e
        for e in _pvesh_get(proxy, node, f"/nodes/{node}/qemu", {})
        if proxy.can(call, f"/vms/{e['vmid']}", "VM.Audit")
    ]


def _vm_params(version: str, create: bool) -> dict[str, str]:
    spec = fake_qm.SPECS["create" if create else "set"]
    kinds = {"bool": "boolean", "int": "integer"}
    allowed = {name: kinds.get(opt.kind, "string") for name, opt in spec.options.items()}
    allowed.update(node="string", vmid="integer")
    if version < "8.0":
        allowed.pop("ciupgrade", None)
    if not create:
        allowed.update(background_delay="integer")
        allowed.pop("force", None)
    return allowed


def _config_privileges(proxy: PveProxy, call: Call, vmid: int, create: bool) -> None:
    """QS $check_vm_modify_config_perm and the storage/bridge checks."""
    path = f"/vms/{vmid}"
    version = proxy.version()
    for key, value in call.params.items():
        if key in _NOT_CONFIG:
            continue
        if key in _CPU:
            proxy.need(call, path, "VM.Config.CPU")
        elif key in _MEMORY:
            proxy.need(call, path, "VM.Config.Memory")
        elif key in _HWTYPE or re.fullmatch(r"serial\d", key):
            proxy.need(call, path, "VM.Config.HWType")
        elif key in _OPTIONS:
            proxy.need(call, path, "VM.Config.Options")
        elif key in _DISK:
            proxy.need(call, path, "VM.Config.Disk")
        elif key in _CLOUDINIT or re.fullmatch(r"ipconfig\d+", key):
            proxy.need(call, path, "VM.Config.Cloudinit", "VM.Config.Network", any_of=True)
        elif vc.NET_RE.match(key):
            proxy.need(call, path, "VM.Config.Network")
            nic = dict(p.partition("=")[::2] for p in value.split(","))
            bridge, tag = nic.get("bridge"), nic.get("tag")
            if bridge and version >= "8.0":
                # GC check_vnet_access: a tagged NIC is checked on the VLAN's own path.
                where = f"/sdn/zones/localnetwork/{bridge}" + (f"/{tag}" if tag else "")
                proxy.need(call, where, "SDN.Use")
        elif vc.DRIVE_RE.match(key):
            file = vc.parse_drive(value)["file"]
            if file.endswith(":cloudinit"):
                proxy.need(call, path, "VM.Config.Cloudinit", "VM.Config.CDROM")
            elif vc.is_cdrom(value):
                proxy.need(call, path, "VM.Config.CDROM")
            else:
                proxy.need(call, path, "VM.Config.Disk")
            if ":" in file:
                proxy.need(call, f"/storage/{file.partition(':')[0]}", "Datastore.AllocateSpace")
        elif key == "vga":
            proxy.need(call, path, "VM.Config.HWType")
        else:
            raise perm_error(path, f"root-only option '{key}'")


def _resolve_imports(proxy: PveProxy, call: Call, node: str) -> dict[str, str]:
    """`import-from=<storage>:import/<file>` -> the file the fake `qm` reads (pveproxy resolves
    a volume id itself; an absolute path is root's only)."""
    out = dict(call.params)
    version = proxy.version()
    for key, value in call.params.items():
        if not vc.DRIVE_RE.match(key) or "import-from=" not in value:
            continue
        drive = vc.parse_drive(value)
        source = drive["import-from"]
        if not re.fullmatch(r"(?:[^/:\s]+:)?0", drive["file"]):
            raise HttpError(
                400,
                "Parameter verification failed.",
                {key: _IMPORT_SYNTAX},
            )
        if source.startswith("/"):
            raise HttpError(
                403, "Permission check failed (Only root can pass arbitrary filesystem paths.)"
            )
        storage, _, volname = source.partition(":")
        proxy.need(
            call, f"/storage/{storage}", "Datastore.AllocateSpace", "Datastore.Audit", any_of=True
        )
        with proxy.store.locked() as txn:
            vol = txn.volumes(node).get(storage, {}).get(volname)
        if volname.startswith("iso/"):
            raise HttpError(
                400,
                "Parameter verification failed.",
                {key: f"{source} has wrong type 'iso' - needs to be 'images' or 'import'"},
            )
        if volname.startswith("import/") and version < "8.3":
            raise HttpError(
                400,
                "Parameter verification failed.",
                {key: f"{source} has wrong type 'import' - not an image"},
            )
        if vol is None or not vol.get("image"):
            raise HttpError(500, f"volume '{source}' does not exist")
        drive["import-from"] = str(vol["image"])
        out[key] = vc.print_drive(drive)
    return out


def _as_argv(params: Mapping[str, str], skip: set[str]) -> tuple[list[str], str]:
    argv: list[str] = []
    stdin = ""
    for key, value in params.items():
        if key in skip:
            continue
        if key == "sshkeys":
            stdin = unquote(value)
            argv += ["--sshkeys", "/dev/stdin"]
            continue
        argv += [f"--{key}", value]
    return argv, stdin


def _check_sshkeys(params: Mapping[str, str]) -> None:
    value = params.get("sshkeys")
    if value is not None and not _URLENCODED.match(value):
        raise HttpError(
            400,
            "Parameter verification failed.",
            {"sshkeys": f"invalid format - invalid urlencoded string: {value}"},
        )
    if value is not None and not fake_qm.validate_ssh_keys(unquote(value)):
        raise HttpError(500, "SSH public key validation error")


@route("POST", rf"/nodes/{_NODE}/qemu")
def post_create(proxy: PveProxy, call: Call) -> Any:
    node = call.match[0]
    version = proxy.version()
    proxy.check_params(call, _vm_params(version, True), ("vmid",))
    vmid = _vmid(call.params["vmid"])
    pool = call.params.get("pool")
    _need_allocate(proxy, call, pool, vmid)
    pooled = pool is not None and proxy.can(call, f"/pool/{pool}", "VM.Allocate")
    if not pooled:
        _config_privileges(proxy, call, vmid, True)
    else:  # privileges on the pool stand for the VM's: check them there
        _config_privileges(
            proxy, attrs.evolve(call, token=_pool_view(call.token, pool, vmid)), vmid, True
        )
    if call.params.get("start") == "1" and version >= "9.1":
        proxy.need(call, f"/vms/{vmid}", "VM.PowerMgmt")
    _check_sshkeys(call.params)
    params = _resolve_imports(proxy, call, node)
    with proxy.store.locked() as txn:
        if node not in txn.nodes:
            raise HttpError(500, f"no such cluster node '{node}'")
    argv, stdin = _checked_argv(params, {"node", "vmid", "pool"}, "create", vmid)

    def work(task: Task) -> str | None:
        error = proxy.run_qm(task, ["create", str(vmid), *argv], stdin)
        if error is None and pool is not None:
            _join_pool(proxy, pool, vmid)
        return error

    task = proxy.new_task(node, "qmcreate", str(vmid), call.tokenid)
    return proxy.run_task(task, work, wait_fork=True)


def _pool_view(token: Mapping[str, Any], pool: str | None, vmid: int) -> dict[str, Any]:
    """The token as it will see VM `vmid` once it is in `pool`."""
    acl = {k: list(v) for k, v in dict(token.get("acl", {})).items()}
    if pool is not None:
        acl.setdefault(f"/vms/{vmid}", []).extend(acl.get(f"/pool/{pool}", []))
    return {**token, "acl": acl}


def _config_value(key: str, value: Any, version: str) -> Any:
    ints = {
        "cores",
        "sockets",
        "numa",
        "balloon",
        "vcpus",
        "onboot",
        "protection",
        "ciupgrade",
        "template",
        "shares",
        "kvm",
    }
    if key == "memory":
        return int(value) if version < "8.0" else str(value)
    if key in ints:
        try:
            return int(value)
        except (TypeError, ValueError):
            return value
    if key == "cipassword":
        return "**********"
    return str(value) if not isinstance(value, str) else value


@route("GET", rf"/nodes/{_NODE}/qemu/{_VMID}/config")
def get_config(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {"current": "boolean", "snapshot": "string"})
    proxy.need(call, f"/vms/{vmid}", "VM.Audit")
    proxy.store.log_command(node, ["qm", "config", str(vmid)])  # the CLI's log, both drivers
    rec = proxy.vm_rec(node, vmid)
    conf = rec["config"] if call.params.get("current") == "1" else fake_qm.merged(rec)
    version = proxy.version()
    out = {k: _config_value(k, v, version) for k, v in conf.items()}
    if "description" in out:
        out["description"] = str(out["description"]).rstrip("\n")
    out["digest"] = hashlib.sha1(json.dumps(conf, sort_keys=True).encode()).hexdigest()
    return out


@route("GET", rf"/nodes/{_NODE}/qemu/{_VMID}/cloudinit/dump")
def get_cloudinit_dump(proxy: PveProxy, call: Call) -> Any:
    """The cloud-init data PVE generates for the VM (QS cloudinit_generated_config_dump, which
    needs VM.Audit): the user-data holds the hashed cipassword as it is."""
    node, vmid = _vm_route(proxy, call, {"type": "string"}, ("type",))
    kind = call.params["type"]
    if kind not in cloudinit.TYPES:
        raise HttpError(
            400, "Parameter verification failed.", {"type": enum_error(kind, cloudinit.TYPES)}
        )
    proxy.need(call, f"/vms/{vmid}", "VM.Audit")
    proxy.store.log_command(node, ["qm", "cloudinit", "dump", str(vmid), kind])
    return cloudinit.dump(proxy.vm_rec(node, vmid)["config"], vmid, kind)


def _update(proxy: PveProxy, call: Call, sync: bool) -> Any:
    node, vmid = call.match[0], _vmid(call.match[1])
    version = proxy.version()
    allowed = _vm_params(version, False)
    if sync:
        allowed.pop("background_delay", None)
    proxy.check_params(call, allowed)
    _refuse_skiplock(call)
    if not any(
        k.startswith("VM.Config.") for k in privileges(call.token, f"/vms/{vmid}", _pools(proxy))
    ):
        raise perm_error(f"/vms/{vmid}", "VM.Config.*")
    _config_privileges(proxy, call, vmid, False)
    _check_sshkeys(call.params)
    params = _resolve_imports(proxy, call, node)
    rec = proxy.vm_rec(node, vmid)
    if rec["config"].get("lock"):
        raise HttpError(500, f"VM is locked ({rec['config']['lock']})")
    argv, stdin = _checked_argv(params, {"node", "vmid", "background_delay"}, "set", vmid)
    if sync:
        proxy.run_qm_sync(node, ["set", str(vmid), *argv], stdin)
        return None
    task = proxy.new_task(node, "qmconfig", str(vmid), call.tokenid)
    return proxy.run_task(task, lambda t: proxy.run_qm(t, ["set", str(vmid), *argv], stdin))


def _pools(proxy: PveProxy) -> dict[str, list[int]]:
    with proxy.store.locked() as txn:
        return proxy.pools(txn)


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/config")
def post_config(proxy: PveProxy, call: Call) -> Any:
    return _update(proxy, call, sync=False)


@route("PUT", rf"/nodes/{_NODE}/qemu/{_VMID}/config")
def put_config(proxy: PveProxy, call: Call) -> Any:
    return _update(proxy, call, sync=True)


@route("PUT", rf"/nodes/{_NODE}/qemu/{_VMID}/resize")
def put_resize(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(
        proxy,
        call,
        {"disk": "string", "size": "string", "digest": "string", "skiplock": "boolean"},
        ("disk", "size"),
    )
    _refuse_skiplock(call)
    if not re.fullmatch(r"\+?\d+(\.\d+)?[KMGT]?", call.params["size"]):
        raise HttpError(
            400,
            "Parameter verification failed.",
            {"size": "value does not match the regex pattern"},
        )
    proxy.need(call, f"/vms/{vmid}", "VM.Config.Disk")
    rec = proxy.vm_rec(node, vmid)
    drive = fake_qm.merged(rec).get(call.params["disk"])
    if drive is not None and ":" in str(drive):
        proxy.need(call, f"/storage/{str(drive).partition(':')[0]}", "Datastore.AllocateSpace")
    argv = ["disk", "resize", str(vmid), call.params["disk"], call.params["size"]]
    if proxy.version() < "8.0":  # synchronous before qemu-server 8.0.2
        proxy.run_qm_sync(node, argv)
        return None
    return _qm_task(proxy, call, node, "resize", vmid, argv)


@route("GET", rf"/nodes/{_NODE}/qemu/{_VMID}/status/current")
def get_status(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {})
    proxy.need(call, f"/vms/{vmid}", "VM.Audit")
    proxy.store.log_command(node, ["qm", "status", str(vmid)])
    rec = proxy.vm_rec(node, vmid)
    with proxy.store.locked() as txn:
        cpus = int(txn.nodes[node]["maxcpu"])
    fields = fake_qm.vm_status_fields(rec, cpus, time.time())
    fields.setdefault("qmpstatus", rec["status"])
    fields["ha"] = {"managed": 0}
    return fields


_POWER_PARAMS: dict[str, dict[str, str]] = {
    "start": {"skiplock": "boolean", "timeout": "integer", "machine": "string"},
    "stop": {
        "skiplock": "boolean",
        "timeout": "integer",
        "keepActive": "boolean",
        "overrule-shutdown": "boolean",
    },
    "shutdown": {
        "skiplock": "boolean",
        "timeout": "integer",
        "forceStop": "boolean",
        "keepActive": "boolean",
    },
    "reboot": {"timeout": "integer"},
}


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/status/(start|stop|shutdown|reboot)")
def post_power(proxy: PveProxy, call: Call) -> Any:
    node, vmid, action = call.match[0], _vmid(call.match[1]), call.match[2]
    allowed = {"node": "string", "vmid": "integer", **_POWER_PARAMS[action]}
    if action == "stop" and proxy.version() < "8.2":
        allowed.pop("overrule-shutdown")
    proxy.check_params(call, allowed)
    _refuse_skiplock(call)
    proxy.need(call, f"/vms/{vmid}", "VM.PowerMgmt")
    rec = proxy.vm_rec(node, vmid)
    if action == "reboot" and rec["status"] != "running":
        raise HttpError(500, f"VM {vmid} not running")
    argv = [action, str(vmid)]
    for key in ("timeout", "forceStop"):
        if key in call.params:
            argv += [f"--{key}", call.params[key]]
    return _qm_task(proxy, call, node, f"qm{action}", vmid, argv)


@route("DELETE", rf"/nodes/{_NODE}/qemu/{_VMID}")
def delete_vm(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(
        proxy,
        call,
        {"purge": "boolean", "destroy-unreferenced-disks": "boolean", "skiplock": "boolean"},
    )
    _refuse_skiplock(call)
    proxy.need(call, f"/vms/{vmid}", "VM.Allocate")
    rec = proxy.vm_rec(node, vmid)
    if rec["status"] == "running":
        raise HttpError(500, f"VM {vmid} is running - destroy failed")
    if rec["config"].get("protection"):
        raise HttpError(500, f"can't remove VM {vmid} - protection mode enabled")
    argv = ["destroy", str(vmid)]
    for key in ("purge", "destroy-unreferenced-disks"):
        if call.params.get(key) == "1":
            argv += [f"--{key}", "1"]

    def work(task: Task) -> str | None:
        error = proxy.run_qm(task, argv)
        if error is None:
            with proxy.store.locked() as txn:
                api = api_settings(txn.cluster["settings"])
                for members in api.get("pools", {}).values():
                    while vmid in members:
                        members.remove(vmid)
                txn.cluster["settings"]["api"] = api
                txn.save_cluster()
        return error

    task = proxy.new_task(node, "qmdestroy", str(vmid), call.tokenid)
    return proxy.run_task(task, work)


def _snapname(value: str) -> str:
    if error := snapshots.check_snapname(value):
        raise HttpError(400, "Parameter verification failed.", {"snapname": error})
    return value


@route("GET", rf"/nodes/{_NODE}/qemu/{_VMID}/snapshot")
def get_snapshots(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {})
    proxy.need(call, f"/vms/{vmid}", "VM.Audit")
    return snapshots.listing(proxy.vm_rec(node, vmid))


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/snapshot")
def post_snapshot(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(
        proxy,
        call,
        {"snapname": "string", "vmstate": "boolean", "description": "string"},
        ("snapname",),
    )
    name = _snapname(call.params["snapname"])
    proxy.need(call, f"/vms/{vmid}", "VM.Snapshot")
    if error := snapshots.reserved_name_error(name):
        raise HttpError(500, error)
    proxy.vm_rec(node, vmid)
    argv = ["snapshot", str(vmid), name]
    for key in ("description", "vmstate"):
        if key in call.params:
            argv += [f"--{key}", call.params[key]]
    return _qm_task(proxy, call, node, "qmsnapshot", vmid, argv)


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/snapshot/([^/]+)/rollback")
def post_rollback(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {"snapname": "string", "start": "boolean"})
    name = _snapname(call.match[2])
    proxy.need(call, f"/vms/{vmid}", "VM.Snapshot", "VM.Snapshot.Rollback", any_of=True)
    if call.params.get("start") == "1":
        proxy.need(call, f"/vms/{vmid}", "VM.PowerMgmt")
    proxy.vm_rec(node, vmid)
    argv = [
        "rollback",
        str(vmid),
        name,
        *(["--start", "1"] if call.params.get("start") == "1" else []),
    ]
    return _qm_task(proxy, call, node, "qmrollback", vmid, argv)


@route("DELETE", rf"/nodes/{_NODE}/qemu/{_VMID}/snapshot/([^/]+)")
def delete_snapshot(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {"snapname": "string", "force": "boolean"})
    name = _snapname(call.match[2])
    proxy.need(call, f"/vms/{vmid}", "VM.Snapshot")
    proxy.vm_rec(node, vmid)
    argv = ["delsnapshot", str(vmid), name]
    return _qm_task(proxy, call, node, "qmdelsnapshot", vmid, argv)


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/template")
def post_template(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {"disk": "string"})
    proxy.need(call, f"/vms/{vmid}", "VM.Allocate")
    rec = proxy.vm_rec(node, vmid)
    # The API's checks under the config lock, before the worker (the CLI makes the same).
    if lock := rec["config"].get("lock"):
        raise HttpError(500, f"VM is locked ({lock})")
    if rec["config"].get("template") and "disk" not in call.params:
        raise HttpError(500, "you can't convert a template to a template")
    if rec["status"] == "running":
        raise HttpError(500, "you can't convert a VM to template if VM is running")
    argv = ["template", str(vmid)]
    if "disk" in call.params:
        argv += ["--disk", call.params["disk"]]
    return _qm_task(proxy, call, node, "qmtemplate", vmid, argv)


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/clone")
def post_clone(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(
        proxy,
        call,
        {
            "newid": "integer",
            "name": "string",
            "description": "string",
            "full": "boolean",
            "target": "string",
            "storage": "string",
            "pool": "string",
            "format": "string",
            "snapname": "string",
            "bwlimit": "integer",
        },
        ("newid",),
    )
    newid = _vmid(call.params["newid"])
    # API2/Qemu.pm clone_vm: VM.Clone on the source, VM.Allocate for the new id (on the pool
    # when one is given), space on the target storage of a full copy.
    proxy.need(call, f"/vms/{vmid}", "VM.Clone")
    pool = call.params.get("pool")
    _need_allocate(proxy, call, pool, newid)
    if "storage" in call.params:
        proxy.need(call, f"/storage/{call.params['storage']}", "Datastore.AllocateSpace")
    proxy.vm_rec(node, vmid)
    argv = ["clone", str(vmid), str(newid)]
    for key in ("name", "description", "full", "target", "storage", "format", "snapname"):
        if key in call.params:
            argv += [f"--{key}", call.params[key]]
    try:
        parse(fake_qm.clones.SPECS["clone"], argv[1:])
    except CliError as exc:
        raise cli_to_http(exc) from None

    def work(task: Task) -> str | None:
        error = proxy.run_qm(task, argv)
        if error is None and pool is not None:
            _join_pool(proxy, pool, newid)
        return error

    task = proxy.new_task(node, "qmclone", str(vmid), call.tokenid)
    return proxy.run_task(task, work)


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/migrate")
def post_migrate(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(
        proxy,
        call,
        {
            "target": "string",
            "online": "boolean",
            "with-local-disks": "boolean",
            "targetstorage": "string",
            "bwlimit": "integer",
            "force": "boolean",
            "migration_type": "string",
            "migration_network": "string",
        },
        ("target",),
    )
    for root_only in ("force", "migration_type", "migration_network"):
        if root_only in call.params:
            raise _only_root(root_only)
    proxy.need(call, f"/vms/{vmid}", "VM.Migrate")
    target = call.params["target"]
    if target == node:
        raise HttpError(400, "Parameter verification failed.", {"target": "target is local node."})
    with proxy.store.locked() as txn:
        if target not in txn.nodes:
            raise HttpError(500, f"no such cluster node '{target}'")
    rec = proxy.vm_rec(node, vmid)
    if rec["config"].get("lock"):
        raise HttpError(500, f"VM is locked ({rec['config']['lock']})")
    if rec["status"] == "running" and call.params.get("online") != "1":
        raise HttpError(500, "can't migrate running VM without --online")
    argv = ["migrate", str(vmid), target]
    for key in ("online", "with-local-disks"):
        if call.params.get(key) == "1":
            argv.append(f"--{key}")
    return _qm_task(proxy, call, node, "qmigrate", vmid, argv)


def _task_for(proxy: PveProxy, call: Call) -> Task:
    node, upid = call.match
    if not re.fullmatch(
        r"UPID:[a-zA-Z0-9\-]+:[0-9A-F]{8}:[0-9A-F]{8,9}:[0-9A-F]{8}:[^:\s/]+:[^:\s/]*:[^:\s/]+:",
        upid,
    ):
        raise HttpError(
            400, "Parameter verification failed.", {"upid": "unable to parse worker upid"}
        )
    task = proxy.tasks.get(upid)
    if task is None or task.node != node:
        raise HttpError(400, "Parameter verification failed.", {"upid": "no such task"})
    if task.user != call.tokenid:
        proxy.need(call, f"/nodes/{node}", "Sys.Audit")
    return task


@route("GET", rf"/nodes/{_NODE}/tasks")
def get_tasks(proxy: PveProxy, call: Call) -> Any:
    node = _node_route(
        proxy,
        call,
        {
            "source": "string",
            "vmid": "integer",
            "typefilter": "string",
            "limit": "integer",
            "start": "integer",
        },
    )
    source = call.params.get("source", "archive")
    if source not in ("archive", "active", "all"):
        raise param_exc("source", enum_error(source, ("archive", "active", "all")))
    vmid = call.params.get("vmid")
    with proxy.store.locked() as txn:
        if node not in txn.nodes:
            raise HttpError(500, f"no such cluster node '{node}'")
        running = workers.active(txn, node, int(vmid) if vmid else None, proxy.worker_alive)
    # A token sees its own tasks; others' need Sys.Audit on the node (MG API2/Tasks.pm).
    if not proxy.can(call, f"/nodes/{node}", "Sys.Audit"):
        running = [t for t in running if t["upid"].split(":")[7] == call.tokenid]
    return running if source != "archive" else []


@route("GET", rf"/nodes/{_NODE}/tasks/([^/]+)/status")
def get_task_status(proxy: PveProxy, call: Call) -> Any:
    proxy.check_params(call, {"node": "string", "upid": "string"})
    return _task_for(proxy, call).status()


@route("GET", rf"/nodes/{_NODE}/tasks/([^/]+)/log")
def get_task_log(proxy: PveProxy, call: Call) -> Any:
    proxy.check_params(
        call,
        {
            "node": "string",
            "upid": "string",
            "start": "integer",
            "limit": "integer",
            "download": "boolean",
        },
    )
    task = _task_for(proxy, call)
    start = int(call.params.get("start", "0"))
    limit = int(call.params.get("limit", "50"))
    lines = list(task.lines)
    chosen = lines[start:] if limit == 0 else lines[start : start + limit]
    out = [{"n": start + i + 1, "t": t} for i, t in enumerate(chosen)]
    if not out:
        out = [{"n": start or 1, "t": "no content"}]
    return out, {"total": len(lines)}


@route("POST", rf"/nodes/{_NODE}/qemu/{_VMID}/termproxy")
def post_termproxy(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(proxy, call, {"serial": "string"})
    serial = call.params.get("serial")
    serials = ("serial0", "serial1", "serial2", "serial3")
    if serial is not None and serial not in serials:
        raise param_exc("serial", enum_error(serial, serials))
    path = f"/vms/{vmid}"
    proxy.need(call, path, "VM.Console")
    proxy.vm_rec(node, vmid)  # "check if VM exists"
    task = proxy.new_task(node, "vncproxy", str(vmid), call.tokenid)
    with proxy._lock:
        free = (p for p in range(term.PORT_MIN, term.PORT_MAX + 1) if p not in proxy.terms)
        port = next(free, 0)
        if port:
            session = TermSession(port, node, vmid, call.tokenid, task)
            proxy.terms[port] = session
    if not port:
        proxy.tasks.pop(task.upid, None)
        raise HttpError(500, f"unable to find free port ({term.PORT_MIN}-{term.PORT_MAX})")

    def serve(t: Task) -> str | None:
        t.lines.append(f"starting qemu termproxy {t.upid}")
        if not session.ended.wait(term.ACCEPT_TIMEOUT) and not session.connected:
            with proxy._lock:
                proxy.terms.pop(port, None)
            return "connection timed out"
        session.ended.wait()
        return None

    upid = proxy.run_task(task, serve)
    ticket = proxy.term_ticket(call.tokenid, path)
    return {"user": call.tokenid, "ticket": ticket, "port": port, "upid": upid}


@route("GET", rf"/nodes/{_NODE}/qemu/{_VMID}/vncwebsocket")
def get_vncwebsocket(proxy: PveProxy, call: Call) -> Any:
    node, vmid = _vm_route(
        proxy, call, {"port": "integer", "vncticket": "string"}, ("port", "vncticket")
    )
    port = int(call.params["port"])
    if port < term.PORT_MIN:
        raise param_exc("port", f"value must have a minimum value of {term.PORT_MIN}")
    if port > term.PORT_MAX:
        raise param_exc("port", f"value must have a maximum value of {term.PORT_MAX}")
    if len(call.params["vncticket"]) > 512:
        raise param_exc("vncticket", "value may only be 512 characters long")
    path = f"/vms/{vmid}"
    proxy.need(call, path, "VM.Console")
    if not proxy.term_ticket_ok(call.params["vncticket"], call.tokenid, path):
        raise HttpError(401, "permission denied - invalid PVEVNC ticket")  # (derived)
    proxy.vm_rec(node, vmid)  # "VM exists ?"
    return {"port": str(port)}
