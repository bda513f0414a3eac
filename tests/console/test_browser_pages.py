"""Every page of the console, in a real Chromium, at 1280 px and at a 390 px phone's width:
loaded from loopback only (the scripts, styles and libraries are the console's own), readable
without sideways scrolling, every control labelled, light and dark, usable from the keyboard.

The tour also takes the screenshots of docs/screenshots/: `ops/screenshots` runs it with
CAIRN_SCREENSHOTS set to that folder; otherwise they go to a temporary one.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect

from tests.console.browser import Stack, Watch, wait_until

WIDTHS = {1280: 860, 390: 844}  # width: height of the window

# Controls that have no accessible name (a label, aria-label, or their own text).
UNLABELLED = """() => [...document.querySelectorAll('input, select, textarea, button')]
  .filter((el) => el.type !== 'hidden' && el.checkVisibility())
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                  && !el.getAttribute('aria-labelledby') && !el.textContent.trim())
  .map((el) => el.outerHTML.slice(0, 120))"""


REPORT = """const name: string = event.name ?? "world";
for (const step of ["fetch", "render", "publish"]) {
  console.log(`${step}: done`);
}
return { greeting: `hello ${name}`, steps: 3 };
"""


def png(width: int, height: int, colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def seeded(stack: Stack) -> Stack:
    """Something on every page: VMs, functions, images, an indexed database."""
    for name, os_name, version in (("web", "debian", "12"), ("db", "rockylinux", "9")):
        stack.install(name, os_name, version)
    status, _ = stack.request(
        "POST",
        "/console/svc/functions/upload",
        {"path": "reports/daily", "language": "typescript", "code": REPORT},
    )
    assert status == 200
    for name, size, colour in (
        ("harbour.png", (640, 360), (40, 110, 170)),
        ("forest.png", (360, 480), (50, 130, 70)),
        ("sunset.png", (500, 500), (210, 110, 50)),
    ):
        stack.upload_image("gallery", name, png(*size, colour))
    wait_until(
        lambda: stack.json(
            "/console/svc/search/api/search?db=notes&target=semantic&q=hypervisor%20machines"
        )["semantic"],
        timeout=60,
        what="the notes database to be embedded",
    )
    return stack


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = os.environ.get("CAIRN_SCREENSHOTS")
    folder = Path(out) if out else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def first_vm(stack: Stack) -> int:
    return int(min(v["vmid"] for v in stack.json("/console/svc/vm/api/vm/list")["list"]))


def install(page: Page, password: str | None) -> None:
    again = page.get_by_role("button", name="Install another VM")  # the form folds once sent
    if again.count():
        again.click()
    page.get_by_label("Name").fill("app")
    if password is not None:
        page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Install").click()
    expect(page.locator('li[data-step="VM initialization > finalizing"]')).to_have_attribute(
        "data-status", "success", timeout=60_000
    )


def install_with_a_password(page: Page) -> None:
    install(page, "a-password-for-the-demo")


def install_without_one(page: Page) -> None:
    install(page, None)
    expect(page.get_by_role("dialog")).to_be_visible()


def run_function(page: Page) -> None:
    page.get_by_role("button", name="Run the latest version").click()
    expect(page.locator(".outcome")).to_contain_text("Result")


def search(page: Page) -> None:
    page.get_by_label("Query").fill("fox jumps")
    page.get_by_role("button", name="Search").click()  # the best match, by default
    best = page.locator('[data-branch="hybrid"]')
    expect(best.locator("mark")).to_have_text(["fox", "jumps"])
    expect(page.locator("[data-branch]")).to_have_count(1)


# name, hash, what to do there before the picture, text the page must show
TOUR: list[tuple[str, str, Any, str]] = [
    ("overview", "", None, "Nodes"),
    ("vms", "vms", None, "web"),
    ("vm", "vm/{vm}", None, "Created by cairn"),
    ("install", "vms/new", install_with_a_password, "is ready at"),
    ("password", "vms/new", install_without_one, "is ready at"),
    ("functions", "functions", None, "reports/daily"),
    ("function", "function/reports/daily", run_function, "Result"),
    ("search", "search", search, "Best match"),
    ("images", "images/gallery", None, "harbour.png"),
    ("events", "events", None, "images.stored"),
]


@pytest.mark.parametrize("width", list(WIDTHS))
def test_a_tour_of_every_page(
    browser: Browser, seeded: Stack, watch: Watch, shots: Path, width: int
) -> None:
    page = watch.page(browser, width, WIDTHS[width])
    context = page.context
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    vm = first_vm(seeded)
    try:
        for name, where, act, shows in TOUR:
            page.goto(seeded.url(where.format(vm=vm)))
            expect(page.get_by_role("heading", level=1)).to_be_visible()
            if act is not None:
                act(page)
            expect(page.locator("main")).to_contain_text(shows)
            # Readable as it is: nothing wider than the window, every control named.
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, f"{name} is {wide} px wide at {width} px"
            assert page.evaluate(UNLABELLED) == [], name
            page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
            # And in dark, as a system set to dark shows it.
            page.emulate_media(color_scheme="dark")
            page.screenshot(path=str(shots / f"{name}-{width}-dark.png"), full_page=True)
            page.emulate_media(color_scheme="light")
    finally:
        context.close()
    watch.assert_clean()
    # Everything the pages loaded came from the console itself: page, scripts, libraries,
    # styles, thumbnails, API answers and the event feed.
    assert requested and all(url.startswith(seeded.base + "/") for url in requested), {
        url for url in requested if not url.startswith(seeded.base + "/")
    }
    loaded = {re.sub(r"\?.*", "", url.removeprefix(seeded.base)) for url in requested}
    assert {
        "/console/vendor/preact-htm/standalone.module.js",
        "/console/vendor/eventsource-parser/index.js",
        "/console/vendor/pico/pico.min.css",
        "/console/static/app.js",
        "/console/events",
    } <= loaded


def test_the_checks_see_a_request_beyond_loopback(page: Page, stack: Stack, watch: Watch) -> None:
    """What every browser test ends with does catch a page reaching out: the policy stops a
    script's request to another host (and says so), the guard any request that still goes."""
    page.goto(stack.url())
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    policy = "Content Security Policy"
    with page.expect_console_message(lambda m: policy in m.text):
        page.evaluate("fetch('http://192.0.2.1/x').catch(() => null)")
    assert watch.outside == []
    with page.expect_event("requestfailed") as failed:
        page.evaluate("location.assign('http://192.0.2.1/y')")
    assert failed.value.url == "http://192.0.2.1/y"
    assert watch.outside == ["http://192.0.2.1/y"]
    assert any(policy in error for error in watch.errors)
    watch.outside.clear()
    watch.errors.clear()


