"""A real nginx, started by a test with one of ops/deploy/nginx/'s example sites."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from tests.conftest import wait_for

NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
EXAMPLES = Path(__file__).resolve().parents[1] / "ops" / "deploy" / "nginx"


# The name the test certificate is for (a client sends it as Host).
SITE = "cairn.test"


def certificate(work: Path) -> tuple[Path, Path]:
    """A self-signed certificate for SITE, valid a day, and its key."""
    work.mkdir(parents=True, exist_ok=True)
    cert, key = work / "cert.pem", work / "key.pem"
    subject = ["-subj", f"/CN={SITE}", "-keyout", str(key), "-out", str(cert)]
    openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run([*openssl, *subject], check=True, capture_output=True)
    return cert, key


def tls_site(upstreams: Mapping[int, int], https: int, http: int, cert: Path, key: Path) -> str:
    """The example TLS site on loopback: each upstream port it names moved to the test's
    (example port -> test port), listening on `https` and `http`, with this certificate."""
    site = (EXAMPLES / "cairn-tls.conf").read_text()
    swaps = [(f"server 127.0.0.1:{a};", f"server 127.0.0.1:{b};") for a, b in upstreams.items()]
    swaps += [
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https} ssl http2;"),
        ("listen 80;", f"listen 127.0.0.1:{http};"),
        ("/etc/ssl/cairn/fullchain.pem", str(cert)),
        ("/etc/ssl/cairn/privkey.pem", str(key)),
    ]
    for old, new in swaps:
        assert old in site, old  # the example changed: the test must follow it
        site = site.replace(old, new)
    return site


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
