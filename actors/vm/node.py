"""One actor per cluster node: it owns the node's transport and its resource figures.

Commands for a node go through its actor, which starts each one as a job on its transport and
counts what is in flight; the node's figures (from `/cluster/resources`) live here too, so the
list and the placement checks read one place. The actor has no stored history: everything it
knows is re-read from the cluster.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from actors.runtime import ActorHandle, ActorHost, ActorUnavailable, AggregateActor
from actors.vm.pve_output import CommandResult, NodeResource
from actors.vm.pveapi.client import PveClient
from actors.vm.pveapi.driver import ApiTransport
from actors.vm.pveapi.wire import normalize_fingerprint, parse_token
from actors.vm.settings import VmSettings
from actors.vm.transport import LineSink, LocalTransport, SshTransport, Transport
from events.model import Event

log = logging.getLogger(__name__)


@attrs.frozen
class Run:
    argv: list[str]
    stdin: bytes | None
    on_line: LineSink | None
    result: concurrent.futures.Future[CommandResult]


@attrs.frozen
class _Finished:
    outcome: Any


@attrs.frozen
class Figures:
    resource: NodeResource


@attrs.frozen
class Snapshot:
    pass


@attrs.frozen
class NodeView:
    name: str
    address: str
    resource: NodeResource | None
    in_flight: int


class NodeActor(AggregateActor):
    aggregate = "vmnode"

    def setup(self, **kwargs: Any) -> None:
        address: str = kwargs.pop("address")
        transport: Transport = kwargs.pop("transport")
        super().setup(**kwargs)
        self.address = address
        self.transport = transport
        self.resource: NodeResource | None = None
        self.in_flight = 0

    def apply(self, event: Event) -> None:
        return None

    def handle(self, message: Any) -> Any:
        match message:
            case Run():
                self.in_flight += 1
                job = self.start_job(
                    self.transport.run(message.argv, stdin=message.stdin, on_line=message.on_line),
                    done=_Finished,
                )
                # Settled from the job itself, not through this actor's inbox: if the actor
                # stops or crashes first, the caller must still get an answer, never a hang.
                job.add_done_callback(functools.partial(_settle, message.result))
                return None
            case _Finished():
                self.in_flight -= 1
                return None
            case Figures(resource=resource):
                self.resource = resource
                return None
            case Snapshot():
                return NodeView(self.ident, self.address, self.resource, self.in_flight)
        raise TypeError(f"node: unknown message {message!r}")


def _settle(
    result: concurrent.futures.Future[CommandResult], job: concurrent.futures.Future[CommandResult]
) -> None:
    if job.cancelled():
        # The node actor stopped (shutdown) and killed the command: the caller's wait is
        # cancelled too, as if it had been stopped itself; tasks cut off so are settled at the
        # next start (VmActor's Recover), never recorded as a failure of their own.
        result.cancel()
        return
    # The caller may have given up (cancelled at shutdown), even while we look.
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if (exc := job.exception()) is not None:
            result.set_exception(exc)
        else:
            result.set_result(job.result())


class Cluster:
    """The loop-side face of the node actors: run a command on a named node."""

    def __init__(self, settings: VmSettings, handles: Mapping[str, ActorHandle]) -> None:
        self.settings = settings
        self._handles = dict(handles)
        self.transports: list[Transport] = []
        # Cluster mode: why this host must not act on the cluster now (its lease is stale,
        # events/leases.py), checked before every command; None: nothing stops it.
        self.fence: Callable[[], str | None] = _unfenced

    @classmethod
    async def start(cls, host: ActorHost, settings: VmSettings, env: Mapping[str, str]) -> Cluster:
        handles: dict[str, ActorHandle] = {}
        transports: list[Transport] = []
        api = _api_client(settings)
        for name, address in sorted(settings.nodes.items()):
            transport: Transport
            if api is not None:
                # Every node through the one pveproxy cairn talks to: it forwards /nodes/<n>.
                transport = ApiTransport(api, name, task_timeout=settings.command_timeout)
            elif name == settings.main_node and not settings.main_over_ssh:
                transport = LocalTransport(env, timeout=settings.command_timeout)
            else:
                transport = SshTransport(
                    address,
                    port=settings.node_ssh_port,
                    username=settings.node_ssh_user,
                    client_key=settings.node_ssh_key,
                    known_hosts=settings.known_hosts,
                    timeout=settings.command_timeout,
                )
            transports.append(transport)
            handles[name] = await host.spawn(NodeActor, name, address=address, transport=transport)
        cluster = cls(settings, handles)
        cluster.transports = transports
        return cluster

    @property
    def driver(self) -> str:
        """`api` or `cli`: which way commands reach Proxmox (settings.driver)."""
        return self.settings.driver

    @property
    def names(self) -> list[str]:
        return sorted(self._handles)

    async def run(
        self,
        node: str,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        on_line: LineSink | None = None,
    ) -> CommandResult:
        handle = self._handles.get(node)
        if handle is None:
            return CommandResult(255, "", f"no such cluster node '{node}'\n")
        if (fenced := self.fence()) is not None:
            log.warning("not running %s on %s: %s", argv[:2], node, fenced)
            return CommandResult(255, "", f"cairn: not run: {fenced}\n")
        result: concurrent.futures.Future[CommandResult] = concurrent.futures.Future()
        try:
            await handle.tell(Run(argv, stdin, on_line, result))
        except ActorUnavailable as exc:
            if "is stopped" not in str(exc):
                raise
            # The node actors stop before a job that was still going learnt of the shutdown:
            # as for a command a stopping node actor killed, the caller is cancelled, and the
            # task is settled at the next start, never recorded as failed by this.
            raise asyncio.CancelledError(f"{node}: {exc}") from None
        return await asyncio.wrap_future(result)

    async def main(self, argv: list[str], **kwargs: Any) -> CommandResult:
        return await self.run(self.settings.main_node, argv, **kwargs)

    async def set_figures(self, resources: list[NodeResource]) -> None:
        for resource in resources:
            handle = self._handles.get(resource.node)
            if handle is not None:
                await handle.tell(Figures(resource))

    async def views(self) -> list[NodeView]:
        return [await self._handles[name].ask(Snapshot()) for name in self.names]

    async def stop(self, host: ActorHost) -> None:
        """Stop the node actors (their running commands are killed)."""
        for name in self.names:
            await host.stop(NodeActor, name)

    async def close(self) -> None:
        for transport in self.transports:
            await transport.close()


def _unfenced() -> str | None:
    return None


def _api_client(settings: VmSettings) -> PveClient | None:
    if settings.driver != "api" or settings.api is None:
        return None
    api = settings.api
    return PveClient(
        api.url,
        parse_token(api.token),
        fingerprint=normalize_fingerprint(api.fingerprint) if api.fingerprint else None,
        ca_file=api.ca_file,
        timeout=api.timeout,
    )
