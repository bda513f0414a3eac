"""Install and task views in a real Chromium against a real `cairn up` (simulated cluster), at
a laptop's 1280x800 and a phone's 390x844: the progress is where the user looks (no scrolling),
the bar counts the stages that ran and shows a failure as one, and a VM's page opened during
its install shows what is known instead of zeros."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect
from pvesim.cluster import SimCluster

from tests.console.browser import Stack, Watch

SIZES = {"laptop": (1280, 800), "phone": (390, 844)}


@pytest.fixture(params=list(SIZES))
def sized(request: pytest.FixtureRequest, browser: Browser, watch: Watch) -> Iterator[Page]:
    width, height = SIZES[request.param]
    tab = watch.page(browser, width, height)
    yield tab
    tab.context.close()
    watch.assert_clean()


def fill_form(page: Page, stack: Stack, name: str, vmid: int | None = None) -> None:
    page.goto(stack.url("vms/new"))
    page.get_by_label("Operating system").select_option("debian")
    page.get_by_label("Version").select_option("12")
    page.get_by_label("Name").fill(name)
    if vmid is not None:
        page.get_by_label("VM id").fill(str(vmid))
    page.get_by_label("vCPUs").fill("3")
    page.get_by_label("Password").fill("a-password-typed-in")


def scroll_y(page: Page) -> float:
    return float(page.evaluate("window.scrollY"))


def test_an_install_is_followed_where_the_user_looks(sized: Page, stack: Stack) -> None:
    page = sized
    name = f"seen{page.viewport_size['width']}"  # type: ignore[index]
    fill_form(page, stack, name)
    page.get_by_role("button", name="Install").click()
    # The form folds into one line saying what was asked; the stages are on screen at once.
    expect(
        page.get_by_text(re.compile(f"Installing Debian 12 named {name} on the main node: 3 vCPUs"))
    ).to_be_visible()
    expect(page.get_by_role("button", name="Install", exact=True)).to_have_count(0)
    expect(page.locator('li[data-step="preparation > checking VMID"]')).to_be_in_viewport()
    expect(page.get_by_role("heading", name="Progress")).to_be_in_viewport()
    expect(page.get_by_role("heading", name="Progress")).to_be_focused()
    final = page.locator('li[data-step="VM initialization > finalizing"]')
    expect(final).to_have_attribute("data-status", "success", timeout=60_000)
    # The final stage reads as its summary, once ("completed in 0.12s", not twice the time),
    # without the stream's "[+]" (the stage's own mark says it is done).
    # Waited for: the stage turns to success with its own "[+] VM is ready" record, and the
    # summary is the next record, which may reach the page a moment later.
    expect(final.locator(".message")).to_have_text(
        re.compile(r"^VM installation completed in \d+\.\d\ds$")
    )
    # Done: a full bar (the migration it had no need of is not counted as done, nor missing).
    bar = page.locator("section.task progress")
    expect(bar).to_have_attribute("data-outcome", "done")
    assert bar.get_attribute("value") == bar.get_attribute("max") == "17"
    note = page.locator("p.task-note")
    expect(note).to_have_text(re.compile(r"^VM \d+ is ready at \d+\.\d+\.\d+\.\d+\. Open VM \d+$"))
    expect(note).to_be_in_viewport()
    # Another install: the form comes back.
    page.get_by_role("button", name="Install another VM").click()
    expect(page.get_by_label("Name")).to_have_value("")


def test_a_failed_install_shows_a_failed_bar(sized: Page, stack: Stack) -> None:
    page = sized
    taken = stack.install("taken")
    fill_form(page, stack, "again", taken)
    page.get_by_role("button", name="Install").click()
    first = page.locator('li[data-step="preparation > checking VMID"]')
    expect(first).to_have_attribute("data-status", "error")
    expect(page.get_by_role("alert")).to_contain_text(f"VM {taken} already exists")
    bar = page.locator("section.task progress")
    expect(bar).to_have_attribute("data-outcome", "failed")
    # Nothing ran after the failure: the bar is empty and red, not nearly full.
    assert bar.get_attribute("value") == "0" and bar.get_attribute("max") == "18"
    expect(bar).to_have_accessible_name("Stages done: 0 of 18, failed")
    colour = bar.evaluate("el => getComputedStyle(el).accentColor")
    assert colour in ("rgb(197, 48, 48)", "rgb(252, 129, 129)"), colour
    expect(page.locator('li[data-status="skipped"]')).to_have_count(17)
    expect(first).to_be_in_viewport()
    # The reason, and a way back to the form.
    page.get_by_role("button", name="Install another VM").click()
    expect(page.get_by_label("VM id")).to_be_visible()
    stack.request("POST", f"/console/svc/vm/api/vm/{taken}/stop")
    stack.request("POST", f"/console/svc/vm/api/vm/{taken}/destroy")


def test_a_vm_page_during_its_install_shows_what_is_known(page: Page, stack: Stack) -> None:
    vmid = 191
    SimCluster(stack.root / "data" / "pvesim").inject_failure("guest boot", vmid=vmid)
    fill_form(page, stack, "early", vmid)
    page.get_by_label("Memory (MiB)").fill("3072")
    page.get_by_label("Disk (GiB)").fill("24")
    page.get_by_role("button", name="Install").click()
    waiting = page.locator('li[data-step="VM initialization > waiting for ready"]')
    expect(waiting).to_have_attribute("data-status", "processing")
    page.goto(stack.url(f"vm/{vmid}"))
    details = page.locator("dl.details")
    expect(details.locator("div", has_text="Created by cairn")).to_contain_text(
        "being created by cairn"
    )
    expect(details.locator("div", has_text="vCPUs")).to_contain_text("3")
    expect(details.locator("div", has_text="Memory")).to_contain_text("3 GiB")
    # "Disk", not the "Disks" row that lists the VM's volumes.
    disk = details.locator("div").filter(has=page.get_by_text("Disk", exact=True))
    expect(disk).to_contain_text("24 GiB")
    assert "0 B" not in details.inner_text()
    assert "no: cairn never" not in details.inner_text()
    # Destroy is disabled, and says why.
    destroy = page.get_by_role("button", name="Destroy")
    expect(destroy).to_be_disabled()
    expect(destroy).to_have_accessible_description(re.compile("wait until the task below ends"))
    expect(page.get_by_text("Destroy: wait until the task below ends.")).to_be_visible()
    expect(waiting).to_have_attribute("data-status", "error", timeout=60_000)


def frames(text: str) -> list[dict[str, str]]:
    """An SSE body's events: each a dict of its fields (id, event, data)."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            out.append(fields)
    return out


def test_an_install_streams_each_id_once_and_ends_on_the_last(stack: Stack) -> None:
    """Ids are the store's, each once; the password (stored nowhere) and the close carry none,
    so a client's Last-Event-ID stays on the last record it can resume after."""
    status, text = stack.request(
        "POST", "/console/svc/vm/api/vm/install", {"os": "debian", "version": "12", "name": "ids"}
    )
    assert status == 200
    events = frames(text)
    ids = [e["id"] for e in events if "id" in e]
    assert len(ids) == len(set(ids)) > 10, ids
    vmid = json.loads(events[-2]["data"])["vm_id"]
    assert all(re.fullmatch(f"{vmid}:\\d+", i) for i in ids), ids
    versions = [int(i.split(":")[1]) for i in ids]
    assert versions == sorted(versions)
    password = next(e for e in events if "Password:" in e["data"])
    assert "id" not in password
    assert events[-1] == {"event": "close", "data": "{}"}
    # The last id resumes after the final record: nothing more, and the stream closes.
    status, rest = stack.request(
        "GET", f"/console/svc/vm/api/vm/{vmid}/task", headers={"Last-Event-ID": ids[-1]}
    )
    assert status == 200 and frames(rest) == [{"event": "close", "data": "{}"}], rest
