"""The VM provisioning service's HTTP face (spec: vm-provisioning.md), routes under /api.

The handlers translate: a request becomes a command on NATS for the VM actors, and the task's
events (stored, then published) become SSE records or a plain `ok`. A client that leaves does
not stop the task; it can re-attach with `GET /api/vm/<id>/task` and `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import json
import logging
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web
from aiohttp.typedefs import Handler
from nats.aio.client import Client
from nats.errors import NoRespondersError

from actors.config import ConfigError, env_float
from actors.functions.runs import RunClient
from actors.functions.settings import FunctionsSettings
from actors.functions.stored import StoredFunctions
from actors.platform import Runtime
from actors.vm import stages
from actors.vm.change_request import parse_change
from actors.vm.events import Adopted, Installed, Observed, TaskEnded, TaskStarted
from actors.vm.fakemirror import serve_mirror
from actors.vm.host import (
    SUBJECT_DETAIL,
    SUBJECT_DO,
    SUBJECT_INSTALL,
    SUBJECT_LIST,
    SUBJECT_PRUNE,
    SUBJECT_SNAPSHOTS,
    SUBJECT_STATUS,
    SUBJECT_TEMPLATES,
    VmService,
)
from actors.vm.initscripts import write_scripts
from actors.vm.leased import VmTenure
from actors.vm.lifecycle import Command, State
from actors.vm.messages import do_payload, install_payload, set_args
from actors.vm.requests import (
    BadRequest,
    parse_install,
    parse_snapshot,
    parse_snapshot_name,
)
from actors.vm.settings import (
    DEFAULT_PORT,
    SettingsError,
    VmSettings,
    load_settings,
    real_cluster_variables,
)
from actors.vm.shacrypt import sha512_crypt
from events.bus import (
    BUS_DOWN,
    CommandFailed,
    CommandTimeout,
    NoResponders,
    command,
    deadline_headers,
)
from events.codec import to_dict
from events.follow import EventCallback, Follower
from events.resend import command_resent
from events.store import EventStore, Recorded
from events.subjects import stream_name, subject_for
from gateway.apps.simulator import simulated_cluster
from gateway.http.allow_ips import ClientFilter
from gateway.http.health import add_health, quarantined
from gateway.http.identity import asked_by
from gateway.http.loopback import is_loopback_address
from gateway.http.sse import EventStream, last_event_id
from gateway.openapi import add_openapi
from gateway.services import ServiceDef

log = logging.getLogger(__name__)

STEP_CHECK_ID = stages.CHECK_ID
# An install waits for its first records to be stored; under load that queues.
_COMMAND_TIMEOUT = 120.0
# The listing, a VM's status and its detail are answered from the actors' memory (a VM
# actor's reply to a query never waits for work): a host that cannot do that in this time is
# stopped or stalled, and a client should hear so, not wait the two minutes a command may take.
_QUERY_TIMEOUT = 5.0
_STREAMING = {Command.START, Command.REBOOT, Command.SET_NODE}
_SYNC_ACTIONS = {
    "stop": Command.STOP,
    "shutdown": Command.SHUTDOWN,
    "destroy": Command.DESTROY,
}
_TASK_EVENTS = {"vm.progress", "vm.task_ended"}
# Not an event: the follow's word that the store refuses writes, so the task is silent.
WAITING = "waiting"
# Not an event either: this host cannot read the store (its connection to PostgreSQL is down,
# the database is stopped), so the stream cannot tell what the task did meanwhile.
UNREADABLE = "unreadable"
# A follow that hears nothing this long reads the store itself (a stalled publisher, the bus
# down) and tries again to join JetStream.
STORE_POLL = 5.0


# -- following a task's events -------------------------------------------------------------


@attrs.frozen
class TaskEvent:
    version: int
    type: str
    data: dict[str, Any]


async def follow_task(
    runtime: Runtime, vmid: int, task: str, after: int
) -> AsyncIterator[TaskEvent]:
    """The task's records after stream version `after`, live, ending with its `task_ended`.

    Two live sources: the store's own append listener, for events written by this process
    (the usual case; it skips the relay's publish-and-acknowledge round and NATS, which made
    up most of the delay to the client), and the stream's subject in JetStream, for events
    written by an actor host in another process; the JetStream follower resumes after a NATS
    outage from the last sequence it saw. Both are opened before the store is read, so nothing
    falls in between; versions seen twice are dropped, and a gap is filled from the store.
    With the bus down the follow goes on from the store (re-attach needs no bus) and joins
    JetStream once it is back.
    """
    stream = f"vm:{vmid}"
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def on_event(_: int, msg: Any) -> None:
        queue.put_nowait(json.loads(msg.data))

    def on_append(records: list[Recorded]) -> None:
        for r in records:
            if r.stream == stream:
                queue.put_nowait(
                    {"version": r.version, "type": r.event.type_name, "data": to_dict(r.event)}
                )

    follower = await _follow(runtime, subject_for(stream), on_event)
    runtime.store.add_listener(on_append)
    last = after
    told: str | None = None  # the store's refusal the stream last said it waits out
    unread: str | None = None  # why the store could not be read, as last said

    async def read() -> list[TaskEvent]:
        """The stream's records after ``last`` from the store; none while it cannot be read
        (said once per cause, the follow then waits and tries again)."""
        nonlocal unread
        try:
            found = await _from_store(runtime.store, stream, last)
        except Exception as exc:  # PostgreSQL down or unreachable: wait, do not end
            why = _store_failure(exc)
            if why != unread:
                unread = why
                log.warning("vm %s: following task %s: the event store cannot be read: %s",
                            vmid, task, why)  # fmt: skip
                return [TaskEvent(last, UNREADABLE, {"message": why})]
            return []
        unread = None
        return found

    try:
        pending = await read()
        while True:
            for item in pending:
                if item.type == UNREADABLE:
                    yield item
                    continue
                if item.version <= last:
                    continue
                last = item.version
                if item.data.get("task") != task or item.type not in _TASK_EVENTS:
                    continue
                yield item
                if item.type == "vm.task_ended":
                    return
            try:
                payload = await asyncio.wait_for(queue.get(), timeout=STORE_POLL)
            except TimeoutError:
                refusal = runtime.actors.store_refusal
                if refusal is not None and refusal != told:
                    told = refusal
                    yield TaskEvent(last, WAITING, {"message": refusal})
                pending = await read()  # publisher stalled
                if follower is None:
                    follower = await _follow(runtime, subject_for(stream), on_event)
                continue
            version = int(payload["version"])
            if version <= last:
                pending = []
            elif version == last + 1:
                pending = [TaskEvent(version, payload["type"], payload["data"])]
            else:
                pending = await read()
    finally:
        with contextlib.suppress(ValueError):
            runtime.store.remove_listener(on_append)
        if follower is not None:
            with contextlib.suppress(Exception):
                await follower.stop()


async def _follow(runtime: Runtime, subject: str, on_event: EventCallback) -> Follower | None:
    """A started JetStream follower of ``subject``, or None while the bus is unavailable."""
    if not runtime.gateway_nc.is_connected:
        return None
    try:
        return await Follower(runtime.gateway_nc, subject, on_event, signer=runtime.signer).start()
    except Exception as exc:
        log.info("following %s from the store alone for now: %s", subject, exc)
        return None


def _store_failure(exc: BaseException) -> str:
    """A store read's failure in a sentence (the driver's own text, its first line)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


