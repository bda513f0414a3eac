"""A local N-server NATS cluster with JetStream, on free loopback ports: for tests, benchmarks
and trying cluster mode on one machine.

Each server is a real ``nats-server`` process with its own configuration file, store directory,
client port and route port, closed as the shipped recipe is (``events/cluster_kit.py``): TLS to
clients and between servers, route peers proven by a certificate of the cluster's own CA, and
cairn's roles' nkeys alone let in; all of them route to each other and form one JetStream cluster
(the meta group needs a majority, so three servers survive the loss of one). A server can be
killed (``kill -9``), paused (``SIGSTOP``/``SIGCONT``) and started again on the same ports and
store, which is what fault tests need. Children are tied to the thread that started them, like
the embedded server (``events.nats_server``): a ``kill -9`` of the owner takes them down.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import attrs
from nats.aio.client import Client

from events.access import NatsAccess
from events.cluster_kit import ClusterKit, Member
from events.nats_server import (
    _TIED_TO_PARENT,
    NatsServerError,
    end_server,
    find_binary,
    free_port,
)
from events.permissions import Role, accounts_block

__all__ = ["ClusterServer", "NatsCluster", "cluster_config"]

CLUSTER_NAME = "cairn"


@attrs.define
class ClusterServer:
    """One member: its name, ports and store; ``proc`` while it runs."""

    name: str
    host: str
    port: int
    route_port: int
    store_dir: Path
    config_path: Path
    proc: asyncio.subprocess.Process | None = None
    secure: bool = True

    @property
    def url(self) -> str:
        return f"{'tls' if self.secure else 'nats'}://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


def cluster_config(
    name: str,
    host: str,
    port: int,
    route_port: int,
    store_dir: Path,
    routes: list[tuple[str, int]],
    cluster_name: str = CLUSTER_NAME,
    kit: ClusterKit | None = None,
) -> str:
    """A nats-server configuration file for one member of a JetStream cluster; with a kit,
    closed: TLS on both ports, route peers must show a certificate of the kit's CA, and only
    the kit's keys may connect."""
    route_urls = ", ".join(f'"nats-route://{h}:{p}"' for h, p in routes)
    tls = route_tls = auth = ""
    if kit is not None:
        files = (
            f'cert_file: "{kit.cert_file(name)}", key_file: "{kit.key_file(name)}", '
            f'ca_file: "{kit.ca_file}", timeout: 5'
        )
        tls = f"tls {{ {files} }}\n"
        route_tls = f"  tls {{ {files}, verify: true }}\n"
        auth = accounts_block(kit.keyring.public_keys())
    return (
        f"server_name: {name}\n"
        f'listen: "{host}:{port}"\n'
        f'jetstream {{ store_dir: "{store_dir}" }}\n' + tls + "cluster {\n"
        f"  name: {cluster_name}\n"
        f'  listen: "{host}:{route_port}"\n' + route_tls + f"  routes: [{route_urls}]\n"
        "}\n" + auth
    )


