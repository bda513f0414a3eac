"""The VM actor over a real event store, its Proxmox an in-memory FakePve: a task's records and
its end, and the recovery of a task a dead process left, in seconds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from actors.runtime import ActorHost
from actors.vm import stages
from actors.vm.allocator import AllocatorActor, Holdings, Reserve
from actors.vm.events import Progress, TaskEnded
from actors.vm.fakemirror import serve_mirror
from actors.vm.fakepve import FakePve
from actors.vm.jobs import remove_vm
from actors.vm.lifecycle import State
from actors.vm.ownership import Claim, mark_line
from actors.vm.pve import Create, Hardware, PermissionDenied
from actors.vm.requests import InstallRequest
from actors.vm.vm import Install, Query, Recover, VmActor, VmInfo
from events.store import EventStore
from tests.conftest import wait_for
from tests.vm.test_pipeline_fake import services

HASH = "$6$salt$hash"
MARKED = Hardware("web", 2, "kvm64", 2048, None, "debian", mark_line("t1"), "vmbr0")


@pytest.fixture
async def mirror_url() -> AsyncIterator[str]:
    async with serve_mirror() as mirror:
        yield mirror.base_url


async def records(store: EventStore, vmid: int) -> list[Any]:
    return [r.event for r in await store.read_stream(f"vm:{vmid}")]


async def ended(store: EventStore, vmid: int) -> TaskEnded | None:
    found = [e for e in await records(store, vmid) if isinstance(e, TaskEnded)]
    return found[-1] if found else None


async def test_an_install_records_its_stages_and_ends_releasing_the_id(
    store: EventStore, tmp_path: Path, mirror_url: str
) -> None:
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, "api")
    host = ActorHost(store)
    allocator = await host.spawn(AllocatorActor, "cluster", settings=svc.settings)
    assert await allocator.ask(Reserve("t1", 140, frozenset())) == 140
    vm = await host.spawn(VmActor, 140, services=svc, allocator=allocator)
    request = InstallRequest(os="debian", version="12", user="debian", password_hash=HASH)
    info: VmInfo = await vm.ask(Install("t1", request, 0.01))
    assert info.state is State.INSTALLING
    await wait_for(lambda: ended(store, 140), what="the install's end")
    events = await records(store, 140)
    steps = [e.step for e in events if isinstance(e, Progress)]
    assert steps[:2] == [stages.CHECK_ID, stages.CHECK_ID]
    assert stages.READY in steps  # the guest never answers here: it ends there
    end = await ended(store, 140)
    assert end is not None and (end.ok, end.state) == (False, "absent")
    assert fake.vms == {} and await allocator.ask(Holdings()) == {}
    await host.stop_all()


async def test_a_restart_settles_an_install_whose_create_died(
    store: EventStore, tmp_path: Path, mirror_url: str
) -> None:
    """The actor's stream ends at "creating VM" (the process died); Proxmox holds the
    placeholder locked and runs no task for it: recovery ends the task at once."""
    gate = asyncio.Event()

    class DiesAtCreate(FakePve):
        async def create(self, node: str, vmid: int, spec: Create) -> Any:
            await super().create(node, vmid, spec)
            self.vms[vmid].config = {"lock": "create"}  # its worker died half-way
            gate.set()
            await asyncio.Event().wait()  # never answers: the process "dies" first

    fake = DiesAtCreate()
    svc = services(tmp_path, fake, mirror_url, "cli")
    host = ActorHost(store)
    allocator = await host.spawn(AllocatorActor, "cluster", settings=svc.settings)
    await allocator.ask(Reserve("t1", 141, frozenset()))
    vm = await host.spawn(VmActor, 141, services=svc, allocator=allocator)
    request = InstallRequest(os="debian", version="12", user="debian", password_hash=HASH)
    await vm.ask(Install("t1", request, 0.01))
    await asyncio.wait_for(gate.wait(), 10)
    await host.stop_all()

    again = ActorHost(store)
    allocator = await again.spawn(AllocatorActor, "cluster", settings=svc.settings)
    vm = await again.spawn(VmActor, 141, services=svc, allocator=allocator)
    await vm.tell(Recover("interrupted by a restart (test)"))
    end = await wait_for(lambda: ended(store, 141), timeout=10, what="the recovery's end")
    assert end.state == "absent"
    last = [e for e in await records(store, 141) if isinstance(e, Progress)][-1]
    assert last.step == stages.RECOVERY
    assert "locked by a create that no longer runs" in last.message
    assert last.message.endswith("cairn no longer tracks this id (0.00s)")
    assert fake.vms[141].config == {"lock": "create"}  # not proven cairn's: left
    assert (await vm.ask(Query())).state is State.ABSENT
    assert await allocator.ask(Holdings()) == {}
    await again.stop_all()


async def test_a_create_still_at_work_is_waited_for_then_removed(
    tmp_path: Path, mirror_url: str
) -> None:
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, "api")
    await fake.create("pve2", 142, Create(MARKED))
    done = dict(fake.vms[142].config)
    fake.vms[142].config = {"lock": "create"}
    fake.running[142] = ["UPID:pve2:0000AAAA:00000000:00000000:qmcreate:142:cairn@pve!x:"]

    async def finish() -> None:
        await asyncio.sleep(0.3)
        fake.vms[142].config = done
        fake.running.pop(142)

    finishing = asyncio.create_task(finish())
    removal = await remove_vm(svc, 142, None, Claim("t1"))
    await finishing
    assert (removal.removed, removal.foreign) == ("pve2", None)
    assert fake.vms == {}


async def test_a_create_that_cannot_be_asked_about_is_waited_for(
    tmp_path: Path, mirror_url: str
) -> None:
    """Without the task list (a token without Sys.Audit), the wait stays bounded by
    VM_COMMAND_TIMEOUT alone, as before."""
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, "api")
    svc.settings = attrs.evolve(svc.settings, command_timeout=0.8)
    await fake.create("pve1", 143, Create(MARKED))
    fake.vms[143].config = {"lock": "create"}
    for _ in range(10):
        fake.fail("active_tasks", PermissionDenied("Permission check failed (/nodes/pve1, x)"))
    removal = await remove_vm(svc, 143, None, Claim("t1"))
    assert removal.foreign and "still locked by a create that has not ended" in removal.foreign
    assert 143 in fake.vms