async def _from_store(store: EventStore, stream: str, after: int) -> list[TaskEvent]:
    return [
        TaskEvent(r.version, r.event.type_name, to_dict(r.event))
        for r in await store.read_stream(stream, after_version=after)
    ]


def sse_record(data: dict[str, Any]) -> dict[str, Any]:
    record = {"step": data["step"], "status": data["status"], "message": data["message"]}
    if data.get("vm_id") is not None:
        record["vm_id"] = data["vm_id"]
    if data.get("ip") is not None:
        record["ip"] = data["ip"]
    return record


def unreadable_record(vmid: int, why: str) -> dict[str, Any]:
    """What a task's stream says while this host cannot read the event store: the task goes
    on where it runs; the stream waits for the store and carries on, or the client re-attaches
    (through another host, if this one alone lost the store)."""
    return {
        "step": WAITING,
        "status": "processing",
        "message": (
            f"[*] waiting for the event store: this host cannot read it ({why}). The task "
            "goes on; this stream resumes once the store answers, or re-attach: "
            f"GET /api/vm/{vmid}/task with Last-Event-ID"
        ),
    }


def broken_off_record(vmid: int, why: str) -> dict[str, Any]:
    """The last record of a task's stream this host could not carry on: never a bare close
    while the task may go on."""
    return {
        "step": "interrupted",
        "status": "processing",
        "message": (
            f"[*] this stream broke off ({why}); the task goes on: re-attach with "
            f"GET /api/vm/{vmid}/task and Last-Event-ID for the rest and its outcome"
        ),
    }


def waiting_record(refusal: str) -> dict[str, Any]:
    """What a task's stream says while the store refuses writes (docs/vm.md, "When the disk
    fills"): the task cannot record its work, so its job is stopped; once writes work again
    what it built is removed (a lifecycle command: the VM's state is read from the cluster)
    and the stream ends with that record."""
    full = refusal.startswith("the disk holding the event store is full")
    awaited = "disk space" if full else "the event store"
    return {
        "step": WAITING,
        "status": "processing",
        "message": (
            f"[*] waiting for {awaited}: {refusal}. The task is "
            "stopped, since nothing it does could be recorded; once the store takes writes "
            "again it is settled (an install's half-built VM is removed) and this stream "
            "ends with that"
        ),
    }


