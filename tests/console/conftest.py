"""Fixtures of the browser tests: one Chromium and one `cairn up` per module, and a fresh
browser context per test that fails on any request beyond loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.console.browser import Stack, Watch, launch, running_stack


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module, not per package: Playwright's synchronous driver runs an event loop of its
    # own for as long as it is open, and with the suite spread over workers (pytest-xdist,
    # whole files each) a worker may get an async test file of this package next.
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("cairn")) as running:
        yield running


@pytest.fixture
def watch() -> Watch:
    return Watch()


@pytest.fixture
def page(browser: Browser, stack: Stack, watch: Watch) -> Iterator[Page]:
    tab = watch.page(browser, 1280, 900)
    yield tab
    tab.context.close()
    watch.assert_clean()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last and together, so that async tests never run while a synchronous
    driver is open."""
    browser_items = [i for i in items if "browser" in getattr(i, "fixturenames", ())]
    others = [i for i in items if i not in browser_items]
    items[:] = others + browser_items
