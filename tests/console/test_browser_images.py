"""The Images page in a real Chromium against a real `cairn up`: an upload from the root into a
folder typed there lands in that folder, and folders are drawn as inline SVG icons (Debian's
Chromium has no colour emoji: an emoji showed as an empty box)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from PIL import Image
from playwright.sync_api import Page, expect

from tests.console.browser import Stack

EMOJI = r"() => /\p{Extended_Pictographic}/u.test(document.querySelector('main').innerText)"


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (40, 110, 170)).save(out, "PNG")
    return out.getvalue()


def test_an_upload_lands_in_its_folder_drawn_with_svg_icons(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    picture = tmp_path / "switch.png"
    picture.write_bytes(png())
    page.goto(stack.url("images"))
    page.get_by_label("Into folder").fill("homelab/rack")
    page.locator('input[type="file"]').set_input_files(str(picture))
    # The page moves to the folder that got the file, and shows it there.
    expect(page).to_have_url(re.compile(r"#/images/homelab/rack$"))
    expect(page.locator('li.tile[data-name="switch.png"] img.thumb')).to_be_visible()
    crumbs = page.get_by_role("navigation", name="Folder").get_by_role("link")
    expect(crumbs).to_have_text(["images", "homelab", "rack"])

    # Up at the root: the folder is a tile with a drawn icon, and no emoji anywhere.
    crumbs.first.click()
    folder = page.locator("li.tile.folder").filter(has_text="homelab")
    icon = folder.locator('svg[data-icon="folder"]')
    expect(icon).to_be_visible()
    box = icon.bounding_box()
    assert box is not None and box["width"] >= 32 and box["height"] >= 32
    assert page.evaluate(EMOJI) is False
    folder.get_by_role("link").click()
    expect(page).to_have_url(re.compile(r"#/images/homelab$"))
    expect(page.locator("li.tile.folder").filter(has_text="rack")).to_be_visible()
