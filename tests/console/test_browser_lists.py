"""The VM list in a real Chromium against a real `cairn up` (simulated cluster): reloads held
to one a second however fast events come, an IP column, filters and sorting, and a banner on
every page saying the cluster is simulated."""

from __future__ import annotations

import re
import threading
import time

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.console.browser import Stack

VM_CHANGES = ["vm.task_started", "vm.task_ended", "vm.installed", "vm.reconfigured",
              "vm.adopted", "vm.disowned", "vm.observed"]  # fmt: skip
# Counts the VM-changing events the page's feed delivers (installed before its scripts run).
COUNT_EVENTS = """
window.__vmEvents = 0;
const Original = window.EventSource;
window.EventSource = class extends Original {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (m) => {
      try {
        if (%s.includes(JSON.parse(m.data).type)) window.__vmEvents += 1;
      } catch {}
    });
  }
};
""" % (VM_CHANGES,)  # noqa: UP031


@pytest.fixture(scope="module")
def vms(stack: Stack) -> dict[str, int]:
    return {
        "alpha": stack.install("alpha", "debian", "12"),
        "beta": stack.install("beta", "ubuntu", "24.04", node="pve2"),
        "gamma": stack.install("gamma", "rockylinux", "9"),
    }


def test_the_list_reloads_at_most_once_a_second_while_events_flow(
    page: Page, stack: Stack, vms: dict[str, int]
) -> None:
    vmid = vms["gamma"]
    stop = threading.Event()

    def churn() -> None:  # stop and start the VM, again and again: events keep coming
        while not stop.is_set():
            stack.request("POST", f"/console/svc/vm/api/vm/{vmid}/stop")
            stack.request("POST", f"/console/svc/vm/api/vm/{vmid}/start")

    lists: list[float] = []
    page.on(
        "request", lambda r: lists.append(time.monotonic()) if "/api/vm/list" in r.url else None
    )
    page.add_init_script(COUNT_EVENTS)
    worker = threading.Thread(target=churn)
    worker.start()
    try:
        opened = time.monotonic()
        page.goto(stack.url("vms"))
        expect(page.locator(f'tr[data-vmid="{vmid}"]')).to_be_visible()
        page.wait_for_timeout(5000)  # the measured window, not a synchronisation
        window = [t for t in lists if t - opened <= 5.0]
        events = page.evaluate("window.__vmEvents")
    finally:
        stop.set()
        worker.join(60)
    print(f"VMs page over 5 s: {len(window)} /api/vm/list requests for {events} VM events")
    assert events >= 10, events  # enough to tell a held reload from one per event
    assert 1 <= len(window) <= 6, window
    # The last event is followed: the list ends in the VM's final state.
    status, final = stack.request("GET", f"/console/svc/vm/api/vm/{vmid}/status")
    assert status == 200
    expect(page.locator(f'tr[data-vmid="{vmid}"] .badge')).to_have_text(final)


def test_ip_column_filters_and_sorting(page: Page, stack: Stack, vms: dict[str, int]) -> None:
    listed = {v["vmid"]: v for v in stack.json("/console/svc/vm/api/vm/list")["list"]}
    stack.request("POST", f"/console/svc/vm/api/vm/{vms['alpha']}/stop")
    page.goto(stack.url("vms"))
    table = page.locator("table.vms")
    alpha = table.locator(f'tr[data-vmid="{vms["alpha"]}"]')
    expect(alpha.locator(".badge")).to_have_text("stopped")
    expect(table.get_by_role("columnheader", name="IP address")).to_be_visible()
    expect(alpha).to_contain_text(listed[vms["alpha"]]["ip"])
    rows = table.locator("tbody tr")

    def names() -> list[str]:
        return [n.strip() for n in rows.locator("td:nth-child(2) a").all_inner_texts()]

    page.get_by_label("Filter by name, ID or IP").fill("alp")
    expect(rows).to_have_count(1)
    expect(page.get_by_role("status").filter(has_text="VMs on the")).to_have_text(
        re.compile(r"^1 of \d+ VMs on the simulated cluster$")
    )
    # Each filter alone keeps the one VM it names; set back to empty, it keeps all again.
    for choose, value, only in (
        (page.get_by_label("Filter by name, ID or IP").fill, listed[vms["beta"]]["ip"], "beta"),
        (page.get_by_label("Node").select_option, "pve2", "beta"),
        (page.get_by_label("OS").select_option, "rockylinux", "gamma"),
        (page.get_by_label("State").select_option, "stopped", "alpha"),
    ):
        choose(value)
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text(only)
        choose("")
    page.get_by_label("Filter by name, ID or IP").fill("no such vm")
    expect(page.get_by_text("No VM matches the filter.")).to_be_visible()
    page.get_by_label("Filter by name, ID or IP").fill("")

    # Sorted by a header's button: by name, then the other way; the header says which.
    header = table.get_by_role("columnheader", name="Name")
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "ascending")
    assert [n for n in names() if n in vms] == ["alpha", "beta", "gamma"]
    header.get_by_role("button").press("Enter")
    expect(header).to_have_attribute("aria-sort", "descending")
    assert [n for n in names() if n in vms] == ["gamma", "beta", "alpha"]
    stack.request("POST", f"/console/svc/vm/api/vm/{vms['alpha']}/start")


@pytest.mark.parametrize("width", [1280, 390])
def test_a_simulated_cluster_is_said_on_every_page(
    browser: Browser, stack: Stack, width: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 844})
    page = context.new_page()
    try:
        for where in ("", "vms", "functions", "events"):
            page.goto(stack.url(where))
            banner = page.get_by_role("note").filter(has_text="Simulated cluster")
            expect(banner).to_be_visible()
            expect(banner).to_be_in_viewport()
            assert page.evaluate("document.documentElement.scrollWidth") <= width
    finally:
        context.close()
