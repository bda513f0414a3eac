"""The Events page in a real Chromium against a real `cairn up`: filtered by text and type,
each event opened onto its data as recorded, followed to what it concerns (a VM, a function,
an image's folder), and laid out so that a phone's width breaks no word into letters."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect

from tests.console.browser import Stack

CODE = 'return {"hello": event.get("name", "world")}\n'


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (40, 110, 170)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def seeded(stack: Stack) -> dict[str, int]:
    fn = {"path": "tools/hello", "language": "python", "code": CODE}
    status, text = stack.request("POST", "/console/svc/functions/upload", fn)
    assert status == 200, text
    stack.upload_image("homelab/rack", "switch.png", png())
    return {"vm": stack.install("evented")}


def test_filter_by_text_and_type_and_open_an_event(
    page: Page, stack: Stack, seeded: dict[str, int]
) -> None:
    page.goto(stack.url("events"))
    entries = page.locator("li.event")
    expect(entries.filter(has_text="tools/hello")).to_have_count(1)
    total = entries.count()
    assert total > 10

    # Text: every word must appear (in the type, stream, summary or data).
    page.get_by_label("Filter by text").fill("tools/hello python")
    expect(entries).to_have_count(1)
    expect(page.get_by_role("status").filter(has_text="events, newest first")).to_have_text(
        re.compile(r"^1 of \d+ events, newest first$")
    )
    page.get_by_label("Filter by text").fill("no-such-word-anywhere")
    expect(entries).to_have_count(0)
    expect(page.get_by_text("No event matches the filter.")).to_be_visible()
    page.get_by_label("Filter by text").fill("")

    # Type: a kind, or one type.
    page.get_by_label("Type").select_option("images")
    expect(entries).to_have_count(1)
    expect(entries.first).to_have_attribute("data-type", "images.stored")
    page.get_by_label("Type").select_option("vm.installed")
    expect(entries).to_have_count(1)
    expect(entries.first).to_contain_text("evented")
    page.get_by_label("Type").select_option("")  # every event again (more may have come)
    expect(page.get_by_role("status").filter(has_text="events, newest first")).to_have_text(
        re.compile(r"^\d+ events, newest first$")
    )
    assert entries.count() >= total

    # Drill-in: the summary opens onto the event as recorded, data and all.
    stored = entries.filter(has_text="tools/hello")
    data = stored.locator("pre.data")
    expect(data).to_be_hidden()
    stored.locator("summary").click()
    expect(data).to_be_visible()
    expect(data).to_contain_text('"type": "functions.version_stored"')
    expect(data).to_contain_text('"path": "tools/hello"')
    expect(data).to_contain_text('"language": "python"')
    stored.locator("summary").press("Enter")  # and closed again from the keyboard
    expect(data).to_be_hidden()


def test_an_event_leads_to_what_it_concerns(
    page: Page, stack: Stack, seeded: dict[str, int]
) -> None:
    page.goto(stack.url("events"))
    entries = page.locator("li.event")
    entries.filter(has_text="tools/hello").get_by_role("link", name="tools/hello").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("tools/hello")

    page.go_back()
    entries.filter(has_text="switch.png").get_by_role("link", name="homelab/rack/").click()
    expect(page).to_have_url(stack.url("images/homelab/rack"))
    expect(page.locator('li.tile[data-name="switch.png"]')).to_be_visible()

    page.go_back()
    vmid = seeded["vm"]
    installed = page.locator('li[data-type="vm.installed"]').filter(has_text="evented")
    installed.get_by_role("link", name=f"VM {vmid}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"VM {vmid}")


# Inline elements drawn on more than one line, or text wider than its box: a word broken into
# pieces, or cut off.
BROKEN = """() => {
  const out = [];
  const inline = 'li.event .what, li.event .subject, li.event time';
  for (const el of document.querySelectorAll(inline)) {
    if (el.getClientRects().length !== 1) out.push(el.textContent);
  }
  for (const el of document.querySelectorAll('li.event summary')) {
    if (el.scrollWidth > el.clientWidth + 1) out.push(el.textContent);
  }
  return out;
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_events_read_whole_at_any_width(
    browser: Browser, stack: Stack, seeded: dict[str, int], width: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 844})
    page = context.new_page()
    try:
        page.goto(stack.url("events"))
        expect(
            page.locator('li[data-type="vmalloc.reserved"], li[data-type^="vmalloc"]').first
        ).to_be_visible()
        assert page.evaluate(BROKEN) == []
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # Each kind in words; the type as recorded on hover.
        kinds = page.locator("li.event .what")
        assert "ID and address reserved" in kinds.all_inner_texts()
        expect(kinds.filter(has_text="ID and address reserved").first).to_have_attribute(
            "title", "vmalloc.reserved"
        )
    finally:
        context.close()
