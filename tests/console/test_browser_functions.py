"""Functions in a real Chromium against a real `cairn up`: versions read as dates (the raw
number on hover), and storing over an existing path asks first, more strongly when the
language changes."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Page, expect

from tests.console.browser import Stack, code_of, paste_code, wait_until

CODE = 'return {"hello": event.get("name", "world")}\n'
JS = 'return { hello: event.name ?? "world" };\n'


def versions(stack: Stack, path: str) -> list[Any]:
    listed = stack.json("/console/svc/functions/functions")["functions"]
    return list(next(f for f in listed if f["path"] == path)["versions"])


def store(stack: Stack, path: str) -> int:
    status, text = stack.request(
        "POST", "/console/svc/functions/upload", {"path": path, "language": "python", "code": CODE}
    )
    assert status == 200, text
    return int(versions(stack, path)[-1])


def test_versions_read_as_dates_with_the_number_on_hover(page: Page, stack: Stack) -> None:
    version = store(stack, "dated/fn")
    page.goto(stack.url("function/dated/fn"))
    label = page.locator(".code-label", has_text="Code of version")
    expect(label).to_contain_text(re.compile(r"\d{4}|\d{1,2}/\d{1,2}/"))  # a date
    assert str(version) not in label.inner_text()
    name = label.locator("span.version")
    expect(name).to_have_attribute("title", f"version {version}")
    option = page.get_by_label("Version").locator("option").first
    expect(option).to_have_attribute("title", f"version {version}")
    assert str(version) not in option.inner_text()


def test_storing_over_a_path_asks_first_and_more_when_the_language_changes(
    page: Page, stack: Stack
) -> None:
    store(stack, "over/fn")
    before = len(versions(stack, "over/fn"))
    page.goto(stack.url("functions"))
    page.get_by_label("Path").fill("over/fn")
    page.get_by_role("button", name="Store").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Replace over/fn?")
    expect(dialog).to_contain_text("over/fn exists (1 version, python)")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert len(versions(stack, "over/fn")) == before  # nothing stored

    # Another language: said plainly, with a danger button naming the new language.
    page.get_by_label("Language").select_option("javascript")
    paste_code(page.get_by_label("Code", exact=True), JS)
    page.get_by_role("button", name="Store").click()
    expect(dialog).to_contain_text("Change over/fn from python to javascript?")
    expect(dialog).to_contain_text("The language changes from python to javascript")
    strong = dialog.get_by_role("button", name="Store as javascript")
    expect(strong).to_have_class("danger")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert len(versions(stack, "over/fn")) == before

    # Confirmed: stored, and the page moves to it.
    page.get_by_label("Language").select_option("python")
    paste_code(page.get_by_label("Code", exact=True), CODE)
    page.get_by_role("button", name="Store").click()
    dialog.get_by_role("button", name="Store a new version").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("over/fn")
    assert len(versions(stack, "over/fn")) == before + 1

    # On the function's own page a new version is what the form is for; a new language asks.
    page.get_by_label("Language").select_option("javascript")
    paste_code(page.get_by_label(re.compile("Code of version")), JS)
    page.get_by_role("button", name="Store as a new version").click()
    expect(dialog).to_contain_text("Change over/fn from python to javascript?")
    dialog.get_by_role("button", name="Store as javascript").click()
    expect(page.get_by_role("status").filter(has_text="Stored as the version of")).to_be_visible()
    listed = stack.json("/console/svc/functions/functions")["functions"]
    assert next(f for f in listed if f["path"] == "over/fn")["language"] == "javascript"


def test_the_code_editor_highlights_and_indents_with_tab(page: Page, stack: Stack) -> None:
    store(stack, "edit/tab")
    page.goto(stack.url("function/edit/tab"))
    editor = page.get_by_label(re.compile("Code of version"))
    expect(editor).to_have_attribute("contenteditable", "true")
    wait_until(lambda: code_of(editor) == CODE.rstrip("\n") + "\n", what="the code in the editor")
    # Highlighted: the Python keyword and the string are tokens of their own.
    expect(editor.locator("span", has_text="return").first).to_be_visible()
    assert editor.locator("span", has_text='"hello"').count() >= 1
    # Tab indents the line the cursor is on, and the focus stays in the editor.
    editor.click()
    page.keyboard.press("Control+Home")
    page.keyboard.press("Tab")
    expect(editor).to_be_focused()
    wait_until(lambda: code_of(editor).startswith("    return"), what="the line indented")
    page.keyboard.press("Shift+Tab")
    wait_until(lambda: code_of(editor).startswith("return"), what="the line dedented")
    # Escape, then Tab: out of the editor, to the next control (the keyboard is not trapped).
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    expect(editor).not_to_be_focused()
    # An edit is stored as the new version's code.
    paste_code(editor, "def twice(x):\n    return 2 * x\nreturn twice(21)\n")
    page.get_by_role("button", name="Store as a new version").click()
    expect(page.get_by_role("status").filter(has_text="Stored as the version of")).to_be_visible()
    status, text = stack.request("GET", "/console/svc/functions/code/edit/tab")
    assert (status, text) == (200, "def twice(x):\n    return 2 * x\nreturn twice(21)\n")


def responsive(page: Page) -> None:
    """The tab answers a script within a second (a tab stuck in a loop never does)."""
    page.wait_for_function("() => true", timeout=1_000)


def test_fast_typing_select_all_and_paste_keep_the_tab_responsive(page: Page, stack: Stack) -> None:
    """Typing without delay, replacing everything and pasting then pressing Enter: each edit
    reaches the page once and never comes back into the editor, so nothing spins and the code
    stored is what was typed."""
    store(stack, "edit/fast")
    page.goto(stack.url("function/edit/fast"))
    editor = page.get_by_label(re.compile("Code of version"))
    wait_until(lambda: code_of(editor) == CODE.rstrip("\n") + "\n", what="the code in the editor")
    editor.click()
    page.keyboard.press("Control+End")
    # Lines with no brackets and no colon: nothing the editor indents or completes by itself.
    line = "total = total + 1  # counted again and again\n"
    typed = (line * (2_000 // len(line) + 1))[:2_000]
    page.keyboard.type(typed)
    responsive(page)
    wait_until(lambda: code_of(editor) == CODE + typed, what="every typed character, once")

    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.type("total = 0\n")
    responsive(page)
    wait_until(lambda: code_of(editor) == "total = 0\n", what="the text typed after deleting")

    pasted = "total = total + 41\n" * 20
    paste_code(editor, pasted)
    page.keyboard.press("Enter")
    page.keyboard.type("return total")
    responsive(page)
    expected = pasted + "\nreturn total"
    wait_until(lambda: code_of(editor) == expected, what="the pasted text, Enter and the last line")

    page.get_by_role("button", name="Store as a new version").click()
    expect(page.get_by_role("status").filter(has_text="Stored as the version of")).to_be_visible()
    responsive(page)
    assert stack.request("GET", "/console/svc/functions/code/edit/fast") == (200, expected)
