"""The install pipeline and the lifecycle jobs on the in-memory FakePve: each driver's
placement, the stage table, what a failure leaves and what it says, in milliseconds. (The same
pipeline against the simulator, with guests: the *_e2e tests.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from actors.vm import apistorage, stages
from actors.vm.fakemirror import serve_mirror
from actors.vm.fakepve import FakePve
from actors.vm.imagecache import ImageCache
from actors.vm.initscripts import write_scripts
from actors.vm.install import install
from actors.vm.jobs import Services, remove_vm
from actors.vm.lifecycle import State
from actors.vm.lifecycle_jobs import power
from actors.vm.ownership import Claim, mark_line
from actors.vm.pve import Create, PermissionDenied, TaskFailed, Unreadable
from actors.vm.requests import InstallRequest
from actors.vm.settings import ApiSettings
from tests.ports import free_port
from tests.vm.helpers import settings

TASK = "t0f1e"


@pytest.fixture
async def mirror_url() -> AsyncIterator[str]:
    async with serve_mirror() as mirror:
        yield mirror.base_url


def services(tmp_path: Path, fake: FakePve, base_url: str, driver: str) -> Services:
    # Guests never answer here (nothing listens on their SSH port): an install ends at
    # "waiting for ready", which is as far as Proxmox's side goes. The import pipeline, step
    # by step (templates and clones run against the simulator: test_templates_e2e.py).
    s = settings(
        GATEWAY="127.0.0.1",
        VM_SSH_WAIT="0.2",
        VM_SSH_POLL="0.02",
        VM_SSH_PORT=str(free_port()),
        VM_TEMPLATES="0",
    )
    if driver == "api":
        api = ApiSettings(url="https://127.0.0.1:8006", token="cairn@pve!driver=x")
        s = attrs.evolve(s, driver="api", api=api)
    fake.driver = driver
    return Services(
        settings=s,
        pve=fake,
        images=ImageCache(tmp_path / "images", base_url),
        key_path=tmp_path / "ssh" / "id_ed25519",
        scripts_dir=write_scripts(tmp_path / "sh"),
        cpu_type="x86-64-v2-AES",
    )


Records = list[tuple[str, str, str]]


class Recorder:
    """A job's report kept in a list: each record is kept as it is said."""

    def __init__(self) -> None:
        self.records: Records = []

    def __call__(
        self, step: str, status: str, message: str, vm_id: int | None = None, ip: str | None = None
    ) -> None:
        self.records.append((step, status, message))

    async def stored(self) -> None:
        return None  # the list has them already


def recorder() -> tuple[Records, Recorder]:
    report = Recorder()
    return report.records, report


def steps(records: Records) -> list[str]:
    out: list[str] = []
    for step, _, _ in records:
        if not out or out[-1] != step:
            out.append(step)
    return out


def request(**fields: Any) -> InstallRequest:
    hashed = "$6$salt$hash"
    return InstallRequest(os="debian", version="12", user="debian", password_hash=hashed, **fields)


@pytest.mark.parametrize("driver", ["cli", "api"])
async def test_every_stage_up_to_the_guest_then_the_vm_is_removed(
    tmp_path: Path, mirror_url: str, driver: str
) -> None:
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, driver)
    records, report = recorder()
    result = await install(svc, 120, request(node="pve2"), report, 0.0, TASK)
    assert steps(records) == list(stages.INSTALL[1 : stages.INSTALL.index(stages.READY) + 1])
    migrated = [m for s, st, m in records if s == stages.MIGRATE and st == "success"]
    if driver == "api":  # made on pve2 itself, from the image pve2 downloaded
        assert migrated == ["[+] created on pve2 directly: nothing to migrate (0.00s)"]
        assert ("create", "pve2", 120) in fake.calls and ("migrate", "pve1", 120) not in fake.calls
        assert fake.volumes["pve2"] == {"local:import/debian-12-generic-amd64.qcow2"}
    else:  # made on the main node from cairn's cache, then migrated
        assert migrated[0].startswith("[+] VM migrated to node pve2 (")
        assert ("import_disk", "pve1", 120) in fake.calls
        assert ("migrate", "pve1", 120) in fake.calls
    assert (result.ok, result.state) == (False, State.ABSENT)
    assert records[-1][1] == "error" and "removing VM 120" in records[-2][2]
    assert fake.vms == {}, "the half-built VM is left behind"


