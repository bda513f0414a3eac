"""The ``cairn`` command: ``up``, ``serve <service>``, ``sim`` and ``search …``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from events.nats_server import NatsServerError, free_port
from gateway import services as catalogue
from gateway.config import ConfigError, env_int, env_str, load_env
from gateway.runtime import Runtime, open_runtime
from gateway.services import ServiceDef

log = logging.getLogger("cairn")


def route_lines(app: web.Application) -> list[str]:
    """Every registered route as ``METHOD path``, sub-apps included (the spec asks for them)."""
    lines = []
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or info.get("prefix") or "?"
        if route.method == "HEAD":
            continue
        lines.append(f"{route.method:<7} {path}")
    return lines


def listen_address(env: Mapping[str, str], service: ServiceDef, *, single: bool) -> tuple[str, int]:
    if service.loopback_only:
        host = service.default_host
    else:
        host = env_str(env, service.host_env) or service.default_host
    port = None
    if single:
        port = env_int(env, "PORT", None, min=1, max=65535)
    if port is None:
        port = env_int(env, service.port_env, service.default_port, min=1, max=65535)
    return host, port if port is not None else free_port(host)


async def serve(names: Sequence[str], env: Mapping[str, str], flags: frozenset[str]) -> int:
    single = len(names) == 1
    chosen = [catalogue.load(name) for name in names]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with open_runtime(env, flags=flags) as runtime, contextlib.AsyncExitStack() as stack:
        print(f"cairn: data in {runtime.data_dir}", flush=True)
        where = "embedded" if runtime.embedded_nats else "external"
        print(f"cairn: nats {runtime.nats_url} ({where})", flush=True)
        for service in chosen:
            runtime.listen[service.name] = listen_address(env, service, single=single)
        for service in chosen:
            await _start_service(runtime, service, stack)
        print("cairn: ready (Ctrl-C stops)", flush=True)
        await stop.wait()
        print("cairn: stopping", flush=True)
    return 0


async def _start_service(
    runtime: Runtime, service: ServiceDef, stack: contextlib.AsyncExitStack
) -> None:
    host, port = runtime.listen[service.name]
    app = await service.build(runtime)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        rule = f"cannot listen on {host}:{port}: {exc.strerror}"
        raise ConfigError(service.port_env, rule) from None
    print(f"cairn: {service.name} on http://{host}:{port}", flush=True)
    for line in route_lines(app):
        print(f"    {line}", flush=True)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cairn", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="embedded NATS and every service")
    serve_p = sub.add_parser("serve", help="one service in the foreground")
    serve_p.add_argument("service", choices=[n for n in catalogue.KNOWN if n != "status"])
    serve_p.add_argument("--sim", action="store_true", help="vm: drive a simulated cluster")
    sub.add_parser("sim", help="the simulated Proxmox cluster alone (cairn sim --help)")
    if importlib.util.find_spec("gateway.search_cli"):
        importlib.import_module("gateway.search_cli").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:
        # The simulator owns its options; argparse's REMAINDER would refuse leading ones.
        from pvesim.cli import run_sim

        return int(run_sim(argv[1:]) or 0)
    args = _build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"cairn: configuration error: {exc}", file=sys.stderr)
        return 2
    except NatsServerError as exc:
        print(f"cairn: {exc}", file=sys.stderr)
        return 1


def _dispatch(args: Any) -> int:
    env = load_env()
    if args.command == "up":
        names = [s.name for s in catalogue.available()]
        return asyncio.run(serve(names, env, frozenset()))
    if args.command == "serve":
        flags = frozenset({"sim"}) if args.sim else frozenset()
        return asyncio.run(serve([args.service], env, flags))
    if args.command == "sim":
        from pvesim.cli import run_sim

        return int(run_sim(args.rest) or 0)
    handler = getattr(args, "handler", None)
    if handler is None:
        raise SystemExit(f"cairn: unknown command {args.command}")
    return int(handler(args, env) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
