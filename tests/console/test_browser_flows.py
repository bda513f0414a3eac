"""The console in a real Chromium against a real `cairn up` on the simulated cluster: what a
user does, and what they see."""

from __future__ import annotations

import io
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Page, expect
from pvesim.cluster import SimCluster

from tests.console.browser import Stack, code_of, paste_code, store_function, wait_until

# Records every state the stage list went through, so a test can tell a stream that arrived
# live from one that arrived at the end. Installed before the page's own scripts run.
RECORD_STAGES = """
window.__stages = [];
new MutationObserver(() => {
  const rows = [...document.querySelectorAll('ol.stages li')];
  if (rows.length) window.__stages.push(rows.map((r) => r.dataset.status).join(','));
}).observe(document, { subtree: true, childList: true, attributes: true });
"""


def install_from_the_form(page: Page, stack: Stack, name: str) -> tuple[int, str]:
    """Fill the form, install, watch the stages; the VM's id and the password shown once."""
    page.add_init_script(RECORD_STAGES)
    page.goto(stack.url("vms/new"))
    page.get_by_label("Operating system").select_option("debian")
    page.get_by_label("Version").select_option("12")
    page.get_by_label("Name").fill(name)
    page.get_by_label("User").fill("deploy")
    page.get_by_role("button", name="Install").click()
    final = page.locator('li[data-step="VM initialization > finalizing"]')
    expect(final).to_have_attribute("data-status", "success", timeout=60_000)
    ready = page.get_by_text(re.compile(r"VM \d+ is ready at"))
    expect(ready).to_be_visible()
    vmid = int(re.search(r"VM (\d+)", ready.inner_text()).group(1))  # type: ignore[union-attr]
    secret = page.locator("#secret-text").input_value()
    return vmid, secret


