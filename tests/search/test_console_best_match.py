"""The console's search page asks for the best match: one fused list, the query's words
highlighted in each snippet (real `cairn up`, real Chromium)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.console.browser import Stack, launch, start_stack, stop_stack, wait_until

# The console tests' pages (a fresh context per test, failing on any request beyond loopback);
# `browser` and `stack` below are this module's own: Chromium closes with the module, before
# the package's async tests run, and the stack has its own files.
from tests.console.conftest import page, watch  # noqa: F401

FILES = {
    "backup.md": "# Backups\n\nThe nightly backups copy every volume to the second site.\n",
    "billing.txt": "Invoices must be paid within thirty days of receipt.\n",
    "tokyo.txt": "東京タワーに行きました。東京の夜景はきれいでした。\n",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        yield launch(playwright)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = start_stack(tmp_path_factory.mktemp("cairn"), {"notes": FILES})
    try:
        yield running
    finally:
        stop_stack(running)


def test_best_match_is_one_list_with_the_words_highlighted(page: Page, stack: Stack) -> None:  # noqa: F811
    def embedded() -> bool:
        status = stack.json("/console/svc/search/api/status?db=notes")
        return bool(status["chunks"] == 3 and status["state"] == "idle")

    wait_until(embedded, timeout=60, what="the notes database to be embedded")
    page.goto(stack.url("search"))
    page.get_by_role("combobox", name=re.compile("^Database")).select_option("notes")

    # Found by meaning, no word of the query in it: the fused list still has it first.
    page.get_by_label("Query").fill("when do I have to pay a bill")
    page.get_by_label("best match").check()
    page.get_by_role("button", name="Search").click()
    best = page.locator('[data-branch="hybrid"]')
    expect(best.get_by_role("heading")).to_have_text("Best match")
    expect(best.locator("article.hit").first).to_have_attribute("data-source", "billing.txt")
    expect(page.locator('[data-branch="keyword"], [data-branch="semantic"]')).to_have_count(0)

    # Words by their stem, highlighted where they are; CJK by its characters.
    page.get_by_label("Query").fill("backup volumes")
    page.get_by_role("button", name="Search").click()
    hit = best.locator('article.hit[data-source="backup.md"]')
    expect(hit.locator("mark")).to_have_text(["Backups", "backups", "volume"])
    expect(hit).to_contain_text("The nightly backups copy every volume to the second site.")
    page.get_by_label("Query").fill("東京")
    page.get_by_role("button", name="Search").click()
    expect(best.locator('article.hit[data-source="tokyo.txt"] mark')).to_have_text(["東京", "東京"])