def stopping_record(vmid: int, reason: str) -> tuple[str, dict[str, Any]]:
    """The last event of a task's stream that a stop of cairn ends (gateway/http/sse.py)."""
    where = f"GET /api/vm/{vmid}/task, with Last-Event-ID"
    return "stopping", {
        "step": "stopping",
        "status": "processing",
        "message": f"[*] {reason} ({where})",
    }


def revoked_record(vmid: int, reason: str) -> tuple[str, dict[str, Any]]:
    """The last event of a task's stream whose token was revoked, or whose console session
    ended, while it was open (gateway/http/revocation.py): the task itself goes on."""
    return "revoked", {
        "step": "revoked",
        "status": "error",
        "message": f"[-] {reason}: this stream ends here; the task goes on "
        f"(GET /api/vm/{vmid}/task follows it again with a valid token)",
    }


def parse_event_id(value: str | None, vmid: int) -> int | None:
    """`<vmid>:<version>` (what we send) or a bare version."""
    if value is None:
        return None
    head, sep, tail = value.partition(":")
    if sep and head.strip() != str(vmid):
        return None
    try:
        version = int(tail if sep else head)
    except ValueError:
        return None
    return version if version >= 0 else None


# -- the app --------------------------------------------------------------------------------


NO_VM_HOST = (
    "no host runs the VM actors just now (in cluster mode: the host that did stopped, and "
    "another takes over within CAIRN_LEASE_TTL seconds); try again shortly"
)
# In cluster mode a request sent just after the VM actors' host died can still be routed to
# it (the NATS servers have not yet dropped its interest), and then nobody answers at all.
NO_VM_ANSWER = (
    f"the host that runs the VM actors did not answer within {_QUERY_TIMEOUT:g} s (in cluster "
    "mode: if it stopped, another takes over within CAIRN_LEASE_TTL seconds); try again shortly"
)


# A way to send a command and wait for its reply (events.bus.command, events.resend's).
Sender = Callable[[Client, str, dict[str, Any], float], Awaitable[Any]]


