"""A safe change from a VM's page in a real Chromium against a real `cairn up` (simulated
cluster): the JSON typed in, a confirmation, then its stream read stage by stage, ending in a
rollback whose reason the page says."""

from __future__ import annotations

import json

from playwright.sync_api import Page, expect

from tests.console.browser import Stack


def test_a_change_that_rolls_back_is_read_from_its_stream(page: Page, stack: Stack) -> None:
    body = {"os": "debian", "version": "12", "name": "changed"}
    status, text = stack.request("POST", "/console/svc/vm/api/vm/install", body)
    assert status == 200, text
    vm = next(
        v for v in stack.json("/console/svc/vm/api/vm/list")["list"] if v["name"] == "changed"
    )
    vmid = vm["vmid"]
    page.goto(stack.url(f"vm/{vmid}"))
    expect(page.locator("dl.details .badge")).to_have_text("running")

    change = page.get_by_label("Change (JSON)")
    change.fill("{not json")
    page.get_by_role("button", name="Run change").click()
    expect(page.get_by_role("alert")).to_contain_text("The change is not JSON")

    failing = {"steps": [{"run": "echo half > /root/marker"}], "verify": {"run": "exit 5"}}
    change.fill(json.dumps(failing))
    page.get_by_role("button", name="Run change").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Change VM {vmid}?")
    expect(dialog).to_contain_text("rolled back to it")
    dialog.get_by_role("button", name="Confirm").click()

    rolled = page.locator('li[data-step="change > rolling back"]')
    expect(rolled).to_have_attribute("data-status", "error")
    expect(rolled).to_contain_text("change rolled back: verify failed: check 1 of 1: exit status 5")
    for step in ("change > taking snapshot", "change > step 1: run"):
        expect(page.locator(f'li[data-step="{step}"]')).to_have_attribute("data-status", "success")
    expect(page.locator('li[data-step="change > verifying"]')).to_have_attribute(
        "data-status", "error"
    )
    expect(page.locator("p.task-note")).to_contain_text(
        "change > verifying: check 1 of 1 failed: exit status 5"
    )
    page.get_by_text("Log (").click()
    expect(page.get_by_role("log")).to_contain_text(f"VM {vmid} is back at snapshot cairn-change-")
    assert stack.request("GET", f"/console/svc/vm/api/vm/{vmid}/status") == (200, "running")
    assert stack.json(f"/console/svc/vm/api/vm/{vmid}/snapshots") == []
