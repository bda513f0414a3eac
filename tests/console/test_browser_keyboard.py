"""A keyboard-only walk, in a real Chromium against a real `cairn up`: install a VM from the
form, open its page, stop it and destroy it, with Tab, Shift+Tab, typing, Enter and Escape
only (no click anywhere)."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.console.browser import Stack

ACTIVE = """() => {
  const el = document.activeElement;
  if (!el) return "";
  const label = el.labels && el.labels.length ? el.labels[0].textContent : "";
  return (el.getAttribute("aria-label") || label || el.textContent || "").trim();
}"""


def tab_to(page: Page, name: str | re.Pattern[str], *, limit: int = 60) -> None:
    """Press Tab until the focused control is named `name` (its label, aria-label or text)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        now = page.evaluate(ACTIVE)
        if name.search(now) if isinstance(name, re.Pattern) else now.startswith(name):
            return
    raise AssertionError(f"Tab never reached {name!r}")


def test_install_open_stop_and_destroy_from_the_keyboard(page: Page, stack: Stack) -> None:
    page.goto(stack.url("vms/new"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Install a VM")
    tab_to(page, "Name")
    page.keyboard.type("keys")
    tab_to(page, "Password")
    page.keyboard.type("a-password-typed-in")
    page.keyboard.press("Enter")  # submits the form
    final = page.locator('li[data-step="VM initialization > finalizing"]')
    expect(final).to_have_attribute("data-status", "success", timeout=60_000)
    expect(page.get_by_role("heading", name="Progress")).to_be_focused()
    tab_to(page, re.compile(r"^Open VM \d+$"))
    vmid = int(page.evaluate(ACTIVE).split()[-1])
    page.keyboard.press("Enter")
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_contain_text(f"VM {vmid}")
    expect(heading).to_be_focused()
    state = page.locator("dl.details .badge")
    expect(state).to_have_text("running")

    tab_to(page, "Stop")
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Stop VM {vmid} (keys)?")
    tab_to(page, "Stop")  # from Cancel to the dialog's own Stop
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(state).to_have_text("stopped")

    tab_to(page, "Destroy")
    page.keyboard.press("Enter")
    expect(dialog).to_contain_text("cannot be undone")
    page.keyboard.press("Escape")  # changed one's mind: nothing happens
    expect(dialog).to_be_hidden()
    tab_to(page, "Destroy")
    page.keyboard.press("Enter")
    tab_to(page, "Destroy")
    page.keyboard.press("Enter")
    expect(page.get_by_text(f"VM {vmid} destroyed.")).to_be_visible()
    listed = [v["vmid"] for v in stack.json("/console/svc/vm/api/vm/list")["list"]]
    assert vmid not in listed
