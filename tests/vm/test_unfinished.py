"""The start-up settling of an install's template build, read from the install's own records and
checked against the in-memory Proxmox (the kill -9 tests drive it end to end:
tests/faults/test_kill9_templates.py; that those records are stored before Proxmox is asked:
test_write_ahead.py)."""

from __future__ import annotations

from pathlib import Path

from actors.vm import stages, unfinished
from actors.vm.events import Progress
from actors.vm.fakepve import FakePve, FakeVm
from actors.vm.imagecache import ImageCache
from actors.vm.jobs import Services
from actors.vm.ownership import mark_line
from events.store import Recorded
from tests.vm.helpers import settings

TASK = "t0f1e"


def recorded(*progress: tuple[str, str, str]) -> list[Recorded]:
    return [
        Recorded(i, "vm:180", i, Progress(TASK, step, status, message), 0.0)
        for i, (step, status, message) in enumerate(progress, 1)
    ]


def services(tmp_path: Path, fake: FakePve) -> Services:
    return Services(
        settings=settings(VM_TEMPLATES="1"),
        pve=fake,
        images=ImageCache(tmp_path / "images", "http://127.0.0.1:9/"),
        key_path=tmp_path / "id_ed25519",
        scripts_dir=tmp_path,
        cpu_type="x86-64-v2-AES",
    )


def template(task: str, *, done: bool = False, lock: str | None = None) -> dict[str, str]:
    config = {"name": "cairn-debian-12", "description": mark_line(task)}
    if done:
        config["template"] = "1"
    if lock:
        config["lock"] = lock
    return config


def test_what_an_install_had_begun_is_read_from_its_records() -> None:
    getting = (stages.DOWNLOAD, "processing", "[*] getting the OS image (0.00s)")
    building = (stages.DOWNLOAD, "processing", "[*] creating template 9001 on pve1 (0.10s)")
    copying = (
        stages.DOWNLOAD,
        "processing",
        "[*] creating template 9002 on pve1 from template 9001 (0.20s)",
    )
    ready = (stages.DOWNLOAD, "success", "[+] template 9001 (debian 12) ready on pve1 (0.30s)")
    cloning = (stages.CREATE, "processing", "[*] creating VM 180 (0.31s)")

    # Getting the image begun, no build noted: none was asked of Proxmox (the note is stored
    # before the create: test_write_ahead.py), so none is looked for.
    assert unfinished.read(recorded(getting), TASK) == unfinished.Unfinished()
    assert unfinished.read(recorded(getting, building), TASK) == unfinished.Unfinished(
        building=unfinished.Building(9001, "pve1")
    )
    assert unfinished.read(recorded(getting, copying), TASK).building == (
        unfinished.Building(9002, "pve1", source=9001)
    )
    assert unfinished.read(recorded(getting, building, ready, cloning), TASK) == (
        unfinished.Unfinished(cloning=(9001, "pve1"))
    )
    # Another task's records say nothing of this one.
    assert unfinished.read(recorded(getting), "t0ther") == unfinished.Unfinished()


async def test_only_what_the_records_name_is_settled(tmp_path: Path) -> None:
    """No build noted, none begun: a half-built template in the cluster (one an older cairn
    began without its note stored) is not this settling's to look for; the next install of
    its image, or a prune, removes it."""
    fake = FakePve()
    fake.vms[9000] = FakeVm("pve1", template(TASK))
    assert (
        await unfinished.settle(services(tmp_path, fake), 180, unfinished.Unfinished(), TASK) == []
    )
    assert sorted(fake.vms) == [9000] and ("cluster_vms", "pve1", None) not in fake.calls
