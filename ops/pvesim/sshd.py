"""asyncssh servers of the simulated cluster: one per non-main node, one per running guest."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import asyncssh

from . import guest as guest_mod
from . import guestfs
from .commands import execute
from .context import Ctx, take_failure
from .guest import GuestRun
from .state import Store

log = logging.getLogger("pvesim")


class _TrackingServer(asyncssh.SSHServer):
    """Public-key auth for one user against a fixed key set; remembers live connections."""

    def __init__(self, owner: _Listener) -> None:
        self._owner = owner
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._owner.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._owner.connections.discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return username == self._owner.user and key.public_data in self._owner.allowed


class _Listener:
    def __init__(self, user: str, allowed_keys: Sequence[asyncssh.SSHKey]) -> None:
        self.user = user
        self.allowed = {k.public_data for k in allowed_keys}
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self.acceptor: asyncssh.SSHAcceptor | None = None

    async def listen(
        self, host: str, port: int, host_key: asyncssh.SSHKey, handler: Callable[..., Any]
    ) -> None:
        self.acceptor = await asyncssh.listen(
            host,
            port,
            server_factory=lambda: _TrackingServer(self),
            server_host_keys=[host_key],
            process_factory=handler,
            encoding=None,
            keepalive_interval=0,
        )

    async def close(self) -> None:
        if self.acceptor is not None:
            self.acceptor.close()
            await self.acceptor.wait_closed()
            self.acceptor = None
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()


class NodeSSH:
    """A non-main node: each exec request runs one qm/pvesh/pvesm command line as this node."""

    def __init__(
        self, store: Store, node: str, host: str, port: int, host_key: asyncssh.SSHKey,
        client_keys: Sequence[asyncssh.SSHKey], executor: Executor, user: str = "root",
    ) -> None:  # fmt: skip
        self.store = store
        self.node = node
        self.host = host
        self.port = port
        self.host_key = host_key
        self.executor = executor
        self._listener = _Listener(user, client_keys)

    async def start(self) -> None:
        await self._listener.listen(self.host, self.port, self.host_key, self._handle)

    async def stop(self) -> None:
        await self._listener.close()

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if not command:
            process.stderr.write(b"pvesim: interactive shells are not simulated\n")
            process.exit(1)
            return
        loop = asyncio.get_running_loop()

        def write(stream: Any) -> Callable[[str], None]:
            def emit(text: str) -> None:
                loop.call_soon_threadsafe(stream.write, text.encode())

            return emit

        def read_stdin() -> str:
            data = asyncio.run_coroutine_threadsafe(process.stdin.read(), loop).result()
            return data.decode(errors="replace")

        try:
            argv = shlex.split(command)
        except ValueError:
            process.stderr.write(
                b"bash: -c: line 1: unexpected EOF while looking for matching quote\n"
            )
            process.exit(2)
            return
        ctx = Ctx(self.store, self.node, write(process.stdout), write(process.stderr), read_stdin)
        try:
            code = await loop.run_in_executor(self.executor, execute, ctx, argv)
        except Exception as exc:  # a bug in the simulator must not look like a hung node
            log.exception("pvesim: command failed on %s: %s", self.node, command)
            process.stderr.write(f"pvesim internal error: {exc}\n".encode())
            code = 255
        # Let the writes queued by the worker thread run before the exit status.
        await asyncio.sleep(0)
        process.exit(code)


class Guest:
    """One running VM's SSH server on its cloud-init address."""

    def __init__(self, store: Store, vmid: int, boot: dict[str, Any], host_key: asyncssh.SSHKey,
                 port: int, log_path: Path, executor: Executor) -> None:  # fmt: skip
        self.store = store
        self.vmid = vmid
        self.boot = boot
        self.host_key = host_key
        self.port = port
        self.log_path = log_path
        self.executor = executor
        keys = []
        for line in boot.get("keys", []):
            with contextlib.suppress(asyncssh.KeyImportError, ValueError):
                keys.append(asyncssh.import_public_key(line))
        self._listener = _Listener(str(boot.get("user") or ""), keys)
        self.runs: list[GuestRun] = []

    @property
    def address(self) -> str:
        return str(self.boot["ip"])

    async def start(self) -> None:
        await self._listener.listen(self.address, self.port, self.host_key, self._handle)

    async def stop(self) -> None:
        await self._listener.close()

    def _record(self, run: GuestRun) -> None:
        self.runs.append(run)
        entry = {"t": time.time(), "user": run.user, "command": run.command, "stdin": run.stdin,
                 "exit_status": run.exit_status}  # fmt: skip
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    async def _handle(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or ""
        user = process.get_extra_info("username") or ""
        ans = guest_mod.answer(command, user, str(self.boot.get("name", "")))
        stdin = ""
        out, err, status = ans.stdout, ans.stderr, ans.exit_status
        if ans.reads_script:
            stdin = (await process.stdin.read()).decode(errors="replace")
            out, err, status = await self._run_script(stdin)
        elif ans.proof_user is not None:
            stdin = (await process.stdin.read()).decode(errors="replace")
            proved = guest_mod.shadow_proof(
                guest_mod.cloud_init_shadow(self.boot), ans.proof_user, stdin
            )
            out, err, status = proved.stdout, proved.stderr, proved.exit_status
        self._record(GuestRun(user, command, stdin, status, out, err))
        if out:
            process.stdout.write(out.encode())
        if err:
            process.stderr.write(err.encode())
        process.exit(status)

    async def _run_script(self, script: str) -> tuple[str, str, int]:
        # Never run the script on the host: only check that bash can parse it.
        proc = await asyncio.create_subprocess_exec(
            "bash", "-n", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, errb = await proc.communicate(script.encode())
        if proc.returncode:
            return "", errb.decode(errors="replace"), int(proc.returncode)
        loop = asyncio.get_running_loop()

        def consume() -> Any:
            with self.store.locked() as txn:
                return take_failure(txn, "guest exec", "", self.vmid)

        failure = await loop.run_in_executor(self.executor, consume)
        if failure is not None:
            return "", failure.message + "\n", failure.exit_code

        def carry_out() -> guestfs.Outcome:
            # The VM's few files (guestfs.py), in its record: snapshots keep them.
            with self.store.locked() as txn:
                found = txn.find_vm(self.vmid)
                if found is None:
                    return guestfs.run(script, {})
                node, rec = found
                files = rec.setdefault(guestfs.FILES, {})
                done = guestfs.run(script, files)
                txn.save_vm(node, rec)
                return done

        done = await loop.run_in_executor(self.executor, carry_out)
        if done.sleep:
            await asyncio.sleep(done.sleep)
        return done.stdout, done.stderr, done.status