def test_install_a_vm_and_watch_its_stages_arrive(page: Page, stack: Stack) -> None:
    vmid, secret = install_from_the_form(page, stack, "web")
    # Every stage of an install is listed, each in its state; no stage failed.
    statuses = page.locator("ol.stages li").evaluate_all("rows => rows.map(r => r.dataset.status)")
    assert len(statuses) == 18
    assert set(statuses) <= {"success", "skipped"}
    assert statuses.count("skipped") == 1  # migrating: only when a node is asked for
    # The stages arrived one after another while the install ran, not all at its end.
    seen: list[str] = page.evaluate("window.__stages")
    partial = [s for s in seen if "success" in s and ("pending" in s or "processing" in s)]
    assert len(partial) >= 3, seen

    # The generated password: in its own box, hidden until asked for, never in the log.
    assert len(secret) >= 16
    box = page.get_by_role("dialog")
    expect(box).to_contain_text("only now")
    expect(page.locator("#secret-text")).to_have_attribute("type", "password")
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#secret-text")).to_have_attribute("type", "text")
    assert secret not in (page.locator("section.task").text_content() or "")
    log = page.locator("section.task div.log")  # in the closed Log details
    assert "shown in its own box" in (log.text_content() or "")
    page.get_by_role("button", name="I have saved it").click()
    expect(box).to_have_count(0)
    # Forgotten: not in the page, not in any storage.
    assert secret not in page.content()
    assert page.evaluate("localStorage.length + sessionStorage.length") == 0

    # The VM is in the list, running, with the name given.
    page.get_by_role("link", name=f"Open VM {vmid}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"VM {vmid}")
    expect(page.locator("dl.details")).to_contain_text("deploy")
    page.goto(stack.url("vms"))
    row = page.locator(f'tr[data-vmid="{vmid}"]')
    expect(row).to_contain_text("web")
    expect(row.locator(".badge")).to_have_text("running")


def test_stop_resize_migrate_start_and_destroy_a_vm_after_confirming(
    page: Page, stack: Stack
) -> None:
    status, _ = stack.request(
        "POST",
        "/console/svc/vm/api/vm/install",
        {"os": "ubuntu", "version": "24.04", "name": "doomed"},
    )
    assert status == 200
    vm = next(v for v in stack.json("/console/svc/vm/api/vm/list")["list"] if v["name"] == "doomed")
    page.goto(stack.url(f"vm/{vm['vmid']}"))
    state = page.locator("dl.details .badge")
    expect(state).to_have_text("running")

    # Stop asks first; Cancel (or Escape) leaves the VM alone.
    page.get_by_role("button", name="Stop", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Stop VM {vm['vmid']} (doomed)?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    page.get_by_role("button", name="Stop", exact=True).focus()
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert stack.request("GET", f"/console/svc/vm/api/vm/{vm['vmid']}/status") == (200, "running")

    page.get_by_role("button", name="Stop", exact=True).click()
    dialog.get_by_role("button", name="Stop").click()
    expect(state).to_have_text("stopped")

    # Stopped, it can be resized and migrated, each after confirming.
    details = page.locator("dl.details")
    page.get_by_label("vCPUs (cores)").fill("4")
    page.get_by_label("vCPUs (cores)").press("Enter")
    expect(dialog).to_contain_text("vCPUs: 2 → 4")
    dialog.get_by_role("button", name="Confirm").click()
    expect(details.locator("div", has_text="vCPUs")).to_contain_text("4")
    page.get_by_label("To node").select_option("pve2")
    page.get_by_role("button", name="Migrate").click()
    expect(dialog).to_contain_text(f"Migrate VM {vm['vmid']} to pve2?")
    dialog.get_by_role("button", name="Confirm").click()
    expect(page.locator('li[data-step="migrate > migrating VM"]')).to_have_attribute(
        "data-status", "success"
    )
    expect(details.locator("div", has_text="Node")).to_contain_text("pve2")
    # Start streams its task here, stage by stage, until SSH answers.
    page.get_by_role("button", name="Start").click()
    expect(page.locator('li[data-step="start > waiting for ready"]')).to_have_attribute(
        "data-status", "success"
    )
    expect(state).to_have_text("running")
    page.get_by_role("button", name="Stop", exact=True).click()
    dialog.get_by_role("button", name="Stop").click()
    expect(state).to_have_text("stopped")

    page.get_by_role("button", name="Destroy").click()
    expect(dialog).to_contain_text("cannot be undone")
    dialog.get_by_role("button", name="Destroy").click()
    expect(page.get_by_text(f"VM {vm['vmid']} destroyed.")).to_be_visible()
    listed = [v["vmid"] for v in stack.json("/console/svc/vm/api/vm/list")["list"]]
    assert vm["vmid"] not in listed
    page.goto(stack.url("vms"))
    expect(page.locator("table.vms, p.muted").first).to_be_visible()
    expect(page.locator(f'tr[data-vmid="{vm["vmid"]}"]')).to_have_count(0)


def test_a_task_already_running_when_the_page_opens_is_followed_live(
    page: Page, stack: Stack
) -> None:
    """An install started elsewhere (a plain client, as curl would) whose guest never answers
    SSH: the VM's page, opened while it waits, shows the stages that passed, the wait as it
    runs, then the failure with the service's own message, as the client got it."""
    vmid = 190
    SimCluster(stack.root / "data" / "pvesim").inject_failure("guest boot", vmid=vmid)
    reply: dict[str, tuple[int, str]] = {}
    body = {"os": "debian", "version": "12", "name": "late", "id": vmid}
    client = threading.Thread(
        target=lambda: reply.update(
            install=stack.request("POST", "/console/svc/vm/api/vm/install", body)
        )
    )
    client.start()
    try:

        def running_task() -> bool:
            status, text = stack.request("GET", f"/console/svc/vm/api/vm/{vmid}")
            return status == 200 and bool(json.loads(text)["task"])

        wait_until(running_task, what="the VM to show its running install")
        page.add_init_script(RECORD_STAGES)
        page.goto(stack.url(f"vm/{vmid}"))
        waiting = page.locator('li[data-step="VM initialization > waiting for ready"]')
        expect(waiting).to_have_attribute("data-status", "processing")
        expect(page.locator('li[data-step="VM creation > creating VM"]')).to_have_attribute(
            "data-status", "success"
        )
        expect(waiting).to_have_attribute("data-status", "error", timeout=60_000)
    finally:
        client.join(90)
    status, text = reply["install"]
    assert status == 200
    records = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    *_, last, closing = records
    assert closing == {}  # `event: close`: the stream ended
    assert last["status"] == "error" and last["step"] == "VM initialization > waiting for ready"
    progress = page.get_by_role("region", name="Progress")
    # The failure in its words: without the stream's "[-]" mark and its elapsed time.
    words = re.sub(r"^\[-\] | \(\d+\.\d+s\)$", "", last["message"])
    expect(progress.get_by_role("alert")).to_contain_text(words)
    # And the VM it was building is gone, as the page says.
    expect(page.get_by_text(f"VM {vmid} not found")).to_be_visible()
    # The wait was seen while it ran, not only at the end.
    seen: list[str] = page.evaluate("window.__stages")
    assert any("processing" in s and "error" not in s for s in seen), seen
    # Failed installs leave nothing: the VM is gone from the list.
    listed = [v["vmid"] for v in stack.json("/console/svc/vm/api/vm/list")["list"]]
    assert vmid not in listed


RECORD_OUTPUT = """
window.__output = [];
new MutationObserver(() => {
  const out = document.querySelector('pre.output');
  const outcome = document.querySelector('.outcome');
  if (out) window.__output.push([out.textContent, outcome ? outcome.textContent : '']);
}).observe(document, { subtree: true, childList: true, characterData: true });
"""

FUNCTION = """import time
print("hello from", event["name"], flush=True)
time.sleep(0.5)
print("still here", flush=True)
return {"greeted": event["name"]}
"""


def test_store_a_function_and_run_it_while_its_output_streams(page: Page, stack: Stack) -> None:
    page.add_init_script(RECORD_OUTPUT)
    store_function(page, stack, "demo/greet", FUNCTION)
    editor = page.get_by_label(re.compile("Code of version"))
    wait_until(lambda: code_of(editor) == FUNCTION, what="the stored code in the editor")

    page.get_by_label(re.compile("^Input")).fill('{"name": "Ada"}')
    page.get_by_role("button", name="Run the latest version").click()
    outcome = page.locator(".outcome")
    expect(outcome).to_contain_text('Result (json): {"greeted":"Ada"}')
    expect(page.locator("pre.output")).to_have_text("hello from Ada\nstill here")
    # The first line was on screen while the function still ran (before its result came).
    seen = page.evaluate("window.__output")
    assert ["hello from Ada", ""] in seen, seen

    # A bad input: the service's own message, where the run was asked for.
    page.get_by_label(re.compile("^Input")).fill("{name: Ada}")
    page.get_by_role("button", name="Run the latest version").click()
    expect(page.locator("#run-h ~ div p.error")).to_have_text("Refused Input is not valid JSON.")

    # Edited and stored again: a second version, listed.
    editor = page.get_by_label(re.compile("Code of version"))
    paste_code(editor, FUNCTION.replace("hello from", "hi from"))
    page.get_by_role("button", name="Store as a new version").click()
    expect(page.get_by_role("status").filter(has_text="Stored as the version of")).to_be_visible()
    page.goto(stack.url("functions"))
    expect(page.locator("tr", has_text="demo/greet")).to_contain_text("2 versions")

    # Deleted after confirming: every version goes.
    page.get_by_role("link", name="demo/greet").click()
    page.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete demo/greet?")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.get_by_text("demo/greet deleted, with every version")).to_be_visible()
    paths = [f["path"] for f in stack.json("/console/svc/functions/functions")["functions"]]
    assert "demo/greet" not in paths


def test_search_a_database_best_match_by_keyword_and_by_meaning(page: Page, stack: Stack) -> None:
    # Both documents indexed and embedded (the inbox is read at start-up, in the background).
    def ready() -> bool:
        query = "/console/svc/search/api/search?db=notes&target=semantic&q=hypervisor%20machines"
        return bool(stack.json(query)["semantic"])

    wait_until(ready, timeout=60, what="the notes database to be embedded")
    page.goto(stack.url("search"))
    row = page.locator('tr[data-db="notes"]')
    # The search service's own progress report: both files searchable, every chunk embedded.
    expect(row.locator("td.num")).to_have_text("2")
    expect(row).to_contain_text("2 of 2 chunks embedded")
    expect(row).to_contain_text("idle")
    # Its documents, from the indexer's events: what was indexed, what was not, and why.
    documents = page.locator('details[data-documents="notes"]')
    expect(documents.locator("summary")).to_have_text("notes: 2 documents, 1 dismissed")
    documents.locator("summary").click()
    # "s ago", or "min ago" once this module has run for minutes
    expect(documents.locator("tr", has_text="cluster.txt")).to_contain_text(
        re.compile(r"\d+ (s|min) ago")
    )
    expect(documents.locator("tr", has_text="scan.xyz")).to_contain_text(
        "not indexed: unsupported file type '.xyz'"
    )
    documents.locator("summary").click()  # closed again: the link below must open it
    expect(documents.locator("tr", has_text="cluster.txt")).to_be_hidden()
    page.get_by_role("combobox", name=re.compile("^Database")).select_option("notes")

    # By default the best match: one fused list, the query's words marked in each snippet.
    expect(page.get_by_label("best match")).to_be_checked()
    page.get_by_label("Query").fill("jumping foxes")
    page.get_by_role("button", name="Search").click()
    best = page.locator('[data-branch="hybrid"]')
    expect(best.locator("h3")).to_have_text("Best match")
    expect(best.locator("article.hit").first.locator("header")).to_have_text("fox.txt")
    expect(best.locator("article.hit").first.locator("mark")).to_have_text(["fox", "jumps"])
    expect(page.locator("[data-branch]")).to_have_count(1)
    # Its source links to that file's row in the database's documents: opened, shown, focused.
    best.get_by_role("link", name="fox.txt").click()
    row = documents.locator('tr[data-source="fox.txt"]')
    expect(row).to_be_in_viewport()
    expect(row).to_be_focused()
    expect(row).to_have_attribute("aria-current", "true")
    expect(row).to_contain_text(re.compile(r"\d+ (s|min) ago"))
    expect(page).to_have_url(re.compile(r"#/search$"))  # still the search page, results kept
    expect(best).to_contain_text("fox.txt")

    page.get_by_label("Query").fill("fox")
    page.get_by_label("keyword").check()
    page.get_by_role("button", name="Search").click()
    keyword = page.locator('[data-branch="keyword"]')
    expect(keyword).to_contain_text("fox.txt")
    expect(keyword).to_contain_text("The quick brown fox")
    expect(page.locator('[data-branch="semantic"]')).to_have_count(0)

    # By meaning: no word of the query is in the document it finds.
    page.get_by_label("Query").fill("hypervisor machines")
    page.get_by_label("meaning").check()
    page.get_by_role("button", name="Search").click()
    semantic = page.locator('[data-branch="semantic"]')
    expect(semantic.locator("article.hit").first).to_contain_text("cluster.txt")
    expect(page.locator('[data-branch="keyword"]')).to_have_count(0)

    # Both at once, side by side; and a database that is not there, with the service's words.
    page.get_by_label("both").check()
    page.get_by_role("button", name="Search").click()
    expect(page.locator('[data-branch="keyword"]')).to_contain_text("No match.")
    expect(page.locator('[data-branch="semantic"]')).to_contain_text("cluster.txt")


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 80, 40)).save(out, "PNG")
    return out.getvalue()


