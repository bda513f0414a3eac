"""Benchmark of the token check (issue 31): what identities add to a request, measured in one
run against the same services with no token.

1. ``POST /run-now`` (trivial Python) and a cached image variant ``GET /c/img/…?w=64``, sent
   one after another through real HTTP to the functions and images services of one ``cairn``
   process (embedded NATS, real sandbox), alternating request by request between no tokens
   file (identities off) and a tokens file with a ``Bearer`` token on the request (so
   both see the same moment of a busy machine). The file is put back before each request with
   a token, so each such request also re-reads it: the figure is an upper bound of the steady
   cost (one ``stat``). Image reads are public by default; here ``CAIRN_PUBLIC_ROUTES`` keeps
   only ``/health`` public, so the read's token is checked too. Figures: medians, the
   difference, the ratio.
2. The check alone: the identity middleware's decision (file stat, route table, SHA-256 and
   lookup) per request, timed over many calls in this process.

Target: the token check adds <= 0.2 ms to the median of both requests.

    .venv/bin/python -m ops.bench.tokens [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from actors.platform import open_runtime
from events.nats_server import free_port
from gateway import server as root
from gateway.http.identity import auth_guard
from gateway.http.roles import RouteRoles
from gateway.http.tokens import FILE_NAME, Role, TokenStore, create
from gateway.server import journal
from gateway.services import build_app

from .stats import ms_line

TARGET_MS = 0.2
RUN = {"language": "python", "code": "def handler(x):\n    return 1\n"}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEklEQVR4nGP4z8CAFWEXHbQSACj/P8Fu7N9hAAAAAElFTkSuQmCC"
)

Request = Callable[[aiohttp.ClientSession, dict[str, str]], Awaitable[None]]


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port("127.0.0.1")
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


def run_now(base: str) -> Request:
    async def one(http: aiohttp.ClientSession, headers: dict[str, str]) -> None:
        async with http.post(f"{base}/run-now", json=RUN, headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise SystemExit(f"/run-now answered {resp.status}: {body[:200]!r}")

    return one


def image_read(base: str) -> Request:
    async def one(http: aiohttp.ClientSession, headers: dict[str, str]) -> None:
        async with http.get(f"{base}/c/img/bench/dot.png?w=64", headers=headers) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise SystemExit(f"image read answered {resp.status}: {body[:200]!r}")

    return one


async def timed(http: aiohttp.ClientSession, request: Request, headers: dict[str, str]) -> float:
    start = time.perf_counter()
    await request(http, headers)
    return time.perf_counter() - start


def check_alone(data: Path, token: str, calls: int) -> float:
    """Seconds per decision of the identity middleware, with a token to verify."""
    guard = auth_guard("functions", TokenStore(data / FILE_NAME), RouteRoles.from_env({}))
    request = make_mocked_request(
        "POST", "/run-now", headers={"Authorization": f"Bearer {token}", "Host": "127.0.0.1"}
    )

    async def handler(_: web.Request) -> web.StreamResponse:
        return web.Response()

    async def loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            await guard(request, handler)
        return (time.perf_counter() - start) / calls

    return asyncio.run(loop())  # on a thread of its own: no loop runs there


async def bench(count: int) -> int:
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        env = {"CAIRN_DATA": str(data), "CAIRN_PUBLIC_ROUTES": "* GET /health"}
        async with open_runtime(env, data, journal=journal()) as runtime:
            functions, fn_base = await serve(await build_app(root.load("functions"), runtime))
            images, img_base = await serve(await build_app(root.load("images"), runtime))
            path = data / FILE_NAME
            token = create(path, "bench", Role.ADMIN)
            tokens_file = path.read_bytes()
            path.unlink()
            try:
                async with aiohttp.ClientSession() as http:
                    form = aiohttp.FormData()
                    form.add_field("filepath", PNG, filename="dot.png", content_type="image/png")
                    async with http.post(f"{img_base}/upload/bench", data=form) as resp:
                        assert resp.status == 201, await resp.text()
                    requests = {
                        "POST /run-now": run_now(fn_base),
                        "GET /c/img (cached)": image_read(img_base),
                    }
                    samples: dict[tuple[str, bool], list[float]] = {
                        (name, on): [] for name in requests for on in (False, True)
                    }
                    for name, request in requests.items():
                        for _ in range(5):  # warm: the runner pool, the variant cache
                            await request(http, {})
                        for i in range(2 * count):
                            on = (i % 4) in (1, 2)  # off on on off: neither always first
                            if on:
                                path.write_bytes(tokens_file)
                                headers = {"Authorization": f"Bearer {token}"}
                            else:
                                path.unlink(missing_ok=True)
                                headers = {}
                            samples[(name, on)].append(await timed(http, request, headers))
            finally:
                await functions.cleanup()
                await images.cleanup()
        print(
            f"machine: {os.cpu_count()} cores; {count} sequential requests per figure, "
            "alternating with and without a token\n"
        )
        for name in requests:
            without, with_token = samples[(name, False)], samples[(name, True)]
            added = (statistics.median(with_token) - statistics.median(without)) * 1e3
            ratio = statistics.median(with_token) / statistics.median(without)
            print(f"{name:<22} no tokens:   {ms_line(without)}")
            print(f"{'':<22} with token:  {ms_line(with_token)}")
            print(
                f"{'':<22} added {added:+.3f} ms median, ratio {ratio:.3f}x "
                f"(target <= +{TARGET_MS} ms)\n"
            )
            if added > TARGET_MS:
                failures.append(f"{name} +{added:.3f} ms")
        path.write_bytes(tokens_file)
        per_check = await asyncio.to_thread(check_alone, data, token, 20_000)
        print(
            f"the check alone (stat, route table, SHA-256, lookup): {per_check * 1e6:.1f} µs "
            "per request"
        )
    print("\nresult:", "all targets met" if not failures else "MISSED: " + "; ".join(failures))
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    return asyncio.run(bench(args.requests))


if __name__ == "__main__":
    sys.exit(main())