async def test_without_a_node_there_is_no_migration_stage(tmp_path: Path, mirror_url: str) -> None:
    fake = FakePve()
    records, report = recorder()
    await install(services(tmp_path, fake, mirror_url, "api"), 121, request(), report, 0.0, TASK)
    assert stages.MIGRATE not in steps(records)
    assert ("create", "pve1", 121) in fake.calls


async def test_a_create_refused_for_a_privilege_names_it_and_removes_nothing(
    tmp_path: Path, mirror_url: str
) -> None:
    fake = FakePve()
    text = "permission denied by Proxmox VE: the API token lacks VM.Config.CDROM on /vms/122"
    fake.fail("create", PermissionDenied(text, "VM.Config.CDROM", "/vms/122"))
    records, report = recorder()
    svc = services(tmp_path, fake, mirror_url, "api")
    result = await install(svc, 122, request(), report, 0.0, TASK)
    assert records[-1][:2] == (stages.CREATE, "error")
    assert records[-1][2].startswith(f"[-] qm create failed: {text} (")
    assert not any("removing VM" in m for _, _, m in records)  # nothing was made
    assert result.state is State.ABSENT and not any(c[0] == "vm_config" for c in fake.calls)


async def test_an_id_taken_meanwhile_is_left_to_its_owner(tmp_path: Path, mirror_url: str) -> None:
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, "cli")
    await fake.create("pve2", 123, Create(attrs.evolve(_hardware(), description="someone's")))
    records, report = recorder()
    result = await install(svc, 123, request(), report, 0.0, TASK)
    assert (
        "Another client created VM 123 on node pve2 after cairn reserved the id" in (records[-1][2])
    )
    assert fake.vms[123].config["description"] == "someone's"
    assert result.state is State.ABSENT


async def test_a_storage_without_disk_images_is_named(tmp_path: Path, mirror_url: str) -> None:
    fake = FakePve(storage_types={"other": "dir"})
    records, report = recorder()
    await install(services(tmp_path, fake, mirror_url, "cli"), 124, request(), report, 0.0, TASK)
    assert records[-1][:2] == (stages.STORAGE, "error")
    assert "storage pool local-lvm does not exist; storages for VM disks: other" in records[-1][2]


async def test_a_garbled_shared_flag_stops_the_install_at_the_storage_check(
    tmp_path: Path, mirror_url: str
) -> None:
    """An API answering `shared: "yes"` (no Proxmox does) is named at the storage check, before
    anything is built: cairn neither crashes nor guesses where the template's volumes are."""
    entry = {"type": "lvm", "content": "images", "active": 1, "shared": "yes"}
    with pytest.raises(Unreadable) as garbled:
        apistorage.storage_status("local-lvm", entry)
    fake = FakePve()
    fake.fail("storage_status", garbled.value)
    records, report = recorder()
    svc = services(tmp_path, fake, mirror_url, "cli")
    result = await install(svc, 125, request(node="pve2"), report, 0.0, TASK)
    assert records[-1][:2] == (stages.STORAGE, "error")
    assert records[-1][2].startswith(
        "[-] storage pool local-lvm cannot be checked: storage local-lvm: 'shared' is 'yes', "
        "not a boolean (0 or 1) ("
    )
    assert result.state is State.ABSENT
    assert not any(c[0] in ("create", "clone") for c in fake.calls)


async def test_an_old_release_sends_the_api_driver_back_to_the_cli(
    tmp_path: Path, mirror_url: str
) -> None:
    fake = FakePve(release="8.2")
    records, report = recorder()
    await install(services(tmp_path, fake, mirror_url, "api"), 125, request(), report, 0.0, TASK)
    assert "the cluster runs Proxmox VE 8.2" in records[-1][2]
    assert "Use PVE_DRIVER=cli" in records[-1][2]


@pytest.mark.parametrize("driver", ["cli", "api"])
async def test_lifecycle_through_the_port(tmp_path: Path, mirror_url: str, driver: str) -> None:
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, driver)
    await fake.create("pve1", 130, Create(attrs.evolve(_hardware(), description=mark_line(TASK))))
    fake.vms[130].config["scsi0"] = "local-lvm:vm-130-disk-0,size=16G"
    records, report = recorder()
    claim = Claim(TASK)
    changes: list[tuple[str, dict[str, Any]]] = [
        ("set/cpu", {"cpu": 4}),
        ("set/memory", {"memory": 4096}),
        ("set/disk", {"grow_gb": 4}),
        ("set/node", {"node": "pve3"}),
    ]
    for command, args in changes:
        node = fake.vms[130].node
        result = await power(svc, command, 130, node, None, report, args, claim)
        assert (result.ok, result.state) == (True, State.STOPPED), records[-1]
    config = fake.vms[130].config
    assert (config["cores"], config["memory"], fake.vms[130].node) == ("4", "4096", "pve3")
    assert config["scsi0"].endswith("size=4G")
    fake.fail("shutdown", TaskFailed("VM quit/powerdown failed - got timeout"))
    fake.vms[130].status = "running"
    result = await power(svc, "shutdown", 130, "pve3", None, report, {}, claim)
    assert result.state is State.RUNNING  # read back from the cluster
    assert records[-1][2].startswith(
        "[-] qm shutdown failed: VM quit/powerdown failed - got timeout: the guest did not power "
        "off and is still running; use stop to force it off ("
    )
    assert (await power(svc, "stop", 130, "pve3", None, report, {}, claim)).ok
    assert (await power(svc, "destroy", 130, "pve3", None, report, {}, claim)).state is (
        State.ABSENT
    )
    assert fake.vms == {}


