"""The install form's Advanced part in a real Chromium against a real `cairn up`: what it sends
reaches the VM, the script's output shows among the stages, and the VM's page and the list
show the tags, notes, network and disks."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from pvesim.state import Store

from tests.console.browser import Stack


def test_an_install_shaped_from_the_advanced_part_shows_on_the_vm_page(
    page: Page, stack: Stack
) -> None:
    page.goto(stack.url("vms/new"))
    page.get_by_label("Name").fill("shaped")
    page.get_by_text("Advanced: network, disks").click()
    page.get_by_label("VLAN tag").fill("40")
    page.get_by_label("DNS servers").fill("10.0.0.53")
    page.get_by_label("Extra disks").fill("8G@local-lvm")
    page.get_by_label("Tags").fill("web, edge")
    page.get_by_label("Notes").fill("made in the console")
    page.get_by_label("First-boot script").fill("echo shaped in the console\n")
    page.get_by_role("button", name="Install").click()
    final = page.locator('li[data-step="VM initialization > finalizing"]')
    expect(final).to_have_attribute("data-status", "success", timeout=60_000)
    ready = page.get_by_text(re.compile(r"VM \d+ is ready at"))
    vmid = int(re.search(r"VM (\d+)", ready.inner_text()).group(1))  # type: ignore[union-attr]
    log = page.locator("section.task div.log")  # every record, in the task's Log
    assert "script: shaped in the console" in (log.text_content() or "")

    with Store(stack.root / "data" / "pvesim").locked() as txn:
        found = txn.find_vm(vmid)
    assert found is not None
    config = found[1]["config"]
    assert str(config["net0"]).endswith(",bridge=vmbr0,tag=40")
    assert config["tags"] == "debian;web;edge" and config["nameserver"] == "10.0.0.53"

    page.get_by_role("button", name="I have saved it").click()
    page.get_by_role("link", name=f"Open VM {vmid}").click()
    details = page.locator("dl.details")
    expect(details).to_contain_text("debian, web, edge")
    expect(details).to_contain_text("vmbr0, VLAN 40")
    expect(details).to_contain_text("scsi1: 8G")
    expect(details).to_contain_text("made in the console")
    page.goto(stack.url("vms"))
    expect(page.locator(f'tr[data-vmid="{vmid}"] .tags')).to_have_text(re.compile(r"web\s+edge"))

    # The resize form grows the disk chosen: the extra one here, the boot disk untouched.
    assert stack.request("POST", f"/console/svc/vm/api/vm/{vmid}/stop")[0] == 200
    page.goto(stack.url(f"vm/{vmid}"))
    expect(page.locator("dl.details .badge")).to_have_text("stopped")
    page.get_by_role("combobox", name=re.compile(r"^Disk")).select_option("scsi1")
    page.get_by_label("Grow disk by (GiB)").fill("2")
    page.get_by_label("Grow disk by (GiB)").press("Enter")
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("heading")).to_have_text("Disk scsi1: 8G + 2 GiB")
    dialog.get_by_role("button", name="Confirm").click()
    expect(details).to_contain_text("scsi1: 10G")
    with Store(stack.root / "data" / "pvesim").locked() as txn:
        found = txn.find_vm(vmid)
    assert found is not None
    assert str(found[1]["config"]["scsi1"]).endswith(",size=10G")
    assert str(found[1]["config"]["scsi0"]).endswith(",size=16G")
