"""A real nginx, started by a test with one of ops/deploy/nginx/'s example sites."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import wait_for

NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
EXAMPLES = Path(__file__).resolve().parents[1] / "ops" / "deploy" / "nginx"


def _write_config(site: str, work: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""
    (work / "nginx.conf").write_text(
        f"""{user}
worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
{site}
}}
"""
    )


@contextlib.asynccontextmanager
async def running_nginx(site: str, work: Path, port: int) -> AsyncIterator[None]:
    """nginx serving ``site`` (an http{} block's content) until the block ends; ``port`` is
    one it listens on, waited for before the block starts."""
    if NGINX is None:
        pytest.skip("nginx is not installed (ops/apt-packages-dev.txt lists nginx-light)")
    _write_config(site, work)
    proc = await asyncio.create_subprocess_exec(
        NGINX, "-c", str(work / "nginx.conf"), "-p", str(work)
    )

    async def answering() -> bool:
        if proc.returncode is not None:
            raise AssertionError("nginx exited: " + (work / "error.log").read_text())
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        return True

    try:
        await wait_for(answering, what="nginx listening")
        yield
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
