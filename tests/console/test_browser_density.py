"""The console as dense as an admin's day, in a real Chromium against a real `cairn up`, at a
laptop's 1280x800 and a phone's 390x844: the nodes and the VMs on the first screen, what a
click on Install or Run gave in view, nothing to scroll sideways, a one-line banner, the
install log in clean parts, product names, old → new in a resize, words instead of event
types and statuses, and plurals that agree."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.console.browser import Stack, Watch

SIZES = [(1280, 800), (390, 844)]
CODE = 'print("working", flush=True)\nreturn {"done": True}\n'


@pytest.fixture(params=SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def sized(
    request: pytest.FixtureRequest, browser: Browser, watch: Watch
) -> Iterator[tuple[Page, int]]:
    """A watched page of each size in turn, and its width; its context closed after the test."""
    width, height = request.param
    page = watch.page(browser, width, height)
    yield page, width
    page.context.close()


@pytest.fixture(scope="module")
def seeded(stack: Stack) -> Stack:
    for name, os_name, version in (("web", "debian", "12"), ("db", "rockylinux", "9")):
        stack.install(name, os_name, version)
    fn = {"path": "dense/run", "language": "python", "code": CODE}
    assert stack.request("POST", "/console/svc/functions/upload", fn)[0] == 200
    return stack


def in_view(element: Locator) -> bool:
    """Wholly inside the window as it is scrolled now."""
    inside: bool = element.evaluate(
        """el => { const r = el.getBoundingClientRect();
                   return r.top >= 0 && r.left >= 0 && r.bottom <= innerHeight
                          && r.right <= innerWidth && r.height > 0; }"""
    )
    return inside


def no_sideways_scroll(page: Page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # Nor inside a box: the VM table fits (on a phone it is one card per VM).
    wider = page.evaluate(
        "[...document.querySelectorAll('.table')].filter((b) => b.scrollWidth > b.clientWidth + 1)"
        ".map((b) => b.getAttribute('aria-label'))"
    )
    assert wider == [], wider


def test_the_overview_shows_nodes_and_vms_on_the_first_screen(
    sized: tuple[Page, int], seeded: Stack
) -> None:
    page, width = sized
    page.goto(seeded.url())
    node = page.locator('article.node[data-node="pve1"]')
    vms = page.locator('section[aria-labelledby="vms-h"]')
    row = vms.locator("tr", has_text="web")
    expect(node).to_be_visible()
    expect(row).to_be_visible()
    assert page.evaluate("scrollY") == 0
    assert in_view(node), node.bounding_box()
    assert in_view(row), row.bounding_box()
    no_sideways_scroll(page, width)
    # Product names, not the API's slugs.
    expect(vms.locator("tr", has_text="db")).to_contain_text("Rocky Linux")
    expect(row).to_contain_text("Debian")
    assert "rockylinux" not in (vms.text_content() or "")
    # The banner says it in a line (two on a phone), not a paragraph.
    banner = page.locator('[data-banner="simulated"]')
    expect(banner).to_contain_text("Simulated cluster")
    box = banner.bounding_box()
    assert box is not None and box["height"] <= (36 if width > 600 else 60), box
    # A service's address breaks, if at all, after its scheme: never inside host or port.
    address = page.locator('tr[data-service="vm"] code.url')
    lines = address.evaluate(
        """el => { const range = document.createRange();
                   range.selectNodeContents(el.lastChild);
                   return new Set([...range.getClientRects()].map((r) => r.top)).size; }"""
    )
    assert lines == 1
    # Events in words: no internal type names in the latest list.
    latest = page.get_by_role("region", name="Latest events")
    expect(latest.locator("li").first).to_be_visible()
    text = latest.text_content() or ""
    assert not re.search(r"\b(vm|vmalloc|functions|images|search)\.[a-z_]+", text), text
    assert "vmalloc:" not in text


def test_what_install_gave_is_in_view_and_its_log_reads_clean(
    sized: tuple[Page, int], seeded: Stack
) -> None:
    page, width = sized
    page.goto(seeded.url("vms/new"))
    install = page.get_by_role("button", name="Install")
    if width > 600:  # on a laptop the whole form, its button included, is on screen
        assert in_view(install)
    page.get_by_label("Name").fill(f"dense{width}")
    page.get_by_label("Password").fill("typed-by-the-user")
    install.click()
    final = page.locator('li[data-step="VM initialization > finalizing"]')
    expect(final).to_have_attribute("data-status", "success", timeout=60_000)
    ready = page.get_by_text(re.compile(r"VM \d+ is ready at"))
    expect(ready).to_be_visible()
    assert in_view(ready)
    no_sideways_scroll(page, width)
    # The stages and the log: the words, a mark, the time apart; no "[+]", no "(0.00s)".
    expect(final.locator(".msg .text")).to_have_text(
        re.compile(r"^VM installation completed in \d+\.\d\ds$")
    )
    page.locator("section.task details summary").click()
    log = page.get_by_role("log", name="Log")
    expect(log).to_be_visible()
    text = log.text_content() or ""
    assert "[+]" not in text and "[*]" not in text, text
    assert not re.search(r"\(\d+\.\d+s\)", text), text
    assert len(re.findall(r"completed in \d+\.\d+s", text)) == 1, text
    lines = log.locator("li")
    assert lines.count() > 18
    done = lines.filter(has_text="VM created successfully").first
    expect(done.locator('.msg[data-kind="ok"] .kind')).to_have_text("✓")
    expect(done.locator(".elapsed")).to_have_text(re.compile(r"^\d+\.\d\d s$"))
    expect(page.locator("section.task")).to_contain_text(re.compile(r"Log \(\d+ records\)"))


def test_what_a_run_gave_is_in_view(sized: tuple[Page, int], seeded: Stack) -> None:
    page, width = sized
    page.goto(seeded.url("function/dense/run"))
    run = page.get_by_role("button", name="Run the latest version")
    run.click()
    outcome = page.locator(".outcome")
    expect(outcome).to_contain_text('Result (json): {"done":true}')
    page.wait_for_function(
        """() => { const r = document.querySelector('.outcome').getBoundingClientRect();
                   return r.top >= 0 && r.bottom <= innerHeight; }"""
    )
    # A refusal: the service's words as a sentence, its kind as a label, where it happened.
    page.get_by_label(re.compile("^Input")).fill("{not json")
    run.click()
    error = page.locator("#run-h ~ div p.error")
    expect(error).to_have_text("Refused Input is not valid JSON.")
    expect(error.locator(".status-label")).to_have_attribute("title", "HTTP status 400")
    assert in_view(error)
    no_sideways_scroll(page, width)


def test_a_resize_says_old_and_new(page: Page, seeded: Stack) -> None:
    listed = seeded.json("/console/svc/vm/api/vm/list")["list"]
    vm = next(v for v in listed if v["name"] == "db")
    assert seeded.request("POST", f"/console/svc/vm/api/vm/{vm['vmid']}/stop")[0] == 200
    page.goto(seeded.url(f"vm/{vm['vmid']}"))
    expect(page.locator("dl.details .badge")).to_have_text("stopped")
    expect(page.locator("dl.details")).to_contain_text("Rocky Linux 9")
    dialog = page.get_by_role("dialog")
    for field, value, said in (
        ("vCPUs (cores)", "4", "vCPUs: 2 → 4"),
        ("Memory (MiB)", "4096", "Memory: 2 GiB → 4 GiB"),
        ("Grow disk by (GiB)", "8", "Disk: 16 GiB → 24 GiB (8 GiB more)"),
    ):
        page.get_by_label(field).fill(value)
        page.get_by_label(field).press("Enter")
        expect(dialog.get_by_role("heading")).to_have_text(said)
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_be_hidden()


def test_events_read_as_words_and_counts_agree(page: Page, seeded: Stack) -> None:
    page.goto(seeded.url("events"))
    entries = page.locator("li.event")
    reserved = entries.filter(has=page.locator('[title="vmalloc.reserved"]')).first
    expect(reserved.locator(".what")).to_have_text("ID and address reserved")
    expect(reserved.locator("summary")).to_contain_text(
        re.compile(r"VM \d+ and 127\.0\.0\.\d+ kept")
    )
    installed = entries.filter(has=page.locator('[title="vm.installed"]')).filter(
        has_text=re.compile(r": db \(")
    )
    expect(installed.locator("summary")).to_contain_text("(Rocky Linux 9)")
    # One chunk is "1 chunk" (fox.txt is one short line).
    indexed = entries.filter(has_text="fox.txt").filter(
        has=page.locator('[title="search.document_indexed"]')
    )
    expect(indexed.locator("summary")).to_contain_text("(1 chunk)")
    heads = page.locator("li.event .what").all_inner_texts()
    assert heads and not [h for h in heads if re.search(r"[a-z]\.[a-z]", h)], heads
    forms = page.evaluate(
        """async () => { const f = await import('/console/static/format.js');
                         return [f.count(1, 'VM'), f.count(2, 'VM'), f.count(1, 'match'),
                                 f.count(3, 'match'),
                                 f.osName('rockylinux', '9'), f.osName('ubuntu', '24.04')]; }"""
    )
    assert forms == ["1 VM", "2 VMs", "1 match", "3 matches", "Rocky Linux 9", "Ubuntu 24.04"]


def test_waiting_for_events_is_a_note_not_an_item(page: Page, seeded: Stack) -> None:
    page.route("**/console/events", lambda route: route.abort())  # a feed that never comes
    page.goto(seeded.url())
    latest = page.get_by_role("region", name="Latest events")
    waiting = latest.get_by_text("Waiting for events…")
    expect(waiting).to_be_visible()
    assert waiting.evaluate("el => el.tagName") == "P"
    expect(latest.locator("li")).to_have_count(0)
