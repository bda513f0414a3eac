"""How a command reaches a node: a local subprocess on the main node, SSH to the others.

Both take an argv list and return a CommandResult; output lines can be streamed as they come
(a migration's log goes to the client live). SSH checks the node's host key against a
known-hosts file; there is no option to turn that off.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Mapping
from typing import Protocol

import asyncssh

from actors.vm.cli.output import CommandResult
from actors.vm.pve import LineSink
from events.children import end_child


class Transport(Protocol):
    async def run(
        self, argv: list[str], *, stdin: bytes | None = None, on_line: LineSink | None = None
    ) -> CommandResult: ...

    async def close(self) -> None: ...


class _LineReader(Protocol):
    """A subprocess pipe (asyncio) or an SSH channel stream (asyncssh, bytes mode)."""

    async def readline(self) -> bytes: ...


async def _pump(stream: _LineReader, out: list[str], on_line: LineSink | None) -> None:
    while True:
        raw = await stream.readline()
        if not raw:
            return
        line = raw.decode(errors="replace")
        out.append(line)
        if on_line is not None:
            on_line(line.rstrip("\n"))


class LocalTransport:
    """`qm` and friends as local subprocesses (the main node); found on PATH from `env`."""

    def __init__(self, env: Mapping[str, str], timeout: float = 900.0) -> None:
        self._env = {**os.environ, **env}
        self._timeout = timeout

    async def run(
        self, argv: list[str], *, stdin: bytes | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env,
        )
        assert proc.stdout is not None and proc.stderr is not None
        out: list[str] = []
        err: list[str] = []
        try:
            if stdin is not None:
                assert proc.stdin is not None
                proc.stdin.write(stdin)
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
                proc.stdin.close()
            async with asyncio.timeout(self._timeout):
                await asyncio.gather(
                    _pump(proc.stdout, out, on_line), _pump(proc.stderr, err, None)
                )
                rc = await proc.wait()
        except TimeoutError:
            # A hung qm must not hold its VM busy forever.
            await end_child(proc)
            return CommandResult(
                124, "".join(out), f"{argv[0]}: timed out after {self._timeout:g}s\n"
            )
        except asyncio.CancelledError:
            # Shutting down: the command must not outlive the service (nor stay a zombie).
            await end_child(proc)
            raise
        return CommandResult(rc, "".join(out), "".join(err))

    async def close(self) -> None:
        return None


class SshTransport:
    """One kept-open SSH connection to a node, reopened when it drops."""

    def __init__(
        self,
        host: str,
        *,
        port: int,
        username: str,
        client_key: str | None,
        known_hosts: str | None,
        connect_timeout: float = 10.0,
        timeout: float = 900.0,
    ) -> None:
        self.host = host
        self._timeout = timeout
        self._options = dict(
            port=port,
            username=username,
            client_keys=[client_key] if client_key else None,
            known_hosts=known_hosts if known_hosts else (),
            connect_timeout=connect_timeout,
            agent_path=None,
            # Our own settings only: a developer's ~/.ssh/config must not change what runs.
            config=None,
        )
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    async def _connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = await asyncssh.connect(self.host, **self._options)
            return self._conn

    async def run(
        self, argv: list[str], *, stdin: bytes | None = None, on_line: LineSink | None = None
    ) -> CommandResult:
        try:
            conn = await self._connection()
        except (OSError, asyncssh.Error) as exc:
            # ssh itself exits 255 on connection or auth failure: the same status here.
            return CommandResult(255, "", f"ssh: connect to host {self.host}: {exc}\n")
        command = shlex.join(argv)
        try:
            async with (
                asyncio.timeout(self._timeout),
                conn.create_process(command, encoding=None) as proc,
            ):
                if stdin is not None:
                    proc.stdin.write(stdin)
                proc.stdin.write_eof()
                out: list[str] = []
                err: list[str] = []
                await asyncio.gather(
                    _pump(proc.stdout, out, on_line), _pump(proc.stderr, err, None)
                )
                completed = await proc.wait(check=False)
        except TimeoutError:
            return CommandResult(
                124, "", f"ssh: {self.host}: {argv[0]} timed out after {self._timeout:g}s\n"
            )
        except (OSError, asyncssh.Error) as exc:
            self._conn = None
            return CommandResult(255, "", f"ssh: {self.host}: {exc}\n")
        rc = completed.exit_status if completed.exit_status is not None else 255
        return CommandResult(rc, "".join(out), "".join(err))

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await self._conn.wait_closed()
            self._conn = None