def test_upload_an_image_see_its_thumbnail_delete_it_and_drop_another(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    picture = tmp_path / "sunset.png"
    picture.write_bytes(png(640, 360))
    page.goto(stack.url("images"))
    page.get_by_label("Into folder").fill("holiday/2026")
    with page.expect_file_chooser() as chooser:
        page.get_by_text("Drop files here, or choose them").click()
    chooser.value.set_files(str(picture))
    expect(page).to_have_url(re.compile(r"#/images/holiday/2026$"))
    tile = page.locator('li.tile[data-name="sunset.png"]')
    thumb = tile.locator("img.thumb")
    expect(thumb).to_be_visible()
    # The thumbnail is a resized copy, rendered by the image service and actually decoded.
    expect(thumb).to_have_attribute(
        "src", re.compile(r"/console/svc/images/c/img/holiday/2026/sunset\.png\?s=320$")
    )
    wait_until(
        lambda: thumb.evaluate("img => img.complete && img.naturalWidth") == 320,
        what="the thumbnail to load",
    )
    expect(tile).to_contain_text("KiB")
    crumbs = page.get_by_role("navigation", name="Folder").get_by_role("link")
    expect(crumbs).to_have_text(["images", "holiday", "2026"])

    tile.get_by_role("button", name="Delete sunset.png").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete holiday/2026/sunset.png?")
    dialog.get_by_role("button", name="Delete").click()
    expect(tile).to_have_count(0)
    expect(page.get_by_text("This folder is empty.")).to_be_visible()
    assert stack.json("/console/svc/images/ls/holiday/2026")["entries"] == []

    # Dropped onto the page instead: the same upload, into the folder shown.
    dropped = page.evaluate_handle(
        """bytes => {
            const files = new DataTransfer();
            files.items.add(new File([new Uint8Array(bytes)], "dropped.png", {type: "image/png"}));
            return files;
        }""",
        list(png(200, 100)),
    )
    page.dispatch_event("label.drop", "drop", {"dataTransfer": dropped})
    expect(page.locator('li.tile[data-name="dropped.png"] img.thumb')).to_be_visible()
    listed = stack.json("/console/svc/images/ls/holiday/2026")["entries"]
    assert [(e["name"], e["type"]) for e in listed] == [("dropped.png", "image/png")]


def test_an_upload_the_service_refuses_shows_its_message(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    text = tmp_path / "notes.png"
    text.write_bytes(b"this is not an image at all, whatever its name says")
    page.goto(stack.url("images"))
    page.locator('input[type="file"]').set_input_files(str(text))
    expect(page.locator("ul.uploads")).to_contain_text("notes.png: Refused Unsupported file type.")


class _Attacker(BaseHTTPRequestHandler):
    """Pages of another site that try to use the console, and the services, through the
    visitor's browser."""

    pages: dict[str, str] = {}

    def do_GET(self) -> None:
        body = self.pages.get(self.path, "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def attacker() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # `localhost` is another site than the console's 127.0.0.1, as evil.example would be.
    yield f"http://localhost:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def form_page(action: str, payload: dict[str, str]) -> str:
    # The classic text/plain trick: the body reads as the JSON the API expects.
    raw = json.dumps(payload)
    name, value = raw[:-2], raw[-2:]
    return (
        f'<form method="post" action="{action}" enctype="text/plain">'
        f"<input type=\"hidden\" name='{name}' value='{value}'>"
        '<button id="go">Win a prize</button></form>'
    )


def test_a_cross_site_post_is_refused(page: Page, stack: Stack, attacker: str) -> None:
    functions_port = stack.env["FUNCTIONS_PORT"]
    payload = {"path": "evil", "language": "python", "code": "return 1"}
    _Attacker.pages = {
        "/console": form_page(f"{stack.base}/console/svc/functions/upload", payload),
        "/direct": form_page(f"http://127.0.0.1:{functions_port}/upload", payload),
    }
    for path in ("/console", "/direct"):
        page.goto(attacker + path)
        page.locator("#go").click()
        expect(page.locator("body")).to_contain_text("cross-site request refused")
    # The same site's other port is refused too (Sec-Fetch-Site: same-site).
    _Attacker.pages["/near"] = form_page(f"{stack.base}/console/svc/functions/upload", payload)
    page.goto(attacker.replace("localhost", "127.0.0.1") + "/near")
    page.locator("#go").click()
    expect(page.locator("body")).to_contain_text("Sec-Fetch-Site: same-site")
    stored = stack.json("/console/svc/functions/functions")["functions"]
    assert all(f["path"] != "evil" for f in stored)
    # The same upload from a client that is not a browser page (curl) is stored.
    assert stack.request("POST", "/console/svc/functions/upload", payload)[0] == 200