class NatsCluster:
    """``size`` clustered nats-servers under ``root``; ``start`` returns once JetStream
    answers on every member (a meta leader is elected)."""

    def __init__(
        self, root: Path, size: int = 3, *, host: str = "127.0.0.1", secure: bool = True
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one server")
        self.root = root
        self.host = host
        self.secure = secure
        self.kit: ClusterKit | None = None
        self.servers: list[ClusterServer] = []
        for i in range(1, size + 1):
            name = f"n{i}"
            self.servers.append(
                ClusterServer(
                    name=name,
                    host=host,
                    port=free_port(host),
                    route_port=free_port(host),
                    store_dir=root / name / "jetstream",
                    config_path=root / name / "nats.conf",
                    secure=secure,
                )
            )

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    @property
    def url(self) -> str:
        """Every member, comma-separated: what ``NATS_URL`` takes (``events.bus.connect``
        splits it; give nats-py's own ``connect`` the list, :attr:`urls`)."""
        return ",".join(self.urls)

    @property
    def access(self) -> NatsAccess:
        """How a cairn host reaches this cluster (its keys, its CA)."""
        if self.kit is None:
            return NatsAccess(self.url)
        return NatsAccess(self.url, self.kit.keyring, self.kit.ca_file)

    def client_env(self) -> dict[str, str]:
        """``NATS_URL``, ``NATS_KEYS`` and ``NATS_CA`` for a cairn host of this cluster."""
        if self.kit is None:
            return {"NATS_URL": self.url, "NATS_KEYS": "none"}
        return {
            "NATS_URL": self.url,
            "NATS_KEYS": str(self.kit.keyring.path),
            "NATS_CA": str(self.kit.ca_file),
        }

    async def connect(self, role: Role = Role.HOST) -> Client:
        return await self.access.connect(role)

    async def start(self, timeout: float = 30.0) -> NatsCluster:
        routes = [(s.host, s.route_port) for s in self.servers]
        if self.secure:
            members = [Member(s.name, (s.host,)) for s in self.servers]
            self.kit = ClusterKit.create(self.root / "kit", members)
        for server in self.servers:
            server.store_dir.mkdir(parents=True, exist_ok=True)
            server.config_path.write_text(
                cluster_config(
                    server.name,
                    server.host,
                    server.port,
                    server.route_port,
                    server.store_dir,
                    routes,
                    kit=self.kit,
                )
            )
        for server in self.servers:
            await self._spawn(server)
        await self.until_ready(timeout)
        return self

    async def _spawn(self, server: ClusterServer) -> None:
        binary = find_binary()
        log_path = server.config_path.parent / "nats-server.log"
        with log_path.open("ab") as out:
            server.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-S", "-c", _TIED_TO_PARENT, str(os.getpid()),
                str(binary), "-c", str(server.config_path),
                stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True,
            )  # fmt: skip

    async def until_ready(self, timeout: float = 30.0) -> None:
        """Wait until JetStream answers on every running member."""

        async def quiet(_: Exception) -> None:
            """A member still coming up refuses connections: expected, tried again below."""

        deadline = asyncio.get_running_loop().time() + timeout
        for server in self.servers:
            if not server.running:
                continue
            while True:
                nc = Client()
                try:
                    await nc.connect(
                        server.url,
                        connect_timeout=1,
                        allow_reconnect=False,
                        max_reconnect_attempts=0,
                        error_cb=quiet,
                        **self.access.client_options(Role.HOST),
                    )
                    await nc.jetstream(timeout=1).account_info()
                    break
                except Exception as exc:
                    if asyncio.get_running_loop().time() > deadline:
                        raise NatsServerError(
                            f"JetStream cluster not ready on {server.name} ({server.url}) "
                            f"within {timeout:g} s: {exc!r}"
                        ) from None
                    # A process coming up offers nothing to await on.
                    await asyncio.sleep(0.05)
                finally:
                    with contextlib.suppress(Exception):
                        await nc.close()

    def _signal(self, index: int, sig: signal.Signals) -> None:
        server = self.servers[index]
        if server.proc is None:
            raise NatsServerError(f"server {server.name} is not running")
        os.kill(server.proc.pid, sig)

    async def kill(self, index: int) -> None:
        """``kill -9`` one member and reap it."""
        server = self.servers[index]
        self._signal(index, signal.SIGKILL)
        assert server.proc is not None
        await server.proc.wait()
        server.proc = None

    def pause(self, index: int) -> None:
        self._signal(index, signal.SIGSTOP)

    def resume(self, index: int) -> None:
        self._signal(index, signal.SIGCONT)

    async def restart(self, index: int, timeout: float = 30.0) -> None:
        """Start a stopped member again on its ports and store; wait until it serves."""
        server = self.servers[index]
        if server.running:
            raise NatsServerError(f"server {server.name} is already running")
        await self._spawn(server)
        await self.until_ready(timeout)

    async def stop(self) -> None:
        for server in self.servers:
            proc, server.proc = server.proc, None
            if proc is not None:
                await end_server(proc)

    async def __aenter__(self) -> NatsCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
