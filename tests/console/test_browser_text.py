"""Small things a user reads or sees, in a real Chromium against a real `cairn up`: versions
listed newest first, and a focus ring on secondary buttons as clear as on the primary ones."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.console.browser import Stack


def test_versions_are_listed_newest_first(page: Page, stack: Stack) -> None:
    page.goto(stack.url("vms/new"))
    version = page.get_by_label("Version")
    assert version.locator("option").all_inner_texts() == ["13", "12", "11"]
    expect(version).to_have_value("12")  # the default stays the current stable release
    page.get_by_label("Operating system").select_option("rockylinux")
    assert version.locator("option").all_inner_texts() == ["10", "9", "8"]
    expect(version).to_have_value("9")
    page.get_by_label("Operating system").select_option("ubuntu")
    assert version.locator("option").all_inner_texts() == ["24.04", "22.04", "20.04"]


def test_a_secondary_button_reached_by_keyboard_shows_a_clear_ring(
    page: Page, stack: Stack
) -> None:
    page.goto(stack.url("events"))
    pause = page.get_by_role("button", name="Pause")
    expect(pause).to_have_class("secondary")
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == "Pause":
            break
    expect(pause).to_be_focused()
    ring = pause.evaluate(
        "el => { const s = getComputedStyle(el); return [s.outlineStyle, s.outlineWidth]; }"
    )
    assert ring == ["solid", "3px"], ring
