"""axe-core (npm, ops/package.json's devDependencies) in a real Chromium on every page of the
console against a real `cairn up`: no serious or critical accessibility violation, in light
at a laptop's width and in dark at a phone's. axe runs through the DevTools protocol
(page.evaluate), so the console's strict CSP stays as it is."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from playwright.sync_api import Browser, expect

from tests.console.browser import Stack

AXE = Path(__file__).resolve().parents[2] / "ops" / "node_modules" / "axe-core" / "axe.min.js"
PAGES = ["", "vms", "vm/{vm}", "vms/new", "functions", "function/axe/fn", "search",
         "images", "images/axe", "events"]  # fmt: skip
RUN = """async () => {
  const result = await axe.run(document, { resultTypes: ["violations"] });
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => ({ id: v.id, impact: v.impact, help: v.help,
                   nodes: v.nodes.slice(0, 3).map((n) => n.html.slice(0, 160)) }));
}"""


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (40, 110, 170)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def seeded(stack: Stack) -> int:
    fn = {"path": "axe/fn", "language": "python", "code": "return {'ok': True}\n"}
    assert stack.request("POST", "/console/svc/functions/upload", fn)[0] == 200
    stack.upload_image("axe", "tile.png", png())
    return stack.install("axe")


@pytest.mark.parametrize(("width", "scheme"), [(1280, "light"), (390, "dark")])
def test_no_serious_or_critical_violation_on_any_page(  # every page, then one assert
    browser: Browser, stack: Stack, seeded: int, width: int, scheme: str
) -> None:
    assert AXE.is_file(), "ops/setup --dev installs axe-core (ops/package.json)"
    source = AXE.read_text(encoding="utf-8")
    context = browser.new_context(
        viewport={"width": width, "height": 844},
        color_scheme=scheme,  # type: ignore[arg-type]
    )
    page = context.new_page()
    found: dict[str, Any] = {}
    try:
        for where in PAGES:
            page.goto(stack.url(where.format(vm=seeded)))
            expect(page.get_by_role("heading", level=1)).to_be_visible()
            expect(page.locator('[aria-busy="true"]')).to_have_count(0)
            page.evaluate(source)
            violations = page.evaluate(RUN)
            if violations:
                found[where] = violations
    finally:
        context.close()
    assert found == {}, found
