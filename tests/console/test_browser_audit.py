"""The audit trail of functions and images in a real Chromium against a real `cairn up`: a
function stored, stored again and deleted, and an image uploaded and deleted through the
console's own forms by a signed-in admin; the Events page, `cairn events tail` and the journal
each name the token that did it."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Page, expect

from tests.console.browser import CAIRN, Stack, paste_code, store_function, tail_until
from tests.console.test_browser_login import sign_in

CODE = "def handler(event):\n    return 1\n"


@pytest.fixture(scope="module")
def ada(stack: Stack) -> str:
    argv = [CAIRN, "token", "create", "ada", "--role", "admin"]
    made = subprocess.run(
        argv, env=stack.env, cwd=stack.root, capture_output=True, text=True, check=True
    )
    return made.stdout.strip()


def test_the_events_page_the_tail_and_the_journal_name_who_changed_functions_and_images(
    page: Page, stack: Stack, ada: str, tmp_path: Path
) -> None:
    sign_in(page, stack, ada)
    store_function(page, stack, "audit/greet", CODE)
    paste_code(page.get_by_label(re.compile("Code of version")), CODE.replace("1", "2"))
    page.get_by_role("button", name="Store as a new version").click()
    expect(page.get_by_role("status").filter(has_text="Stored as the version of")).to_be_visible()
    page.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.get_by_text("audit/greet deleted, with every version")).to_be_visible()

    picture = tmp_path / "sunset.png"
    out = io.BytesIO()
    Image.new("RGB", (64, 36), (200, 80, 40)).save(out, "PNG")
    picture.write_bytes(out.getvalue())
    page.goto(stack.url("images"))
    page.get_by_label("Into folder").fill("audit")
    with page.expect_file_chooser() as chooser:
        page.get_by_text("Drop files here, or choose them").click()
    chooser.value.set_files(str(picture))
    tile = page.locator('li.tile[data-name="sunset.png"]')
    expect(tile.locator("img.thumb")).to_be_visible()
    tile.get_by_role("button", name="Delete sunset.png").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(tile).to_have_count(0)

    page.goto(stack.url("events"))
    what = page.locator("li.event summary")
    stored = page.locator('li[data-type="functions.version_stored"] summary')
    expect(
        stored.filter(has_text=re.compile(r"^audit/greet version of \d.+ \(python\) by ada$"))
    ).to_have_count(2)
    expect(what.filter(has_text="audit/greet deleted (2 versions) by ada")).to_have_count(1)
    expect(
        what.filter(has_text=re.compile(r"^audit/sunset\.png \(image/png, .*\) by ada$"))
    ).to_have_count(1)
    expect(what.filter(has_text="audit/sunset.png deleted by ada")).to_have_count(1)

    lines = tail_until(stack, "functions", ["functions.deleted"])
    lines += tail_until(stack, "images", ["images.deleted"])
    mine = [line.rstrip() for line in lines if "path=audit/" in line]
    assert [line.split()[3] for line in mine] == [
        "functions.version_stored",
        "functions.version_stored",
        "functions.deleted",
        "images.stored",
        "images.deleted",
    ], lines
    assert all(line.endswith(" by=ada") for line in mine), mine

    journal = [line for line in stack.output().splitlines() if "cairn.journal" in line]
    stored_line = re.compile(r"function audit/greet: version \d+ stored .*, asked by ada$")
    assert len([line for line in journal if stored_line.search(line)]) == 2, journal
    assert any(
        line.endswith("function audit/greet: deleted (2 versions), asked by ada")
        for line in journal
    )
    assert any(line.endswith("images: deleted audit/sunset.png, asked by ada") for line in journal)
    assert ada not in stack.output()
