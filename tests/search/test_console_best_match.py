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


def open_notes(tab: Page, stack: Stack) -> None:
    """The search page on the notes database, once all of it is embedded."""

    def embedded() -> bool:
        status = stack.json("/console/svc/search/api/status?db=notes")
        return bool(status["chunks"] == 3 and status["state"] == "idle")

    wait_until(embedded, timeout=60, what="the notes database to be embedded")
    tab.goto(stack.url("search"))
    tab.get_by_role("combobox", name=re.compile("^Database")).select_option("notes")


def test_best_match_is_one_list_with_the_words_highlighted(page: Page, stack: Stack) -> None:  # noqa: F811
    open_notes(page, stack)

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


def test_each_result_has_its_score_and_a_search_that_finds_nothing_says_why(
    page: Page,  # noqa: F811
    stack: Stack,
) -> None:
    open_notes(page, stack)
    best = page.locator('[data-branch="hybrid"]')

    # Found by meaning: its score is shown, and nothing is said about the cut-off.
    page.get_by_label("Query").fill("when do I have to pay a bill")
    page.get_by_role("button", name="Search").click()
    expect(best.locator("article.hit").first).to_have_attribute("data-source", "billing.txt")
    expect(best.locator(".score").first).to_have_text(re.compile(r"^score (0\.\d\d|1\.00)$"))
    expect(page.locator("[data-cutoff]")).to_have_count(0)

    # By meaning alone, nothing near: it says so, with how near the nearest came, and offers
    # the words instead.
    page.get_by_label("Query").fill("zebra giraffe savanna backups")
    page.get_by_label("meaning").check()
    page.get_by_role("button", name="Search").click()
    meaning = page.locator('[data-branch="semantic"]')
    expect(meaning.locator("[data-cutoff]")).to_have_text(
        re.compile(
            r"^Nothing by meaning passed the 0\.3 similarity cut-off \(the nearest passage "
            r"scored 0\.[0-2]\d\)\.$"
        )
    )
    expect(meaning).to_contain_text("No match.")
    page.get_by_role("button", name="Show keyword matches").click()
    offered = page.locator('[data-branch="offered"]')
    expect(offered.get_by_role("heading")).to_have_text("Keyword matches")
    expect(offered.locator("article.hit")).to_have_attribute("data-source", "backup.md")
    expect(offered.locator("article.hit mark")).to_have_text(["Backups", "backups"])
    expect(offered.locator(".score")).to_have_count(1)

    # Best match with the same query: the keyword matches are the list, and it says so.
    page.get_by_label("best match").check()
    page.get_by_role("button", name="Search").click()
    expect(best.locator("[data-cutoff]")).to_contain_text("These are keyword matches.")
    expect(best.locator("article.hit")).to_have_attribute("data-source", "backup.md")
