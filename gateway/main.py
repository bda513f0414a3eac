"""cairn: VMs on Proxmox VE, sandboxed functions, document search and images, over HTTP.

Run `cairn up` for everything on one machine, `cairn serve SERVICE` for one service."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import logging
import re
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from aiohttp import web
from sqlalchemy.engine import make_url

from actors.config import ConfigError, env_float, env_int, env_str, load_env
from actors.platform import Runtime, StoreUnreadable, open_runtime
from events.bus import BusRefused
from events.errors import reason
from events.integrity import Verdict, damaged_file
from events.nats_server import NatsServerError, free_port
from events.release import VERSION
from events.stamp import StoreTooNew
from events.store import default_store_url
from gateway import server as root
from gateway.apps.simulator import run_sim
from gateway.cli import cluster as cluster_cli
from gateway.cli import events as events_cli
from gateway.cli import pve as pve_cli
from gateway.cli import store as store_cli
from gateway.cli import tokens as tokens_cli
from gateway.http import sse
from gateway.http.down import down_app
from gateway.http.health import STARTING
from gateway.http.hosts import HostPolicy
from gateway.http.listener import GuardedSite, body_guard, default_cap, raise_open_files_limit
from gateway.http.logs import ACCESS_LOG, access_logger_for, quiet_third_party_warnings
from gateway.http.logs import configure as configure_logging
from gateway.services import ServiceDef, build_app

log = logging.getLogger("cairn")


# A placeholder whose pattern is one literal word, as in ``{action:start}``.
_LITERAL_GROUP = re.compile(r"\(\?P<(\w+)>([\w-]+)\)")


def route_path(info: Mapping[str, Any]) -> str:
    """A route's path as a reader wants it: ``/vm/{id}/start`` for a placeholder pinned to one
    word (aiohttp's formatter would print ``/vm/{id}/{action}`` for every action)."""
    path = info.get("path") or info.get("formatter") or info.get("prefix") or "?"
    pattern = info.get("pattern")
    if pattern is not None and "formatter" in info:
        for name, word in _LITERAL_GROUP.findall(pattern.pattern):
            path = path.replace("{" + name + "}", word)
    return str(path)


def route_lines(app: web.Application) -> list[str]:
    """Every registered route as ``METHOD path``, sub-apps included (the spec asks for them)."""
    lines = []
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        info = route.resource.get_info() if route.resource is not None else {}
        lines.append(f"{route.method:<7} {route_path(info)}")
    return lines


def version() -> str:
    return VERSION


def listen_address(env: Mapping[str, str], service: ServiceDef, *, single: bool) -> tuple[str, int]:
    if service.loopback_only:
        host = service.default_host
    else:
        host = env_str(env, service.host_env) or service.default_host
    port = None
    if single:
        port = env_int(env, "PORT", None, min=1, max=65535)
    if port is None:
        port = env_int(env, service.port_env, None, min=1, max=65535)
    if port is None:  # not chosen: the service's default, which another program may hold
        port = service.default_port
        if port is not None and service.free_port_fallback and not _hold(host, port):
            print(
                f"cairn: {service.name}: port {port} is taken; listening on a free one "
                f"(set {service.port_env} to choose)",
                flush=True,
            )
            port = None
    return host, port if port is not None else free_port(host)


# Default ports taken for a service until it listens on them itself (`release`): a second
# cairn starting meanwhile sees them taken and moves to a free port, rather than both seeing
# them free and the later one failing to listen once its start-up (seconds) is done.
_HELD: dict[tuple[str, int], socket.socket] = {}


def _hold(host: str, port: int) -> bool:
    """Listen on ``host:port`` until :func:`release`; False if another program holds it.
    SO_REUSEADDR, as aiohttp binds: a port left in TIME_WAIT by the previous run is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held = socket.socket(family, socket.SOCK_STREAM)
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind((host, port))
        held.listen(1)
    except OSError:
        held.close()
        return False
    _HELD[(host, port)] = held
    return True


def release(host: str, port: int) -> None:
    """Let go of a port :func:`listen_address` held, just before the service listens on it."""
    held = _HELD.pop((host, port), None)
    if held is not None:
        held.close()


@attrs.frozen
class ServerSettings:
    """How every listener behaves and how a stop ends (README: Configuration)."""

    header_timeout: float
    body_timeout: float
    max_connections: int
    stop_grace: float

    @classmethod
    def from_env(cls, env: Mapping[str, str], listeners: int) -> ServerSettings:
        cap = env_int(env, "CAIRN_MAX_CONNECTIONS", None, min=1)
        return cls(
            header_timeout=env_float(env, "CAIRN_HEADER_TIMEOUT", 15.0, min=0.1),
            body_timeout=env_float(env, "CAIRN_BODY_TIMEOUT", 30.0, min=0.1),
            max_connections=cap if cap is not None else default_cap(listeners),
            stop_grace=env_float(env, "CAIRN_STOP_GRACE", 10.0, min=0),
        )


@attrs.define
class Listening:
    runner: web.AppRunner
    site: GuardedSite


async def serve(
    names: Sequence[str], env: Mapping[str, str], flags: frozenset[str], *, routes: bool = False
) -> int:
    """Run ``names``; ``routes``: print every route of each (``-v``), not only its address."""
    single = len(names) == 1
    chosen = [root.load(name) for name in names]
    settings = ServerSettings.from_env(env, len(chosen))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    ready = asyncio.Event()

    def on_signal() -> None:
        stop.set()
        # Start-up has no point at which it looks at `stop` (a NATS server that does not
        # answer is waited for): it is cancelled, so a signal always ends cairn.
        if not ready.is_set() and main_task is not None:
            main_task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        return await _serve(env, flags, settings, chosen, single, stop, ready, routes)
    except asyncio.CancelledError:
        if ready.is_set():
            raise
        print("cairn: stopped while starting", file=sys.stderr, flush=True)
        return 1


async def _serve(
    env: Mapping[str, str],
    flags: frozenset[str],
    settings: ServerSettings,
    chosen: list[ServiceDef],
    single: bool,
    stop: asyncio.Event,
    ready: asyncio.Event,
    routes: bool,
) -> int:
    async with (
        open_runtime(env, flags=flags, journal=root.journal()) as runtime,
        contextlib.AsyncExitStack() as stack,
    ):
        print(f"cairn: data in {runtime.data_dir}", flush=True)
        where = "embedded" if runtime.embedded_nats else "external"
        print(f"cairn: nats {runtime.shown_nats_url} ({where})", flush=True)
        for service in chosen:
            runtime.listen[service.name] = listen_address(env, service, single=single)
        listening = []
        waiting = {service.name for service in chosen}
        for service in chosen:
            try:
                listening.append(
                    await _start_service(runtime, service, stack, settings, waiting, routes)
                )
            except ConfigError:
                raise  # a setting to fix: nothing starts (exit 2)
            except Exception as exc:
                # One service that cannot start (its stored events in a damaged page of the
                # store file, its files on a full disk) is down; the others start, and /status
                # and that service's own port say which and why.
                report = _down(runtime, service.name, _start_failure(runtime, exc))
                listening.append(
                    await _start_service(
                        runtime, service, stack, settings, waiting, routes, down=report
                    )
                )
            waiting.discard(service.name)
        settle_heap()
        ready.set()
        print("cairn: ready (Ctrl-C stops)", flush=True)
        await stop.wait()
        print("cairn: stopping", flush=True)
        await _wind_down(runtime, listening, settings.stop_grace)
    print("cairn: stopped", flush=True)
    return 0


STOPPING = "cairn is stopping: this stream ends here; follow it again once cairn is back"
STOPPING_LATE = (
    "cairn is stopping and its grace period ({grace:g} s) is over: this stream ends here; an "
    "interrupted task is settled at the next start, where it can be followed again"
)


def _damage_reason(runtime: Runtime, words: str) -> str:
    if runtime.store_damage is not None:
        return f"it cannot read its stored events: {runtime.store_damage}"
    url = make_url(runtime.env.get("CAIRN_EVENT_STORE") or default_store_url(runtime.data_dir))
    path = Path(url.database or "events.sqlite3")
    damage = Verdict(path, damage=words).message()
    return f"it cannot read its stored events: {damage}"


def _start_failure(runtime: Runtime, exc: BaseException) -> str:
    """Why a service could not start, in one plain sentence. A damaged store file or a
    refusal of the machine's (a full disk, a permission) is the operator's to fix and gets no
    traceback; anything else is a fault of cairn's, whose traceback goes to the log."""
    if (words := damaged_file(exc)) is not None:
        return _damage_reason(runtime, words)
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if exc.filename else ""
        return f"it could not start: {reason(exc)}{where}"
    log.error("start-up failure", exc_info=exc)
    return f"it could not start: {reason(exc)}"


def _down(runtime: Runtime, name: str, why: str) -> Down:
    """Say, and show in /status, that service ``name`` did not start and why."""
    print(f"cairn: {name} is down: {why}", flush=True)
    log.error("%s is down: %s", name, why)

    def report() -> dict[str, Any]:
        return {"service": name, "status": "down", "problems": [why], "warnings": []}

    runtime.health[name] = report
    return Down(why, report)


@attrs.frozen
class Down:
    """A service that did not start: why, and its health report."""

    why: str
    report: Callable[[], dict[str, Any]]


def settle_heap() -> None:
    """Move what start-up built (modules, apps, actors: hundreds of thousands of objects that
    live as long as the process) out of the garbage collector's sight. Its full collections
    walked them all on the event loop, whenever allocations happened to trigger one: measured
    43-54 ms with the search service draining a backlog, the slowest query of the run. Frozen
    objects are never collected, which is what they would be anyway; what is built later is
    collected as before."""
    gc.collect()
    gc.freeze()
    trim_heap()


def trim_heap() -> None:
    """Hand the memory start-up freed back to the system (glibc's malloc_trim; elsewhere
    nothing): building and checking the embedding model leaves ~100 MB of free pages in the
    process otherwise, counted in its RSS for as long as it runs (measured with
    ops/bench/footprint.py)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


async def _wind_down(runtime: Runtime, listening: list[Listening], grace: float) -> None:
    """Stop taking connections, give running jobs and open requests the grace period, then
    interrupt what is left: its tasks are settled at the next start, as after a crash."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    for one in listening:
        await one.site.stop()
    # Streams that follow nothing that could end (the console feed) end now; those of a task
    # or a run may still end with their outcome within the grace (gateway/http/sse.py).
    ended = await sse.end_streams(STOPPING, working_too=False)
    if ended:
        log.info("stopping: ended %d event stream(s)", ended)
    left = await runtime.actors.drain(grace)
    if left:
        log.warning(
            "stopping: the grace period (%g s) is over; interrupting the jobs of %s: their "
            "tasks will be settled at the next start",
            grace,
            ", ".join(left),
        )
    await sse.streams_done(max(0.0, deadline - loop.time()))
    ended = await sse.end_streams(STOPPING_LATE.format(grace=grace), working_too=True)
    if ended:
        log.info("stopping: the grace period is over; ended %d event stream(s)", ended)
    remaining = max(0.5, deadline - loop.time())
    servers = [one.runner.server for one in listening if one.runner.server is not None]
    for server in servers:
        server.pre_shutdown()  # idle keep-alive connections close now
    open_now = sum(len(server.connections) for server in servers)
    if open_now:
        log.info(
            "stopping: closing %d connection(s); requests in progress get %.1f s",
            open_now,
            remaining,
        )
    await asyncio.gather(*(server.shutdown(remaining) for server in servers))


async def _start_service(
    runtime: Runtime,
    service: ServiceDef,
    stack: contextlib.AsyncExitStack,
    settings: ServerSettings,
    waiting: set[str],
    routes: bool,
    down: Down | None = None,
) -> Listening:
    """Serve ``service``, or with ``down`` what answers in its place (gateway/http/down.py)."""
    host, port = runtime.listen[service.name]
    if down is None:
        app = await build_app(service, runtime)
    else:
        hosts = HostPolicy.from_env(runtime.env, host)
        app = down_app(service.name, down.why, down.report, hosts, json_errors=service.json_errors)
    app.middlewares.insert(0, body_guard(settings.body_timeout))
    if service.name == "status":
        app[STARTING] = waiting  # its /health says "starting" until the others listen
    # keepalive_timeout is also how long a new connection may take to send its headers
    # (aiohttp arms it at connect): the slowloris time-out.
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=ACCESS_LOG,
        access_log_class=access_logger_for(service.name),
        keepalive_timeout=settings.header_timeout,
    )
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = GuardedSite(runner, host, port, cap=settings.max_connections, name=service.name)
    release(host, port)
    try:
        await site.start()
    except OSError as exc:
        rule = f"cannot listen on {host}:{port}: {exc.strerror}"
        raise ConfigError(service.port_env, rule) from None
    if down is not None:
        print(f"cairn: {service.name} on http://{host}:{port} answers 503 (down)", flush=True)
        return Listening(runner, site)
    print(f"cairn: {address_line(service, host, port)}", flush=True)
    if routes:
        for line in route_lines(app):
            print(f"    {line}", flush=True)
    return Listening(runner, site)


