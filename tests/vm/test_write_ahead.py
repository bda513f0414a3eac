"""Write-ahead records: the records a restart reads to settle what Proxmox may have begun making
(a template's build, a copy of it to another node, an install's clone: actors/vm/unfinished.py;
a change that had begun keeping itself: change.began_keeping) are in the event store before
Proxmox is asked to do it. The VM actor over a real SQLite
store, its Proxmox the in-memory FakePve; the store's appends of those records held, or refused
(SQLite's write lock taken by another connection), at the moment the job says them."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import attrs
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from actors.runtime import ActorHandle, ActorHost
from actors.vm import change
from actors.vm.allocator import AllocatorActor, Holdings, Reserve
from actors.vm.events import Progress, TaskEnded
from actors.vm.fakemirror import serve_mirror
from actors.vm.fakepve import FakePve, FakeVm
from actors.vm.jobs import Facts, Job, Services
from actors.vm.pve import Clone, Create, Task
from actors.vm.requests import InstallRequest
from actors.vm.vm import Install, VmActor
from events.model import Event
from events.store import EventStore, Recorded, RetryPolicy, default_store_url
from tests.conftest import wait_for
from tests.vm.test_pipeline_fake import services

VMID = 150
TASK = "t0wa1"


class HeldStore(EventStore):
    """The real store, but an append holding a record that contains one of `holds`' words
    waits until the test sets that word's event (a store slow to take it, seen from cairn)."""

    def __init__(self, engine: AsyncEngine, retry: RetryPolicy | None = None) -> None:
        super().__init__(engine, retry)
        self.holds: dict[str, asyncio.Event] = {}
        self.held: asyncio.Queue[str] = asyncio.Queue()  # the words of each append held

    async def append(
        self, stream: str, expected_version: int, events: Sequence[Event]
    ) -> list[Recorded]:
        said = " | ".join(e.message for e in events if isinstance(e, Progress))
        for words, released in self.holds.items():
            if words in said and not released.is_set():
                self.held.put_nowait(words)
                await released.wait()
        return await super().append(stream, expected_version, events)


class Watched(FakePve):
    """FakePve that notes, at each create and clone it is asked, what the install's stream
    held at that moment."""

    store: EventStore | None = None
    made: list[tuple[str, int, str]]

    async def _stored(self) -> str:
        assert self.store is not None
        return " | ".join(
            r.event.message
            for r in await self.store.read_stream(f"vm:{VMID}")
            if isinstance(r.event, Progress)
        )

    async def create(self, node: str, vmid: int, spec: Create) -> Task:
        self.made.append(("create", vmid, await self._stored()))
        return await super().create(node, vmid, spec)

    async def clone(self, node: str, vmid: int, newid: int, spec: Clone) -> Task:
        self.made.append(("clone", newid, await self._stored()))
        return await super().clone(node, vmid, newid, spec)


def watched(store: EventStore, driver: str) -> Watched:
    fake = Watched(driver=driver)
    fake.store, fake.made = store, []
    return fake


@pytest.fixture
async def mirror_url() -> AsyncIterator[str]:
    async with serve_mirror() as mirror:
        yield mirror.base_url


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[HeldStore]:
    """The test's store; a write it keeps refusing fails within half a second."""
    held = await HeldStore.open(default_store_url(tmp_path), RetryPolicy(budget=0.5))
    assert isinstance(held, HeldStore)  # open() makes the class it is called on
    try:
        yield held
    finally:
        await held.close()


@pytest.fixture
async def host(store: HeldStore) -> AsyncIterator[ActorHost]:
    h = ActorHost(store)
    yield h
    await h.stop_all()


@attrs.define
class Installing:
    allocator: ActorHandle
    fake: Watched


async def install(
    host: ActorHost, tmp_path: Path, mirror_url: str, driver: str, node: str | None = None
) -> Installing:
    """An install of VMID with templates on, begun; the guest never answers (nothing listens
    on its SSH port), so the install ends by removing its VM and keeping the template."""
    fake = watched(host.store, driver)
    svc: Services = services(tmp_path, fake, mirror_url, driver)
    svc.settings = attrs.evolve(svc.settings, templates=True)
    allocator = await host.spawn(AllocatorActor, "cluster", settings=svc.settings)
    assert await allocator.ask(Reserve(TASK, VMID, frozenset())) == VMID
    vm = await host.spawn(VmActor, VMID, services=svc, allocator=allocator)
    request = InstallRequest(
        os="debian", version="12", user="debian", password_hash="$6$salt$hash", node=node
    )
    await vm.ask(Install(TASK, request, 0.01))
    return Installing(allocator, fake)


async def ended(store: EventStore) -> TaskEnded | None:
    found = [r.event for r in await store.read_stream(f"vm:{VMID}")]
    last = [e for e in found if isinstance(e, TaskEnded)]
    return last[-1] if last else None


