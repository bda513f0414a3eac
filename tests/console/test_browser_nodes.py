"""The overview's node cards in a real Chromium against a real `cairn up` (simulated cluster):
each node's CPU load, memory, root storage and uptime, as the cluster reports them."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from tests.console.browser import Stack


@pytest.mark.parametrize("width", [1280, 390])
def test_node_cards_show_load_memory_storage_and_uptime(
    browser: Browser, stack: Stack, width: int
) -> None:
    nodes = {n["node"]: n for n in stack.json("/console/svc/vm/api/vm/list")["cluster"]}
    pve1 = nodes["pve1"]
    assert pve1["load"] is not None and pve1["rootfs_total"] and pve1["uptime"] is not None
    context = browser.new_context(viewport={"width": width, "height": 844})
    page = context.new_page()
    try:
        page.goto(stack.url())
        card = page.locator('article.node[data-node="pve1"]')
        load = round(pve1["load"] * 100)
        expect(
            card.get_by_role("progressbar", name=f"CPU load: {load}% of {pve1['max_cpu']} CPUs")
        ).to_have_attribute("value", str(load))
        expect(
            card.get_by_role("progressbar", name=re.compile(r"^Memory in use: .+ of 64 GiB$"))
        ).to_be_visible()
        storage = card.get_by_role("progressbar", name=re.compile(r"^Storage \(root\): .+ of .+B$"))
        expect(storage).to_have_attribute("value", str(pve1["rootfs_used"]))
        expect(storage).to_have_attribute("max", str(pve1["rootfs_total"]))
        expect(card).to_contain_text(re.compile(r"Up: (\d+ d \d+ h|\d+ h \d+ min|\d+ min)"))
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    finally:
        context.close()
