"""One actor per cluster node: the work the Proxmox port does on it, and its resource figures.

Every operation of the port (actors/vm/pve.py) on a node runs as a job of the node's actor,
which counts what is in flight and, when it stops, cancels what still runs (a local `qm` is
killed); the node's figures (from `/cluster/resources`) live here too, so the list and the
placement checks read one place. The actor has no stored history: everything it knows is
re-read from the cluster. `Cluster` is the loop-side face: the port, routed through the node
actors (`Cluster.pve`), and the fence a cluster-mode host sets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

import attrs

from actors.runtime import ActorHandle, ActorHost, ActorUnavailable, AggregateActor
from actors.vm import pve
from actors.vm.pve import NodeResource, Pve
from actors.vm.settings import VmSettings
from events.model import Event

_T = TypeVar("_T")

log = logging.getLogger(__name__)


@attrs.frozen
class Run:
    work: Callable[[], Coroutine[Any, Any, Any]]
    result: concurrent.futures.Future[Any]


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
        super().setup(**kwargs)
        self.address = address
        self.resource: NodeResource | None = None
        self.in_flight = 0

    def apply(self, event: Event) -> None:
        return None

    def handle(self, message: Any) -> Any:
        match message:
            case Run():
                self.in_flight += 1
                job = self.start_job(message.work(), done=_Finished)
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


def _settle(result: concurrent.futures.Future[Any], job: concurrent.futures.Future[Any]) -> None:
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
    """The loop-side face of the node actors: the Proxmox port whose work on a node runs
    through that node's actor (`pve`), fenced while this host must not act on the cluster."""

    def __init__(
        self,
        settings: VmSettings,
        handles: Mapping[str, ActorHandle],
        env: Mapping[str, str],
        port: Callable[[Cluster], Pve] | None = None,
    ) -> None:
        self.settings = settings
        self._handles = dict(handles)
        self.pve: Pve = port(self) if port is not None else pve_for(settings, env, self.on)
        # Cluster mode: why this host must not act on the cluster now (its lease is stale,
        # events/leases.py), checked before every operation; None: nothing stops it.
        self.fence: Callable[[], str | None] = _unfenced

    @classmethod
    async def start(
        cls,
        host: ActorHost,
        settings: VmSettings,
        env: Mapping[str, str],
        *,
        port: Callable[[Cluster], Pve] | None = None,
    ) -> Cluster:
        """The node actors and the port the settings choose (`port`: another one, e.g. a
        FakePve, given the cluster to route through)."""
        handles: dict[str, ActorHandle] = {}
        for name, address in sorted(settings.nodes.items()):
            handles[name] = await host.spawn(NodeActor, name, address=address)
        return cls(settings, handles, env, port)

    @property
    def driver(self) -> str:
        """`api` or `cli`: which way operations reach Proxmox (settings.driver)."""
        return self.settings.driver

    @property
    def names(self) -> list[str]:
        return sorted(self._handles)

    async def on(self, node: str, work: Callable[[], Awaitable[_T]], /) -> _T:
        """Run one piece of the port's work as a job of `node`'s actor."""
        handle = self._handles.get(node)
        if handle is None:
            raise pve.NotFound(f"no such cluster node '{node}'")
        if (fenced := self.fence()) is not None:
            log.warning("not acting on %s: %s", node, fenced)
            raise pve.PveError(f"cairn: not run: {fenced}")
        result: concurrent.futures.Future[_T] = concurrent.futures.Future()

        async def job() -> _T:
            return await work()

        try:
            await handle.tell(Run(job, result))
        except ActorUnavailable as exc:
            if "is stopped" not in str(exc):
                raise
            # The node actors stop before a job that was still going learnt of the shutdown:
            # as for work a stopping node actor cancelled, the caller is cancelled, and the
            # task is settled at the next start, never recorded as failed by this.
            raise asyncio.CancelledError(f"{node}: {exc}") from None
        return await asyncio.wrap_future(result)

    async def set_figures(self, resources: list[NodeResource]) -> None:
        for resource in resources:
            handle = self._handles.get(resource.node)
            if handle is not None:
                await handle.tell(Figures(resource))

    async def views(self) -> list[NodeView]:
        return [await self._handles[name].ask(Snapshot()) for name in self.names]

    async def stop(self, host: ActorHost) -> None:
        """Stop the node actors (the work they run is cancelled)."""
        for name in self.names:
            await host.stop(NodeActor, name)

    async def close(self) -> None:
        await self.pve.close()


def _unfenced() -> str | None:
    return None


def pve_for(settings: VmSettings, env: Mapping[str, str], on: pve.Runner) -> Pve:
    """The adapter the settings choose: REST with an API configured (PVE_DRIVER=api), else
    the CLI (qm locally on the main node, over SSH on the others)."""
    if settings.driver == "api" and settings.api is not None:
        from actors.vm.pveapi.adapter import RestPve
        from actors.vm.pveapi.client import PveClient
        from actors.vm.pveapi.wire import normalize_fingerprint, parse_token

        api = settings.api
        client = PveClient(
            api.url,
            parse_token(api.token),
            fingerprint=normalize_fingerprint(api.fingerprint) if api.fingerprint else None,
            ca_file=api.ca_file,
            timeout=api.timeout,
        )
        # Every node through the one pveproxy cairn talks to: it forwards /nodes/<n>.
        return RestPve(client, settings.main_node, on=on, task_timeout=settings.command_timeout)
    from actors.vm.cli.adapter import CliPve

    return CliPve.for_settings(settings, env, on=on)