@pytest.mark.parametrize(
    ("driver", "node", "ahead"),
    [
        (
            "api",
            None,
            [
                ("creating template 9000 on pve1", ("create", 9000)),
                (f"creating VM {VMID}", ("clone", VMID)),
            ],
        ),
        (
            "cli",
            "pve2",  # the CLI driver copies the main node's template there first
            [
                ("creating template 9000 on pve1", ("create", 9000)),
                ("creating template 9001 on pve1 from template 9000", ("clone", 9001)),
                (f"creating VM {VMID}", ("clone", VMID)),
            ],
        ),
    ],
)
async def test_proxmox_is_asked_only_once_the_record_announcing_it_is_stored(
    store: HeldStore,
    host: ActorHost,
    tmp_path: Path,
    mirror_url: str,
    driver: str,
    node: str | None,
    ahead: list[tuple[str, tuple[str, int]]],
) -> None:
    store.holds = {words: asyncio.Event() for words, _ in ahead}
    run = await install(host, tmp_path, mirror_url, driver, node)
    for words, (op, vmid) in ahead:
        assert await asyncio.wait_for(store.held.get(), 10) == words
        # Its append is held: the job waits for it, asking Proxmox nothing meanwhile.
        assert not any(m[:2] == (op, vmid) for m in run.fake.made), run.fake.made
        store.holds[words].set()
    end = await wait_for(lambda: ended(store), what="the install's end")
    assert (end.ok, end.state) == (False, "absent")  # its guest never answered
    asked = {(op, vmid): stored for op, vmid, stored in run.fake.made}
    assert set(asked) == {made for _, made in ahead}
    for words, made in ahead:
        assert words in asked[made], f"{made} asked before {words!r} was stored"
    # The clone's settling reads "ready" then "creating VM" (unfinished.read): both stored.
    assert f"ready on {node or 'pve1'}" in asked[("clone", VMID)]
    assert run.fake.vms[9000].config["template"] == "1"


@pytest.mark.parametrize(
    ("words", "asked"),
    [
        ("creating template 9000 on pve1", ("create", 9000)),
        (f"creating VM {VMID}", ("clone", VMID)),
    ],
)
async def test_a_record_the_store_refuses_stops_the_install_before_proxmox_is_asked(
    store: HeldStore,
    host: ActorHost,
    tmp_path: Path,
    mirror_url: str,
    words: str,
    asked: tuple[str, int],
) -> None:
    """docs/vm.md, "When the disk fills during a task": the actor stops, its job with it;
    once the store takes writes again the task is settled and ends, the id freed."""
    store.holds = {words: asyncio.Event()}
    blocker = sqlite3.connect(
        tmp_path / "events.sqlite3", isolation_level=None, check_same_thread=False
    )
    try:
        run = await install(host, tmp_path, mirror_url, "api")
        assert await asyncio.wait_for(store.held.get(), 10) == words
        # Another writer takes the database, once the records said before are in (in a
        # thread: their appends finish on this loop).
        await asyncio.to_thread(blocker.execute, "BEGIN IMMEDIATE")
        store.holds[words].set()
        await wait_for(lambda: host.store_refusal is not None, what="the store's refusal")
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    end = await wait_for(lambda: ended(store), what="the install settled")
    assert (end.ok, end.state) == (False, "absent")
    assert end.error is not None and end.error.startswith(
        "stopped while the event store refused writes (the event store refuses writes: "
    ), end.error
    stored = [r.event for r in await store.read_stream(f"vm:{VMID}")]
    said = [e.message for e in stored if isinstance(e, Progress)]
    assert not any(words in m for m in said), "the refused record was stored after all"
    assert said[-1].endswith("; VM left absent (0.00s)"), said[-1]
    assert not any(m[:2] == asked for m in run.fake.made), run.fake.made
    assert VMID not in run.fake.vms
    if asked[0] == "clone":  # the template was built and is kept for the next installs
        assert run.fake.vms[9000].config["template"] == "1"
    else:
        assert run.fake.vms == {}
    assert await run.allocator.ask(Holdings()) == {}


class Timeline:
    """A job's report, and the moments it asked for its records to be stored, in one list with
    the Proxmox operations `TimedPve` was asked."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def __call__(
        self, step: str, status: str, message: str, vm_id: int | None = None, ip: str | None = None
    ) -> None:
        self.said.append(f"{step}: {message}")

    async def stored(self) -> None:
        self.said.append("stored")


class TimedPve(FakePve):
    timeline: Timeline

    async def snapshot(
        self, node: str, vmid: int, name: str, *, description: str = "", vmstate: bool = False
    ) -> Task:
        self.timeline.said.append("pve snapshot")
        return await super().snapshot(node, vmid, name, description=description, vmstate=vmstate)

    async def delete_snapshot(self, node: str, vmid: int, name: str) -> Task:
        self.timeline.said.append("pve delete_snapshot")
        return await super().delete_snapshot(node, vmid, name)


class Passes:
    """The functions service, its every check passing."""

    async def missing(self, path: str) -> tuple[int, str] | None:
        return None

    async def run(self, path: str, input_json: str, by: str) -> tuple[bool, str | None]:
        return True, None


async def test_a_change_is_recorded_before_its_snapshot_and_its_keeping_before_that_goes(
    tmp_path: Path, mirror_url: str
) -> None:
    """A restart settles only a change whose start is stored, and keeps one that had begun
    keeping itself (change > keeping) rather than roll it back or find its snapshot gone."""
    timeline = Timeline()
    fake = TimedPve()
    fake.timeline = timeline
    disk = "local-lvm:vm-160-disk-0,size=16G"
    fake.vms[160] = FakeVm("pve1", {"scsi0": disk, "cores": "2"}, status="running")
    svc = services(tmp_path, fake, mirror_url, "api")
    svc.functions = Passes()
    facts = Facts("pve1", "web", "debian", "12", "debian", "127.0.0.9", 2, 2048, 16)
    check = {"function": "checks/up", "input": "{}", "timeout": 5.0}
    job = Job(svc, 160, "pve1", facts, timeline, {"steps": [], "verify": [check]})
    result = await change.run(job, facts, TASK)
    assert result.ok, timeline.said
    said = timeline.said
    snapshot, keeping = said.index("pve snapshot"), said.index("pve delete_snapshot")
    began = next(i for i, s in enumerate(said) if s.startswith(change.SNAPSHOT))
    assert "stored" in said[began:snapshot], said
    began = next(i for i, s in enumerate(said) if s.startswith(change.KEEP))
    assert "stored" in said[began:keeping], said
    assert fake.vms[160].snapshots == {}  # removed once kept, as asked
