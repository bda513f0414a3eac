"""No instant loses an id: a stop between the allocator's reservation and the install's first
record leaves a reservation that no task owns. The next start releases it, says so, and the
id (and so its IP) can be installed again."""

from __future__ import annotations

from pathlib import Path

from pvesim.cluster import SimCluster

from actors.vm.events import IdReserved
from events.store import EventStore, default_store_url
from gateway.server import domain_events
from tests.faults.conftest import StartCairn


async def test_a_reservation_no_task_owns_is_released_at_start(
    start_cairn: StartCairn, sim: SimCluster, tmp_path: Path
) -> None:
    cairn = await start_cairn("serve", "vm")
    assert (await cairn.install(id=171)).records[-1]["status"] == "success"
    assert await cairn.stop() == 0

    # What a kill -9 in those few milliseconds leaves: the reservation, stored; nothing else.
    domain_events()
    store = await EventStore.open(default_store_url(tmp_path / "data"))
    try:
        version = await store.stream_version("vmalloc:cluster")
        await store.append("vmalloc:cluster", version, [IdReserved(170, "10.0.0.170", "lost")])
    finally:
        await store.close()

    again = await start_cairn("serve", "vm")
    assert "releasing VMID 170: task lost reserved it but never started" in again.log()
    assert "releasing VMID 171" not in again.log()  # an installed VM keeps its id
    assert sim.vm(170) is None
    done = await again.install(id=170)
    assert done.records[-1]["status"] == "success" and done.records[-1]["vm_id"] == 170
    refused = await again.install(id=171)
    assert "VM 171 already exists" in refused.records[-1]["message"]
    assert await again.stop() == 0
