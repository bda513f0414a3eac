"""Cluster mode: the VM service's actors run on the one host that holds the ``vm`` lease.

Every host runs the VM gateway; the actor side (the VM actors, the VMID/IP allocator, the
node actors, the inventory and its poll, and the NATS subjects that reach them) runs on one
host at a time, the holder of the lease ``vm`` (``actors/leased.py``). The others wait: their
gateways' commands reach the holder over NATS. When the holder dies, its lease expires after
``CAIRN_LEASE_TTL`` seconds, a survivor takes it and starts the service, which replays every
VM from the store and settles the tasks the dead host left unfinished, exactly as at a
restart (``Recover``). A holder that loses its lease (it was paused, cut off) stops its actors
at once; until it has, its fence refuses every Proxmox command and every write.

Single-host cairn does not use this: ``CAIRN_CLUSTER`` unset, the service starts at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from actors.hosting import HostParts
from actors.leased import Leased, Stop
from actors.platform import ClusterMode
from actors.vm.function_check import FunctionRuns
from actors.vm.host import VmService
from actors.vm.settings import VmSettings
from events.leases import Lease

LEASE = "vm"


@attrs.define(eq=False)
class VmTenure:
    """Starts a :class:`VmService` when this host takes the ``vm`` lease, stops it when the
    lease is lost or the host stops."""

    runtime: HostParts
    settings: VmSettings
    cluster: ClusterMode
    poll_interval: float = attrs.field(kw_only=True)
    scripts_dir: Path = attrs.field(kw_only=True)
    functions: FunctionRuns | None = attrs.field(kw_only=True, default=None)
    service: VmService | None = attrs.field(init=False, default=None)
    leased: Leased = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        cluster = self.cluster
        self.leased = Leased(self.runtime.nc, LEASE, cluster.holder, cluster.leases, self._start)

    async def start(self) -> None:
        await self.leased.start()

    async def _start(self, lease: Lease) -> Stop:
        service = VmService(
            self.runtime,
            self.settings,
            poll_interval=self.poll_interval,
            fence=lease.fence,
            functions=self.functions,
        )
        self.service = service

        async def stop() -> None:
            self.service = None
            await service.stop()
            await service.stop_actors()

        try:
            await service.start(
                self.scripts_dir,
                settle=f"interrupted: {lease.taken}; {lease.holder} took over",
            )
        except BaseException:
            await stop()
            raise
        return stop

    async def stop(self) -> None:
        await self.leased.stop()

    @property
    def cluster_problem(self) -> str | None:
        return self.service.cluster_problem if self.service is not None else None

    def facts(self) -> dict[str, Any]:
        """For /health: who runs the VM actors."""
        return self.leased.facts()
