"""The templates on the VM list page, in a real Chromium against a real `cairn up` (simulated
cluster, templates on by default): each template with its node, image, state and the VMs that
are linked clones of it, each a link to its VM."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.console.browser import Stack


def test_the_vm_list_shows_each_template_with_its_linked_clones(page: Page, stack: Stack) -> None:
    web = stack.install("tpl-web")  # builds debian 12's template, then clones it
    db = stack.install("tpl-db")
    rows = {t["vmid"]: t for t in stack.json("/console/svc/vm/api/vm/templates")}
    tid = next(t for t, row in rows.items() if row["os"] == "debian" and row["current"])
    assert {web, db} <= set(rows[tid]["clones"])

    page.goto(stack.url("vms"))
    section = page.get_by_role("region", name="Templates")
    row = section.locator(f'tr[data-template="{tid}"]')
    expect(row).to_contain_text(re.compile(rf"^{tid}\s*pve1\s*Debian 12"))
    expect(row).to_contain_text("ready, installs clone it")
    expect(row.get_by_role("cell").nth(3)).to_contain_text(rows[tid]["checksum"][:19])
    for vmid in (web, db):
        expect(row.get_by_role("link", name=str(vmid), exact=True)).to_have_attribute(
            "href", f"#/vm/{vmid}"
        )
    # A clone is one click from its template.
    row.get_by_role("link", name=str(web), exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("tpl-web")