def test_light_and_dark_follow_the_system(browser: Browser, stack: Stack) -> None:
    colours = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme)
        page = context.new_page()
        page.goto(stack.url())
        expect(page.get_by_role("heading", level=1)).to_be_visible()
        colours[scheme] = page.evaluate(
            "getComputedStyle(document.documentElement).backgroundColor"
        )
        context.close()
    assert colours["light"] != colours["dark"], colours


def test_the_keyboard_reaches_every_page_and_lands_on_its_heading(page: Page, stack: Stack) -> None:
    page.goto(stack.url())
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the page")).to_be_focused()
    for label in ("VMs", "Functions", "Search", "Images", "Events"):
        link = page.get_by_role("navigation", name="Pages").get_by_role("link", name=label)
        link.focus()
        page.keyboard.press("Enter")
        heading = page.get_by_role("heading", level=1)
        expect(heading).to_have_text(label if label != "VMs" else "VMs")
        expect(heading).to_be_focused()
        expect(link).to_have_attribute("aria-current", "page")


def test_pages_hold_still_while_an_install_streams(page: Page, stack: Stack) -> None:
    """No layout jump: the stage list is laid out before the records arrive, each stage one
    line, so nothing above or below it moves as they come."""
    page.goto(stack.url("vms/new"))
    page.get_by_label("Name").fill("still")
    page.get_by_label("Password").fill("typed-by-the-user")
    page.get_by_role("button", name="Install").click()
    first = page.locator('li[data-step="preparation > checking VMID"]')
    expect(first).to_have_attribute("data-status", re.compile("processing|success"))
    boxes = [first.bounding_box(), page.locator("section.task details").bounding_box()]
    expect(page.locator('li[data-step="VM initialization > finalizing"]')).to_have_attribute(
        "data-status", "success", timeout=60_000
    )
    assert [first.bounding_box(), page.locator("section.task details").bounding_box()] == boxes
    # The password typed was sent and is not kept in the page, nor in the form brought back.
    assert "typed-by-the-user" not in page.content()
    page.get_by_role("button", name="Install another VM").click()
    expect(page.get_by_label("Password")).to_have_value("")
    assert "typed-by-the-user" not in page.content()
    expect(page.get_by_role("dialog")).to_have_count(0)


@pytest.fixture(autouse=True)
def _no_leftover_contexts(browser: Browser) -> Iterator[None]:
    yield
    assert all(not c.pages for c in browser.contexts)
