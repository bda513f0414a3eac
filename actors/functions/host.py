"""The actor-host side of the service: the registry (actor + NATS commands) and, unless
``FUNCTIONS_RUNNER=0``, a runner host in this process.

In cluster mode (``CAIRN_CLUSTER=1``) the registry runs on one host at a time, the holder of
the ``functions`` lease (``actors/leased.py``), with its code in the cluster's object store
(``actors/functions/sharedcode.py``); every host runs its gateway and its runner host (a NATS
queue group), so any gateway answers and every host takes runs.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from nats.aio.client import Client

from actors.functions.codestore import Code, CodeStore, LocalCode
from actors.functions.commands import serve_registry
from actors.functions.registry import FunctionRegistry
from actors.functions.runner_host import RunnerHost
from actors.functions.settings import FunctionsSettings
from actors.functions.sharedcode import SharedCode
from actors.hosting import HostParts
from actors.leased import Leased, Stop
from actors.platform import ClusterMode
from events.bus import unsubscribe_all
from events.leases import Lease
from events.tasks import cancel

LEASE = "functions"


class FunctionsParts(HostParts, Protocol):
    """What the functions service's host side uses beyond every domain's parts."""

    @property
    def runner_nc(self) -> Client:
        """The runner role's connection: runs are taken in its queue group."""
        ...

    @property
    def cluster(self) -> ClusterMode | None: ...


class FunctionsHost:
    def __init__(
        self,
        runtime: FunctionsParts,
        registry: Leased | Stop,
        runner: RunnerHost | None,
        healer: asyncio.Task[None] | None = None,
    ):
        self.runtime = runtime
        self.registry = registry
        self.runner = runner
        # Cluster mode: puts back code objects the bucket lost from this host's copies.
        self.healer = healer

    @classmethod
    async def start(
        cls, runtime: FunctionsParts, settings: FunctionsSettings, *, cluster: Leased | None = None
    ) -> FunctionsHost:
        """``cluster``: not None in cluster mode, made by :func:`leased_registry`."""
        registry: Leased | Stop
        healer = None
        if cluster is not None and runtime.cluster is not None:
            registry = await cluster.start()
            code = SharedCode(runtime.nc, _files(runtime), replicas=runtime.cluster.leases.replicas)
            healer = asyncio.create_task(code.heal_forever(), name="functions-code-healer")
        else:
            registry = await _serve(runtime, LocalCode(_files(runtime)))
        runner = None
        if settings.runner:
            runner = RunnerHost(runtime.runner_nc, settings, runtime.data_dir)
            await runner.start()
        return cls(runtime, registry, runner, healer)

    async def stop(self) -> None:
        await cancel(self.healer)
        if self.runner is not None:
            await self.runner.stop()
        if isinstance(self.registry, Leased):
            await self.registry.stop()
        else:
            await self.registry()

    def facts(self) -> dict[str, Any]:
        """For /health, in cluster mode: who runs the registry."""
        return {"lease": self.registry.facts()} if isinstance(self.registry, Leased) else {}


def leased_registry(runtime: FunctionsParts, cluster: ClusterMode) -> Leased:
    """The registry as cluster mode runs it: on the holder of the ``functions`` lease."""
    code = SharedCode(runtime.nc, _files(runtime), replicas=cluster.leases.replicas)

    async def start(lease: Lease) -> Stop:
        runtime.actors.fence((FunctionRegistry.aggregate,), lease.fence)
        return await _serve(runtime, code)

    return Leased(runtime.nc, LEASE, cluster.holder, cluster.leases, start)


def _files(runtime: FunctionsParts) -> CodeStore:
    return CodeStore(runtime.data_dir / "functions" / "code")


async def _serve(runtime: FunctionsParts, code: Code) -> Stop:
    limit = FunctionsSettings.from_env(runtime.env).code_max_size
    _, subs = await serve_registry(runtime.nc, runtime.actors, code, limit)

    async def stop() -> None:
        await unsubscribe_all(subs)
        await runtime.actors.stop(FunctionRegistry, "registry")

    return stop