# Where a service's reference page is, under its address: what a newcomer opens next.
REFERENCE = {"vm": "/api/docs/", "search": "/api/docs/"}


def address_line(service: ServiceDef, host: str, port: int) -> str:
    """``console on http://127.0.0.1:8000/``, ``vm on http://127.0.0.1:8100 (API reference
    /api/docs/)``: one line a service, the gateway's port named for what a person opens
    there, the web console."""
    shown = f"[{host}]" if ":" in host else host
    if service.name == "status":
        return f"console on http://{shown}:{port}/"
    return (
        f"{service.name} on http://{shown}:{port} "
        f"(API reference {REFERENCE.get(service.name, '/docs/')})"
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn", description=__doc__)
    parser.add_argument("--version", action="version", version=f"cairn {version()}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="debug logging; `up` and `serve` list routes"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="embedded NATS and every service (or those of CAIRN_SERVICES)")
    serve_p = sub.add_parser("serve", help="one service (or several) in the foreground")
    serve_p.add_argument("service", nargs="+", choices=root.KNOWN[1:])
    serve_p.add_argument("--sim", action="store_true", help="vm: drive a simulated cluster")
    sub.add_parser("sim", help="the simulated Proxmox cluster alone (cairn sim --help)")
    store_cli.register(sub, root.domain_events)
    events_cli.register(sub)
    cluster_cli.register(sub)
    tokens_cli.register(sub)
    pve_cli.register(sub)
    for group in root.command_groups().values():  # each service's own commands
        group.load()(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_third_party_warnings()  # before asyncssh is imported
    if argv[:1] == ["sim"]:
        # The simulator is a program of its own, with its own options (argparse's REMAINDER
        # would refuse leading ones): this process becomes it.
        run_sim(argv[1:])
    args = _build_parser().parse_args(argv)
    if args.command in ("up", "serve"):
        raise_open_files_limit()
    try:
        configure_logging(load_env(), verbose=args.verbose)
        return _dispatch(args)
    except ConfigError as exc:
        print(f"cairn: configuration error: {exc}", file=sys.stderr)
        return 2
    except (NatsServerError, StoreTooNew, StoreUnreadable, BusRefused) as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1


def _dispatch(args: Any) -> int:
    env = load_env()
    if args.command == "up":
        names = [s.name for s in root.chosen(env)]
        return asyncio.run(serve(names, env, frozenset(), routes=args.verbose))
    if args.command == "serve":
        flags = frozenset({"sim"}) if args.sim else frozenset()
        chosen = list(dict.fromkeys(args.service))
        return asyncio.run(serve(chosen, env, flags, routes=args.verbose))
    if args.command == "sim":
        run_sim(args.rest)
    handler = getattr(args, "handler", None)
    if handler is None:
        raise SystemExit(f"cairn: unknown command {args.command}")
    return int(handler(args, env) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
