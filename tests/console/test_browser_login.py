"""The console with identities on, in a real Chromium against a real `cairn up`: signing in,
a viewer who sees no destroy button and whose forged destroy gets 403, signing out; and a
page of a rebound name (DNS rebinding) refused."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import attrs
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.console.browser import CAIRN, CHROMIUM, CHROMIUM_ARGS, Stack, tail_until
from tests.console.test_browser_flows import install_from_the_form


@attrs.frozen
class Tokens:
    viewer: str
    admin: str


@pytest.fixture(scope="module")
def tokens(stack: Stack) -> Tokens:
    def create(name: str, role: str) -> str:
        argv = [CAIRN, "token", "create", name, "--role", role]
        made = subprocess.run(
            argv, env=stack.env, cwd=stack.root, capture_output=True, text=True, check=True
        )
        return made.stdout.strip()

    return Tokens(viewer=create("vera", "viewer"), admin=create("ada", "admin"))


def sign_in(page: Page, stack: Stack, token: str) -> None:
    page.goto(stack.base + "/")
    expect(page).to_have_url(stack.base + "/console/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(stack.base + "/")


def stopped_vm(stack: Stack, tokens: Tokens) -> int:
    bearer = {"Authorization": f"Bearer {tokens.admin}"}
    status, text = stack.request(
        "POST",
        "/console/svc/vm/api/vm/install",
        {"os": "ubuntu", "version": "24.04", "name": "kept"},
        bearer,
    )
    assert status == 200, text
    listing = stack.json("/console/svc/vm/api/vm/list")["list"]  # public: no token
    vmid = int(next(v for v in listing if v["name"] == "kept")["vmid"])
    assert stack.request("POST", f"/console/svc/vm/api/vm/{vmid}/stop", None, bearer)[0] == 200
    return vmid


def test_a_viewer_sees_no_destroy_and_a_forged_one_is_refused(
    page: Page, stack: Stack, tokens: Tokens
) -> None:
    vmid = stopped_vm(stack, tokens)
    # Signed out, the page asks for a token; a wrong one is said so.
    page.goto(stack.base + "/")
    expect(page).to_have_url(stack.base + "/console/login")
    page.get_by_label("Token").fill("cairn_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Unknown or revoked token.")

    sign_in(page, stack, tokens.viewer)
    expect(page.locator("form.who")).to_contain_text("Signed in as vera (viewer)")
    overview = page.locator('section[aria-labelledby="vms-h"]')
    expect(overview.get_by_role("link", name="All VMs")).to_be_visible()
    expect(page.get_by_role("link", name="Install a VM")).to_have_count(0)
    page.goto(stack.url(f"vm/{vmid}"))
    expect(page.locator("dl.details .badge")).to_have_text("stopped")
    expect(page.get_by_role("button", name="Destroy")).to_have_count(0)
    expect(page.get_by_role("button", name="Start")).to_have_count(0)
    page.goto(stack.url("vms"))
    expect(page.locator(f'tr[data-vmid="{vmid}"]')).to_be_visible()
    expect(page.get_by_role("button", name="Install a VM")).to_have_count(0)
    page.goto(stack.url("functions"))
    expect(page.get_by_role("heading", name="Functions", level=1)).to_be_visible()
    expect(page.get_by_role("heading", name="Store a function")).to_have_count(0)
    page.goto(stack.url("images"))
    expect(page.get_by_role("heading", name="Images", level=1)).to_be_visible()
    expect(page.get_by_role("heading", name="Upload")).to_have_count(0)

    # The button's request, forged from the viewer's own signed-in page: the role decides.
    status, text = page.evaluate(
        """async (vmid) => {
            const r = await fetch(`/console/svc/vm/api/vm/${vmid}/destroy`, {method: "POST"});
            return [r.status, await r.text()];
        }""",
        vmid,
    )
    assert status == 403
    assert text == "token 'vera' has role viewer; this route needs admin"
    assert stack.request("GET", f"/console/svc/vm/api/vm/{vmid}/status") == (200, "stopped")

    # Signing out ends the session: the page asks again, the cookie no longer works.
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(stack.base + "/console/login")
    status = page.evaluate("async () => (await fetch('/console/svc/functions/functions')).status")
    assert status == 401
    page.goto(stack.base + "/")
    expect(page).to_have_url(stack.base + "/console/login")


def test_an_admin_sees_destroy(page: Page, stack: Stack, tokens: Tokens) -> None:
    """The same page for a role that may: what the viewer missed was hidden, not broken."""
    listing = stack.json("/console/svc/vm/api/vm/list")["list"]
    vmid = next((v["vmid"] for v in listing if v["name"] == "kept"), None) or stopped_vm(
        stack, tokens
    )
    sign_in(page, stack, tokens.admin)
    page.goto(stack.url(f"vm/{vmid}"))
    expect(page.get_by_role("button", name="Destroy")).to_be_visible()
    expect(page.locator("form.who")).to_contain_text("Signed in as ada (admin)")


@pytest.fixture
def rebinding_browser(browser: Browser) -> Iterator[Browser]:
    """A Chromium for which rebind.evil.example resolves to 127.0.0.1, as after a rebinding
    attack (no DNS query leaves the machine)."""
    chromium = browser.browser_type.launch(
        executable_path=CHROMIUM,
        args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP rebind.evil.example 127.0.0.1"],
    )
    yield chromium
    chromium.close()


def test_a_rebound_name_is_refused(rebinding_browser: Browser, stack: Stack) -> None:
    port = stack.base.rsplit(":", 1)[1]
    context = rebinding_browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(f"http://rebind.evil.example:{port}/")
        assert response is not None and response.status == 403
        expect(page.locator("body")).to_contain_text("host not allowed")
        # The page's script is same-origin with its own (rebound) origin: still refused.
        status, text = page.evaluate(
            """async () => {
                const r = await fetch("/console/svc/functions/run-now", {method: "POST",
                    headers: {"Content-Type": "application/json"},
                    body: JSON.stringify({language: "python", code: "x"})});
                return [r.status, await r.text()];
            }"""
        )
        assert status == 403 and "host not allowed" in text
    finally:
        context.close()


def test_the_audit_trail_names_who_installed_and_destroyed(
    page: Page, stack: Stack, tokens: Tokens
) -> None:
    sign_in(page, stack, tokens.admin)
    vmid, _ = install_from_the_form(page, stack, "audited")
    detail = stack.json(f"/console/svc/vm/api/vm/{vmid}")  # public: a VM query
    assert (detail["created_by"], detail["last_task"]["by"]) == ("ada", "ada")
    page.goto(stack.url(f"vm/{vmid}"))
    expect(page.locator("dl.details")).to_contain_text("Installed at the request ofada")
    page.get_by_role("button", name="Stop", exact=True).click()
    page.get_by_role("dialog").get_by_role("button", name="Stop").click()
    expect(page.locator("dl.details .badge")).to_have_text("stopped")
    page.get_by_role("button", name="Destroy").click()
    page.get_by_role("dialog").get_by_role("button", name="Destroy").click()
    expect(page.get_by_text(f"VM {vmid} destroyed.")).to_be_visible()

    page.goto(stack.url("events"))
    started = page.locator('li[data-type="vm.task_started"] summary')
    expect(started.filter(has_text=f"VM {vmid}: install started by ada")).to_have_count(1)
    expect(started.filter(has_text=f"VM {vmid}: destroy started by ada")).to_have_count(1)

    lines = tail_until(stack, "vm", ["command=install", "command=destroy"], since="10m")
    mine = [line for line in lines if f"vm.{vmid} vm.task_started" in line]
    assert [line.split("command=")[1].split()[0] for line in mine] == [
        "install",
        "stop",
        "destroy",
    ], lines
    assert all(line.rstrip().endswith("by=ada") for line in mine), mine


def test_an_api_reference_page_leads_to_sign_in_and_opens_with_the_session(
    page: Page, stack: Stack, tokens: Tokens
) -> None:
    own = f"http://127.0.0.1:{stack.env['FUNCTIONS_PORT']}/docs/"
    through = stack.base + "/console/svc/functions/docs/"
    # The service's own page, no token: a way in, not a bare 401.
    response = page.goto(own)
    assert response is not None and response.status == 401
    expect(page.get_by_role("heading", level=1)).to_have_text("This API reference needs a token")
    expect(page.get_by_role("link", name="Sign in on the console")).to_have_attribute(
        "href", stack.base + "/console/login"
    )
    expect(page.get_by_role("link", name=through)).to_be_visible()

    sign_in(page, stack, tokens.viewer)
    page.goto(own)
    page.get_by_role("link", name=through).click()
    expect(page).to_have_url(through)
    # Swagger UI renders the document through the console, and "Try it out" on a route that
    # needs a viewer goes the same way, with the session.
    operation = page.locator("#operations-stored-listFunctions")
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table tr.response .response-col_status")
    expect(status).to_have_text("200")
    expect(operation.locator(".request-url")).to_contain_text("/console/svc/functions/functions")
