"""The one place VMIDs (and so IPs, which end in the VMID) are handed out.

The allocator holds every id it reserved until the VM that got it is destroyed or its install
fails; the holdings are events, so a restart replays them and an id is never handed out twice.
The caller passes the ids the cluster already uses (VMs cairn did not create), read just before.
"""

from __future__ import annotations

from typing import Any

import attrs

from actors.runtime import AggregateActor, Rejected
from actors.vm.events import IdRefused, IdReleased, IdReserved
from actors.vm.settings import VmSettings
from events.model import Event


@attrs.frozen
class Reserve:
    task: str
    requested: int | None
    occupied: frozenset[int]  # ids the cluster reports, whoever made them


@attrs.frozen
class Release:
    vmid: int
    reason: str


@attrs.frozen
class Holdings:
    """Query: the ids held now."""


def choose(
    requested: int | None, id_range: range, held: set[int], occupied: frozenset[int]
) -> int | str:
    """The id to hand out, or why none can be (a message for the client)."""
    if requested is not None:
        if requested not in id_range:
            return f"VMID {requested} is outside {id_range.start}-{id_range.stop - 1}"
        if requested in occupied:
            return f"VM {requested} already exists"
        if requested in held:
            return f"VMID {requested} is already reserved"
        return requested
    for vmid in id_range:
        if vmid not in held and vmid not in occupied:
            return vmid
    return f"no free VMID in {id_range.start}-{id_range.stop - 1}: every id is in use"


class AllocatorActor(AggregateActor):
    aggregate = "vmalloc"
    # Hosts sharing one store each run this actor on the one stream: the store's optimistic
    # concurrency lets one reservation through per version, and the other host decides again
    # on the reloaded holdings, so two hosts never hand out the same id.
    redecide_on_conflict = (Reserve, Release)

    def setup(self, **kwargs: Any) -> None:
        settings: VmSettings = kwargs.pop("settings")
        super().setup(**kwargs)
        self.settings = settings
        self.held: dict[int, str] = {}

    def apply(self, event: Event) -> None:
        match event:
            case IdReserved(vmid=vmid, task=task):
                self.held[vmid] = task
            case IdReleased(vmid=vmid):
                self.held.pop(vmid, None)
            case _:
                pass

    def handle(self, message: Any) -> Any:
        match message:
            case Reserve(task=task, requested=requested, occupied=occupied):
                picked = choose(requested, self.settings.id_range, set(self.held), occupied)
                if isinstance(picked, str):
                    self.record(IdRefused(task, picked))
                    raise Rejected(409, picked)
                self.record(IdReserved(picked, self.settings.ip_for(picked), task))
                return picked
            case Release(vmid=vmid, reason=reason):
                # Recorded even when the id looks free here: with another host on the store
                # this view may be behind, and only an append is checked against the stream.
                self.record(IdReleased(vmid, reason))
                return None
            case Holdings():
                return dict(self.held)
        raise TypeError(f"allocator: unknown message {message!r}")