async def test_destroy_leaves_a_vm_without_cairns_mark(tmp_path: Path, mirror_url: str) -> None:
    fake = FakePve()
    svc = services(tmp_path, fake, mirror_url, "api")
    await fake.create("pve2", 131, Create(attrs.evolve(_hardware(), description="a user's own")))
    _, report = recorder()
    result = await power(svc, "destroy", 131, "pve2", None, report, {}, Claim(TASK))
    assert result.disowned and "does not carry cairn's mark" in result.disowned
    assert 131 in fake.vms
    removal = await remove_vm(svc, 131, None, Claim(TASK))
    assert removal.foreign and removal.removed is None and 131 in fake.vms


def _hardware() -> Any:
    from actors.vm.pve import Hardware

    return Hardware("web", 2, "kvm64", 2048, None, "debian", "", "vmbr0")


async def test_clone_and_template_through_the_port() -> None:
    from actors.vm.pve import AlreadyExists, Clone, PveError

    fake = FakePve()
    await fake.create("pve1", 150, Create(_hardware()))
    await fake.template("pve1", 150)
    assert fake.vms[150].config["template"] == "1"
    await fake.clone("pve1", 150, 151, Clone(name="web-2", target="pve2", description="m"))
    assert (fake.vms[151].node, fake.vms[151].config["name"]) == ("pve2", "web-2")
    assert "template" not in fake.vms[151].config and fake.vms[151].config["description"] == "m"
    with pytest.raises(AlreadyExists):
        await fake.clone("pve1", 150, 151, Clone())
    fake.vms[151].status = "running"
    with pytest.raises(PveError, match="if VM is running"):
        await fake.template("pve2", 151)


async def test_snapshots_through_the_port() -> None:
    from actors.vm.pve import Locked, NotFound, Refused, TaskFailed

    fake = FakePve(storage_types={"local-lvm": "lvmthin", "files": "dir"})
    await fake.create("pve1", 150, Create(_hardware()))
    fake.vms[150].config["scsi0"] = "local-lvm:vm-150-disk-0,size=8G"
    await fake.snapshot("pve1", 150, "one", description="d", vmstate=True)
    fake.vms[150].config["memory"] = "4096"
    await fake.snapshot("pve1", 150, "two")
    snaps = await fake.snapshots("pve1", 150)
    assert [(s.name, s.parent, s.vmstate) for s in snaps] == [
        ("one", None, False),  # stopped: no RAM saved
        ("two", "one", False),
    ]
    await fake.rollback("pve1", 150, "one")
    assert fake.vms[150].config["memory"] == "2048" and fake.vms[150].config["parent"] == "one"
    await fake.delete_snapshot("pve1", 150, "one")
    assert [(s.name, s.parent) for s in await fake.snapshots("pve1", 150)] == [("two", None)]
    with pytest.raises(Refused, match="invalid snapshot name 'current'"):
        await fake.snapshot("pve1", 150, "current")
    with pytest.raises(TaskFailed, match="already used"):
        await fake.snapshot("pve1", 150, "two")
    with pytest.raises(NotFound, match="snapshot 'one' does not exist"):
        await fake.rollback("pve1", 150, "one")
    fake.vms[150].config["lock"] = "backup"
    with pytest.raises(Locked):
        await fake.delete_snapshot("pve1", 150, "two")
    fake.vms[150].config.pop("lock")
    fake.vms[150].config["scsi1"] = "files:150/vm-150-disk-1.raw,size=1G"
    with pytest.raises(TaskFailed, match="snapshot feature is not available"):
        await fake.snapshot("pve1", 150, "three")
    with pytest.raises(NotFound):
        await fake.snapshots("pve2", 150)
