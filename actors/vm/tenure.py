"""Cluster mode: the VM service's actors run on the one host that holds the ``vm`` lease.

Every host runs the VM gateway; the actor side (the VM actors, the VMID/IP allocator, the
node actors, the inventory and its poll, and the NATS subjects that reach them) runs on one
host at a time, the holder of the lease ``vm`` (``events/leases.py``). The others wait: their
gateways' commands reach the holder over NATS. When the holder dies, its lease expires after
``CAIRN_LEASE_TTL`` seconds, a survivor takes it and starts the service, which replays every
VM from the store and settles the tasks the dead host left unfinished, exactly as at a
restart (``Recover``). A holder that loses its lease (it was paused, cut off) stops its actors
at once; until it has, its fence refuses every Proxmox command and every write.

Single-host cairn does not use this: ``CAIRN_CLUSTER`` unset, the service starts at once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from actors.platform import Runtime
from actors.vm.service import VmService
from actors.vm.settings import VmSettings
from events.leases import Lease, LeaseSettings, LeaseState

log = logging.getLogger(__name__)

LEASE = "vm"


class VmTenure:
    """Starts a :class:`VmService` when this host takes the ``vm`` lease, stops it when the
    lease is lost or the host stops."""

    def __init__(
        self,
        runtime: Runtime,
        settings: VmSettings,
        *,
        poll_interval: float,
        scripts_dir: Path,
        holder: str,
        lease: LeaseSettings,
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.poll_interval = poll_interval
        self.scripts_dir = scripts_dir
        self.service: VmService | None = None
        self.lease = Lease(
            runtime.nc,
            LEASE,
            holder,
            lease,
            on_acquired=self._acquired,
            on_lost=self._lost,
        )

    async def start(self) -> None:
        await self.lease.start()

    async def _acquired(self) -> None:
        service = VmService(
            self.runtime, self.settings, poll_interval=self.poll_interval, fence=self.lease.fence
        )
        self.service = service
        await service.start(
            self.scripts_dir,
            settle=f"interrupted: the host that ran it stopped, {self.lease.holder} took over",
        )
        log.info("vm: this host runs the VM actors (lease %r)", LEASE)

    async def _lost(self, reason: str) -> None:
        service, self.service = self.service, None
        if service is not None:
            await service.stop()
            await service.stop_actors()

    async def stop(self) -> None:
        """Stop the actors, then hand the lease on (a successor starts at once)."""
        await self.lease.settled()
        service, self.service = self.service, None
        if service is not None:
            await service.stop()
            await service.stop_actors()
        await self.lease.stop()

    @property
    def cluster_problem(self) -> str | None:
        return self.service.cluster_problem if self.service is not None else None

    def facts(self) -> dict[str, Any]:
        """For /health: who runs the VM actors."""
        held = self.lease.state is LeaseState.HELD
        return {
            "holder": self.lease.holder,
            "runs_vm_actors": held,
            "vm_actors_on": self.lease.holder if held else self.lease.other,
        }