class VmGateway:
    def __init__(self, runtime: Runtime, settings: VmSettings) -> None:
        self.runtime = runtime
        self.settings = settings
        self.filter = ClientFilter.from_settings(settings)
        # How a command that carries a task id travels, chosen once: in cluster mode a holder
        # that dies with it unanswered gets it sent again, to the next one (the holder runs
        # one task id once); a single host answers it or is gone.
        self._send_task: Sender = command_resent if runtime.cluster is not None else command

    async def command(
        self,
        subject: str,
        payload: dict[str, Any],
        *,
        timeout: float = _COMMAND_TIMEOUT,
        unanswered: str | None = None,
    ) -> dict[str, Any]:
        """The actors' reply; a refusal raises CommandFailed, which `_refusals` turns into
        the text response. No VM host, or none answering (`unanswered` says so, if given), is
        503: the service is unavailable."""
        try:
            send = self._send_task if subject in (SUBJECT_INSTALL, SUBJECT_DO) else command
            reply: dict[str, Any] = await send(self.runtime.gateway_nc, subject, payload, timeout)
        except NoResponders as exc:
            if self.runtime.cluster is not None:
                # Between a lease holder's death and a survivor's takeover.
                raise CommandFailed(503, NO_VM_HOST) from None
            raise CommandFailed(503, exc.message) from None
        except CommandTimeout as exc:
            raise CommandFailed(503, unanswered or exc.message) from None
        return reply

    async def query(self, subject: str, payload: dict[str, Any]) -> dict[str, Any]:
        """`command` for what the actors answer from memory: `_QUERY_TIMEOUT`."""
        return await self.command(subject, payload, timeout=_QUERY_TIMEOUT, unanswered=NO_VM_ANSWER)

    def forbidden(self, request: web.Request) -> web.Response | None:
        return self.filter.refusal(request)

    def target(self, request: web.Request, *, bad_id: int = 400) -> int | web.Response:
        """The VM a task route names, or the refusal to answer with: the caller first (whether
        they may ask at all), then the id. `bad_id`: the status of an unreadable id, 500 on the
        routes whose contract answers so."""
        if (denied := self.forbidden(request)) is not None:
            return denied
        vmid = _vmid(request)
        if vmid is None:
            return web.Response(status=bad_id, text=f"invalid VM id {request.match_info['id']!r}")
        return vmid

    def who(self, request: web.Request) -> str:
        """Who asks, for the audit trail (``by`` of ``vm.task_started``): the token's name, or
        ``ip:<client address>`` when this cairn has no tokens."""
        return asked_by(request, self.filter)

    @staticmethod
    def audit(vmid: int | None, command: str, by: str, task: str) -> None:
        """The journal's line of who asked for what (tokens never appear, only names)."""
        target = f"VM {vmid}" if vmid is not None else "a new VM"
        log.info("vm: %s of %s asked by %s (task %s)", command, target, by, task)

    @staticmethod
    async def body(request: web.Request) -> Any:
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest("body: must be valid JSON") from None

    # -- queries ----------------------------------------------------------------------------

    async def health(self, _: web.Request) -> web.Response:
        if not self.runtime.gateway_nc.is_connected:
            return web.Response(status=503, text=BUS_DOWN)
        return web.Response(text="ok")

    async def list(self, _: web.Request) -> web.Response:
        if not self.runtime.gateway_nc.is_connected:
            return web.Response(status=503, text=f"VM inventory unavailable: {BUS_DOWN}")
        try:
            msg = await self.runtime.gateway_nc.request(
                SUBJECT_LIST,
                b"{}",
                timeout=_QUERY_TIMEOUT,
                headers=deadline_headers(_QUERY_TIMEOUT),
            )
        except NoRespondersError:
            why = NO_VM_HOST if self.runtime.cluster is not None else "no VM host"
            return web.Response(status=503, text=f"VM inventory unavailable: {why}")
        except TimeoutError:
            return web.Response(status=503, text=f"VM inventory unavailable: {NO_VM_ANSWER}")
        except Exception as exc:  # say so, plainly
            return web.Response(status=503, text=f"VM inventory unavailable: {exc}")
        return web.Response(body=msg.data, content_type="application/json")

    async def status(self, request: web.Request) -> web.Response:
        vmid = _vmid(request)
        if vmid is None:
            return web.Response(status=400, text=f"invalid VM id {request.match_info['id']!r}")
        reply = await self.query(SUBJECT_STATUS, {"vmid": vmid})
        return web.Response(text=reply["status"])

    async def detail(self, request: web.Request) -> web.Response:
        """`GET /api/vm/<id>`: the list's row and more, with the times read off its events."""
        vmid = _vmid(request)
        if vmid is None:
            return web.Response(status=400, text=f"invalid VM id {request.match_info['id']!r}")
        detail = await self.query(SUBJECT_DETAIL, {"vmid": vmid})
        records = await self.runtime.store.read_stream(stream_name("vm", vmid))
        return web.json_response({**detail, **event_times(records, detail.get("last_task"))})

    # -- install ----------------------------------------------------------------------------

    async def install(self, request: web.Request) -> web.StreamResponse:
        if (denied := self.forbidden(request)) is not None:
            return denied
        try:
            body = await self.body(request)
            install = parse_install(body, self.settings)
        except BadRequest as exc:
            return web.Response(status=400, text=str(exc))
        generated = None
        if install.passwd is None:
            # No guessable default: a random password, shown once at the end of this stream;
            # never stored, and it crosses the bus only hashed.
            generated = secrets.token_urlsafe(15)
        password_hash = await asyncio.to_thread(sha512_crypt, install.passwd or generated or "")
        task = uuid.uuid4().hex
        by = self.who(request)
        self.audit(install.vmid, "install", by, task)
        try:
            reply = await self.command(
                SUBJECT_INSTALL, install_payload(task, body, password_hash, by)
            )
        except CommandFailed as exc:
            if exc.status == 400:  # refused as asked (more vCPUs than the node has ...)
                return web.Response(status=400, text=exc.message)
            if exc.status >= 503:
                # The service cannot work at all now (no bus, the store refusing writes, a
                # damaged stream): an HTTP answer, before any stream starts.
                return web.Response(status=exc.status, text=exc.message)
            # The id could not be had: still the spec's stream, failing at its first stage.
            async with EventStream(request) as sse:
                message = exc.message
                await sse.send({"step": STEP_CHECK_ID, "status": "processing",
                                "message": "[*] start VM installation (0.00s)"})  # fmt: skip
                await sse.send({"step": STEP_CHECK_ID, "status": "error",
                                "message": f"[-] {message} (0.00s)"})  # fmt: skip
            return sse.response
        return await self.stream(
            request, int(reply["vmid"]), task, int(reply["version"]) - 1, password=generated
        )

    async def stream(
        self,
        request: web.Request,
        vmid: int,
        task: str,
        after: int,
        *,
        password: str | None = None,
    ) -> web.StreamResponse:
        """The task's records as SSE; `password` (one cairn generated) is shown once, just
        before the install's final record, and never stored."""
        headers = {"X-VM-Id": str(vmid), "X-Task-Id": task}
        stopping = functools.partial(stopping_record, vmid)
        revoked = functools.partial(revoked_record, vmid)
        # Ids are the store's (`<vmid>:<version>`, what a re-attach resumes after): each once.
        # What is stored nowhere (a wait's note, the password, the close) carries no id, so a
        # client's Last-Event-ID stays on the last record it can resume after.
        async with EventStream(
            request,
            headers=headers,
            follows_work=True,
            stopping=stopping,
            revoked=revoked,
            numbered=False,
        ) as sse:
            try:
                async for item in follow_task(self.runtime, vmid, task, after):
                    if item.type in (WAITING, UNREADABLE):
                        # Stored nowhere, so no id: a client re-attaching misses nothing.
                        message = item.data["message"]
                        said = (
                            waiting_record(message)
                            if item.type == WAITING
                            else unreadable_record(vmid, message)
                        )
                        if not await sse.send(said):
                            break
                        continue
                    if item.type != "vm.progress":
                        continue
                    record = sse_record(item.data)
                    if password is not None and _is_final(record):
                        await sse.send(_password_record(record, password))
                    if not await sse.send(record, id=f"{vmid}:{item.version}"):
                        break  # the client left; the task goes on and can be re-attached
            except Exception as exc:  # the follow failed: say how to get the rest
                log.exception("vm %s: the stream of task %s broke off", vmid, task)
                await sse.send(broken_off_record(vmid, _store_failure(exc)))
        return sse.response

    # -- lifecycle --------------------------------------------------------------------------

    async def _do(
        self, vmid: int, command: Command, args: dict[str, Any], by: str
    ) -> tuple[dict[str, Any], str]:
        task = uuid.uuid4().hex
        self.audit(vmid, command.value, by, task)
        reply = await self.command(SUBJECT_DO, do_payload(task, vmid, command, args, by))
        return reply, task

    async def action(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["action"]
        streamed = name in ("start", "reboot")
        vmid = self.target(request, bad_id=400 if streamed else 500)
        if isinstance(vmid, web.Response):
            return vmid
        if streamed:
            return await self._streamed(request, vmid, Command(name), {})
        return await self._synchronous(vmid, _SYNC_ACTIONS[name], {}, self.who(request))

    async def set(self, request: web.Request) -> web.StreamResponse:
        what = request.match_info["what"]
        vmid = self.target(request, bad_id=400 if what == "node" else 500)
        if isinstance(vmid, web.Response):
            return vmid
        command = Command(f"set/{what}")
        try:
            args = set_args(command, await self.body(request), self.settings)
        except BadRequest as exc:
            return web.Response(status=400, text=str(exc))
        if command in _STREAMING:
            return await self._streamed(request, vmid, command, args)
        return await self._synchronous(vmid, command, args, self.who(request))

    # -- templates --------------------------------------------------------------------------

    async def templates(self, _: web.Request) -> web.Response:
        """`GET /api/vm/templates`: cairn's templates on every node, with their clones."""
        reply = await self.command(SUBJECT_TEMPLATES, {}, unanswered=NO_VM_ANSWER)
        return web.json_response(reply["templates"])

    async def prune_templates(self, request: web.Request) -> web.Response:
        """`POST /api/vm/templates/prune`: remove what no install clones and nothing needs."""
        if (denied := self.forbidden(request)) is not None:
            return denied
        reply = await self.command(SUBJECT_PRUNE, {}, unanswered=NO_VM_ANSWER)
        log.info("vm: templates pruned by %s: removed %s", self.who(request), reply["removed"])
        return web.json_response(reply)

    # -- snapshots --------------------------------------------------------------------------

    async def snapshots(self, request: web.Request) -> web.Response:
        """`GET /api/vm/<id>/snapshots`: Proxmox's list, oldest first, with cairn's `by`."""
        vmid = _vmid(request)
        if vmid is None:
            return web.Response(status=400, text=f"invalid VM id {request.match_info['id']!r}")
        reply = await self.query(SUBJECT_SNAPSHOTS, {"vmid": vmid})
        return web.json_response(reply["snapshots"])

    async def snapshot(self, request: web.Request) -> web.StreamResponse:
        """`POST /api/vm/<id>/snapshots` {name, description, vmstate}: the task as SSE."""
        vmid = self.target(request)
        if isinstance(vmid, web.Response):
            return vmid
        try:
            args = parse_snapshot(await self.body(request))
        except BadRequest as exc:
            return web.Response(status=400, text=str(exc))
        return await self._streamed(request, vmid, Command.SNAPSHOT, args)

    async def snapshot_rollback(self, request: web.Request) -> web.StreamResponse:
        target = self._snapshot_target(request)
        if isinstance(target, web.Response):
            return target
        vmid, name = target
        return await self._streamed(request, vmid, Command.ROLLBACK, {"name": name})

    async def snapshot_delete(self, request: web.Request) -> web.StreamResponse:
        target = self._snapshot_target(request)
        if isinstance(target, web.Response):
            return target
        vmid, name = target
        return await self._synchronous(
            vmid, Command.DELETE_SNAPSHOT, {"name": name}, self.who(request)
        )

    async def change(self, request: web.Request) -> web.StreamResponse:
        """`POST /api/vm/<id>/change`: a safe change (actors/vm/change.py), as SSE."""
        vmid = self.target(request)
        if isinstance(vmid, web.Response):
            return vmid
        try:
            args = parse_change(await self.body(request), self.settings)
        except BadRequest as exc:
            return web.Response(status=400, text=str(exc))
        return await self._streamed(request, vmid, Command.CHANGE, args)

    def _snapshot_target(self, request: web.Request) -> tuple[int, str] | web.Response:
        """The VM and snapshot a route names, or the refusal to answer with (the caller's
        address first, then the id, then the name)."""
        vmid = self.target(request)
        if isinstance(vmid, web.Response):
            return vmid
        try:
            return vmid, parse_snapshot_name(request.match_info["name"])
        except BadRequest as exc:
            return web.Response(status=400, text=str(exc))

    async def _streamed(
        self, request: web.Request, vmid: int, command: Command, args: dict[str, Any]
    ) -> web.StreamResponse:
        reply, task = await self._do(vmid, command, args, self.who(request))
        return await self.stream(request, vmid, task, int(reply["version"]) - 1)

    async def _synchronous(
        self, vmid: int, command: Command, args: dict[str, Any], by: str
    ) -> web.Response:
        reply, task = await self._do(vmid, command, args, by)
        ended: dict[str, Any] | None = None
        async for item in follow_task(self.runtime, vmid, task, int(reply["version"]) - 1):
            if item.type == "vm.task_ended":
                ended = item.data
        if ended is not None and ended.get("ok"):
            return web.Response(text="ok")
        error = (ended or {}).get("error") or "the command failed"
        return web.Response(status=500, text=error)

    async def reattach(self, request: web.Request) -> web.StreamResponse:
        """`GET /api/vm/<id>/task`: the VM's latest task as SSE; with `Last-Event-ID` (an `id:`
        this service sent), that task's records after it."""
        vmid = self.target(request)
        if isinstance(vmid, web.Response):
            return vmid
        stream = f"vm:{vmid}"
        history = await _from_store(self.runtime.store, stream, 0)
        header = last_event_id(request)
        after = parse_event_id(header, vmid)
        if header is not None and after is None:
            return web.Response(status=400, text=f"Last-Event-ID: not an id of VM {vmid}")
        if after is not None:
            seen = next((e for e in history if e.version == after), None)
            if seen is None or "task" not in seen.data:
                return web.Response(status=404, text=f"VM {vmid} has no event {after}")
            task = str(seen.data["task"])
        else:
            starts = [e for e in history if e.type == "vm.task_started"]
            if not starts:
                return web.Response(status=404, text=f"VM {vmid} not found")
            task = str(starts[-1].data["task"])
            after = starts[-1].version - 1
        return await self.stream(request, vmid, task, after)


def _is_final(record: dict[str, Any]) -> bool:
    return record["status"] == "success" and "vm_id" in record and "ip" in record


def _password_record(final: dict[str, Any], password: str) -> dict[str, Any]:
    # Same stage and elapsed time as the final record it precedes.
    took = final["message"].rsplit(" (", 1)[-1] if " (" in final["message"] else "0.00s)"
    message = f"[*] Password: {password} (generated, shown only now; cairn keeps no copy) ({took}"
    return {"step": final["step"], "status": "success", "message": message}


def _iso(at: float | None) -> str | None:
    if at is None:
        return None
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds")


def event_times(records: list[Recorded], last_task: dict[str, Any] | None) -> dict[str, Any]:
    """When the VM came to be (its last install or adoption that nothing removed since) and
    when its last task started and ended, and who asked for each (``created_by``,
    ``last_task.by``: the audit trail): facts of the store, not of the actor's state."""
    created: float | None = None
    created_by: str | None = None
    started = ended = None
    started_by: str | None = None
    wanted = last_task["task"] if last_task else None
    asked: dict[str, str | None] = {}  # task -> who
    for record in records:
        event = record.event
        if isinstance(event, TaskStarted):
            asked[event.task] = event.by
        if isinstance(event, Installed | Adopted):
            created = record.recorded_at
            created_by = asked.get(event.task) if isinstance(event, Installed) else None
        elif isinstance(event, TaskEnded | Observed) and event.state == State.ABSENT.value:
            created, created_by = None, None
        if isinstance(event, TaskStarted) and event.task == wanted:
            started, started_by = record.recorded_at, event.by
        elif isinstance(event, TaskEnded) and event.task == wanted:
            ended = record.recorded_at
    times: dict[str, Any] = {"created_at": _iso(created), "created_by": created_by}
    if last_task is not None:
        times["last_task"] = {
            **last_task,
            "started_at": _iso(started),
            "ended_at": _iso(ended),
            "by": started_by,
        }
    return times


def _vmid(request: web.Request) -> int | None:
    raw = request.match_info["id"]
    if not raw.isascii() or not raw.lstrip("-").isdigit() or len(raw) > 12:
        return None
    return int(raw)


@web.middleware
async def _refusals(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A command the actors refused (busy, wrong state, unknown VM …) as the spec's plain
    text with its status; raised before any stream has started."""
    try:
        return await handler(request)
    except CommandFailed as exc:
        return web.Response(status=exc.status, text=exc.message)


def init_scripts(directory: Path) -> Handler:
    """`GET /sh/<file>`: an OS init script, as text to read. Only the scripts there at start-up
    are served, so no request names a path; any other name is 404 listing those there are."""
    names = sorted(p.name for p in directory.glob("*.sh") if p.is_file())

    async def script(request: web.Request) -> web.StreamResponse:
        name = request.match_info["file"]
        if name not in names:
            shown = repr(name[:64])
            return web.Response(
                status=404, text=f"no init script {shown}; there are {', '.join(names)}"
            )
        return web.FileResponse(
            directory / name, headers={"Content-Type": "text/plain; charset=utf-8"}
        )

    return script


def settings_from(runtime: Runtime) -> VmSettings:
    try:
        return load_settings(runtime.env)
    except SettingsError as exc:
        raise ConfigError("VM service", str(exc)) from None


async def _maybe_simulate(runtime: Runtime) -> Runtime:
    """`cairn serve vm --sim`, or `cairn up` with no MAIN_NODE: start the simulated cluster (a
    child program, gateway/apps/simulator.py) and point the service at it. Half a
    real-cluster configuration (GATEWAY or a NODE_ without MAIN_NODE) under `cairn up` is a
    mistake to stop at, not a reason to drive the simulator while the operator thinks cairn
    runs their cluster."""
    explicit = "sim" in runtime.flags
    real = real_cluster_variables(runtime.env)
    no_main = not runtime.env.get("MAIN_NODE", "").strip()
    if not explicit and no_main and real and len(runtime.listen) > 1:
        raise ConfigError(
            "MAIN_NODE",
            f"is not set, but {', '.join(real)} {'is' if len(real) == 1 else 'are'}: set "
            "MAIN_NODE (and the other variables of docs/vm.md) to drive your cluster, or "
            "unset them to use the simulated one",
        )
    wants_sim = explicit or (no_main and len(runtime.listen) > 1)
    if not wants_sim:
        return runtime
    scale = env_float(runtime.env, "PVESIM_DELAY_SCALE", 0.05, min=0)
    stack = contextlib.AsyncExitStack()
    root = (runtime.data_dir / "pvesim").resolve()
    sim_env = await stack.enter_async_context(simulated_cluster(root, scale))
    # A real cluster's leftovers (a NODE_ of .env) must not join the simulated one.
    kept = {k: v for k, v in runtime.env.items() if k not in real and k != "MAIN_NODE"}
    env = {**kept, **sim_env}
    said = f"cairn: vm: no Proxmox configured; driving the simulated cluster in {root}"
    if not env.get("IMAGE_BASE_URL", "").strip():
        # The simulator needs no real image; a demo without Internet still installs.
        mirror = await stack.enter_async_context(serve_mirror())
        env["IMAGE_BASE_URL"] = mirror.base_url
        said += f" (cloud images from its mirror {mirror.base_url})"
    print(said, flush=True)  # one line: the start's output is its addresses
    simulated = attrs.evolve(runtime, env=env)
    _SIMS[id(simulated)] = stack
    return simulated


_SIMS: dict[int, contextlib.AsyncExitStack] = {}


def _check_exposure(runtime: Runtime) -> None:
    """Beyond loopback, a VM service that lets anyone install and destroy VMs must be asked
    for (ALLOW_IPS=0.0.0.0), never the silent default."""
    host = runtime.listen.get("vm", ("127.0.0.1", 0))[0]
    if is_loopback_address(host):
        return
    allow = runtime.env.get("ALLOW_IPS", "").strip()
    if not allow:
        raise ConfigError(
            "ALLOW_IPS",
            f"must be set when the VM service listens on {host} (beyond loopback): list the "
            "client addresses or CIDRs allowed to install, stop and destroy VMs, or set "
            "ALLOW_IPS=0.0.0.0 to allow every client that can reach it",
        )
    if any(e.strip() in ("0.0.0.0", "0.0.0.0/0") for e in allow.split(",")):
        print(f"cairn: vm: WARNING: ALLOW_IPS=0.0.0.0 lets any client that reaches {host} "
              "install, stop and destroy VMs", flush=True)  # fmt: skip


async def build(runtime: Runtime) -> web.Application:
    _check_exposure(runtime)
    runtime = await _maybe_simulate(runtime)
    settings = settings_from(runtime)
    poll = env_float(runtime.env, "VM_POLL_INTERVAL", 5.0, min=0.05)
    scripts = write_scripts(runtime.data_dir / "vm" / "sh")
    # A change's function checks run as the HTTP gateway's runs do, on the gateway role's
    # connection: its account holds nothing a forged reply subject could reach.
    # Only the runs' time limits and queue matter here: not this host's sandbox user, which a
    # VM service without a functions runner need not have.
    asked = FunctionsSettings.from_env({**runtime.env, "FUNCTIONS_RUNNER": "0"})
    runs = RunClient(runtime.gateway_nc, asked)
    await runs.start()
    functions = StoredFunctions(runtime.gateway_nc, runs)
    actors: VmService | VmTenure
    if runtime.cluster is not None:
        actors = VmTenure(
            runtime,
            settings,
            runtime.cluster,
            poll_interval=poll,
            scripts_dir=scripts,
            functions=functions,
        )
        await actors.start()
    else:
        actors = VmService(runtime, settings, poll_interval=poll, functions=functions)
        await actors.start(scripts)
    gw = VmGateway(runtime, settings)

    app = web.Application()

    def problems() -> list[str]:
        return [actors.cluster_problem] if actors.cluster_problem else []

    def details() -> dict[str, Any]:
        facts: dict[str, Any] = {
            "cluster": "simulated" if settings.simulated else "real",
            "main_node": settings.main_node,
            "nodes": sorted(settings.nodes),
        }
        if isinstance(actors, VmTenure):
            facts["lease"] = actors.facts()
        return facts

    add_health(
        app,
        "vm",
        runtime,
        problems=problems,
        warnings=quarantined(runtime, "vm", "vmalloc", "vmnode"),
        details=details,
    )
    api = web.Application(middlewares=[_refusals])
    api.router.add_get("/health", gw.health)
    api.router.add_get("/vm/list", gw.list)
    api.router.add_get("/vm/templates", gw.templates)
    api.router.add_post("/vm/templates/prune", gw.prune_templates)
    # Not the words of the routes beside it: GET /vm/install is 405, not "invalid VM id".
    api.router.add_get("/vm/{id:(?!install$|list$|templates$)[^{}/]+}", gw.detail)
    api.router.add_get("/vm/{id}/status", gw.status)
    api.router.add_get("/vm/{id}/task", gw.reattach)
    api.router.add_post("/vm/install", gw.install)
    # One route per action, so the routes printed at start-up read like the spec's table.
    for action in ("start", "stop", "shutdown", "reboot", "destroy"):
        api.router.add_post(f"/vm/{{id}}/{{action:{action}}}", gw.action)
    for what in ("cpu", "memory", "disk", "node", "tags", "description", "network"):
        api.router.add_post(f"/vm/{{id}}/set/{{what:{what}}}", gw.set)
    api.router.add_get("/vm/{id}/snapshots", gw.snapshots)
    api.router.add_post("/vm/{id}/snapshots", gw.snapshot)
    api.router.add_post("/vm/{id}/snapshots/{name}/rollback", gw.snapshot_rollback)
    api.router.add_delete("/vm/{id}/snapshots/{name}", gw.snapshot_delete)
    api.router.add_post("/vm/{id}/change", gw.change)
    add_openapi(api, "vm", runtime.env, mounted_at="/api")
    app.add_subapp("/api", api)
    app.router.add_get("/sh/{file}", init_scripts(scripts))

    async def cleanup(_: web.Application) -> None:
        await actors.stop()
        await runs.stop()
        sim = _SIMS.pop(id(runtime), None)
        if sim is not None:
            await sim.aclose()

    app.on_cleanup.append(cleanup)
    return app


SERVICE = ServiceDef(
    name="vm",
    port_env="VM_PORT",
    default_port=DEFAULT_PORT,
    build=build,
    summary="VM provisioning on Proxmox VE (or the simulated cluster)",
)
