"""An API token made before templates (cairn 0.1.0's `cairn pve bootstrap`: no VM.Clone) with
templates on by default: its installs import their image as they always did, and say why and
what to grant; once granted, the next run of cairn clones. The CLI driver (qm as root) never
meets such a refusal. Both drivers against the simulated cluster."""

from __future__ import annotations

import re
from typing import Any

from pvesim.cluster import SimCluster

from tests.vm import drivers
from tests.vm.conftest import Service
from tests.vm.test_install_e2e import MESSAGE, STAGES
from tests.vm.test_templates_e2e import imports, messages

driver = drivers.driver
start_service = drivers.start_service

DOWNLOAD = "OS preparation > downloading OS image"
SAID = re.compile(
    re.escape(
        "[*] templates off for this install: the API token lacks VM.Clone on /vms; importing "
        "the image instead (grant it: pveum role modify CairnVM --append 1 --privs VM.Clone, "
        "for the role cairn pve bootstrap made; cairn asks again within 5 minutes; docs/vm.md, "
        "Templates and linked clones)"
    )
    + r" \(\d+\.\d\ds\)"
)


def permission_checks(sim: SimCluster) -> int:
    assert sim.pveproxy is not None
    return sum(1 for ex in sim.pveproxy.journal if ex.path == "/access/permissions")


async def test_a_token_without_vm_clone_imports_says_why_and_clones_once_granted(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    sim.revoke_api("/vms", ["VM.Clone"])  # what a 0.1.0 token holds on /vms
    service: Service = await start_service()
    first = await service.install()
    assert first.closed and first.last["status"] == "success", first.records[-3:]
    assert first.steps == STAGES
    assert all(MESSAGE.match(r["message"]) for r in first.records)
    download = messages(first, DOWNLOAD)
    if driver == "cli":  # root over SSH: Proxmox checks no ACL, the token is not used
        assert not any("templates off" in m for m in download), download
        assert download[-1].startswith("[+] template 9000 (debian 12, ")
        return
    assert [m for m in download if "templates off" in m and SAID.fullmatch(m)] == [download[1]]
    assert download[-1].startswith("[+] completed OS image download (")
    assert sim.vm(9000) is None  # no template built, none to clone
    commands = sim.commands()
    assert imports(commands) and not any(" qm clone " in c for c in commands)
    vm = sim.vm(first.last["vm_id"])
    assert vm is not None and "linked clone" not in vm.config["description"]

    # The next install is told the same without asking Proxmox again.
    second = await service.install()
    assert second.closed and second.last["status"] == "success", second.records[-3:]
    assert any(SAID.fullmatch(m) for m in messages(second, DOWNLOAD))
    assert permission_checks(sim) == 1

    # The admin grants it (pveum role modify CairnVM --append 1 --privs VM.Clone); the next
    # run of cairn asks at its first install, and clones.
    sim.grant_api("/vms", ["VM.Clone"])
    await start_service.stop_last()
    service = await start_service()
    third = await service.install()
    assert third.closed and third.last["status"] == "success", third.records[-3:]
    download = messages(third, DOWNLOAD)
    assert not any("templates off" in m for m in download), download
    assert download[-1].startswith("[+] template 9000 (debian 12, ")
    tpl = sim.vm(9000)
    assert tpl is not None and tpl.config["template"] in (1, "1")
    copied = messages(third, "VM creation > importing disk image")[-1]
    assert copied.startswith("[+] linked clone of template 9000, 0 bytes copied ("), copied
    assert permission_checks(sim) == 2


async def test_a_pool_scoped_token_without_vm_clone_is_told_about_its_pool(
    sim: SimCluster, start_service: Any, driver: str
) -> None:
    drivers.api_only(driver, "the token's ACL")
    sim.add_pool("cairn")
    acl = sim.cairn_acl(pool="cairn")
    acl["/pool/cairn"] = [p for p in acl["/pool/cairn"] if p != "VM.Clone"]
    secret = sim.add_api_token("cairn@pve!pool", acl)
    service: Service = await start_service(
        PVE_API_POOL="cairn", PVE_API_TOKEN=f"cairn@pve!pool={secret}"
    )
    sse = await service.install()
    assert sse.closed and sse.last["status"] == "success", sse.records[-3:]
    said = [m for m in messages(sse, DOWNLOAD) if "templates off" in m]
    assert len(said) == 1 and "the API token lacks VM.Clone on /pool/cairn; importing" in said[0]
    assert sim.pool_members("cairn") == [sse.last["vm_id"]]  # the VM alone, no template
