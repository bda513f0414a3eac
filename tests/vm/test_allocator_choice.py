"""The allocator's decision, without the actor around it."""

from __future__ import annotations

from actors.vm.allocator import choose

R = range(100, 255)


def test_lowest_free_id_skipping_held_and_occupied() -> None:
    assert choose(None, R, set(), frozenset()) == 100
    assert choose(None, R, {100, 101}, frozenset({102})) == 103


def test_requested_id_must_be_free() -> None:
    assert choose(150, R, set(), frozenset()) == 150
    assert choose(150, R, {150}, frozenset()) == "VMID 150 is already reserved"
    assert choose(150, R, set(), frozenset({150})) == "VM 150 already exists"
    assert choose(99, R, set(), frozenset()) == "VMID 99 is outside 100-254"


def test_exhausted_range_says_so() -> None:
    small = range(100, 102)
    assert choose(None, small, {100}, frozenset({101})) == (
        "no free VMID in 100-101: every id is in use"
    )
