"""A VM's serial console in the page, in a real Chromium against a real `cairn up` driving a
simulated Proxmox through its API (the simulated pveproxy's termproxy/vncwebsocket): the
"Serial console" button opens xterm.js, the guest's login prompt shows, what is typed is
echoed, and the console's strict CSP reports nothing (the page fixture fails on any
violation). The button is not offered under the qm/SSH driver, nor to a viewer."""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from pvesim.cluster import SimCluster

from tests.console.browser import CAIRN, Stack, Watch, running_stack
from tests.console.test_browser_axe import AXE, RUN
from tests.console.test_serial_console import mark

VMID = 150


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """The simulated cluster, on an event loop of its own beside the synchronous browser."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    cluster = SimCluster(tmp_path_factory.mktemp("pve"), delay_scale=0, statd_lag=0)
    started = asyncio.run_coroutine_threadsafe(cluster.__aenter__(), loop).result(120)
    try:
        started.grant_api("/vms", ["VM.Console"])  # as `cairn pve bootstrap` grants
        started.add_gui_vm(VMID, "pve2", running=True)
        # cairn's mark: the console opens only cairn's VMs.
        asyncio.run_coroutine_threadsafe(mark(started, VMID, "pve2"), loop).result(60)
        yield started
    finally:
        asyncio.run_coroutine_threadsafe(cluster.__aexit__(None, None, None), loop).result(120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


@pytest.fixture(scope="module")
def stack(sim: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {**sim.env(include_path=False), "PVE_DRIVER": "api"}
    with running_stack(tmp_path_factory.mktemp("cairn"), extra_env=env) as running:
        yield running


def terminal_text(page: Page) -> str:
    text: str = page.locator(".serial-console .xterm-rows").inner_text()
    return text


def open_vm(page: Page, stack: Stack) -> None:
    page.goto(stack.url(f"vm/{VMID}"))
    expect(page.locator("dl.details .badge")).to_have_text("running")


def test_under_the_qm_driver_no_serial_console_is_offered(
    browser: Browser, sim: SimCluster, tmp_path: Path
) -> None:
    env = {**sim.env(include_path=True), "PVE_DRIVER": "cli"}
    with running_stack(tmp_path / "cli", extra_env=env) as cli:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        watch = Watch()
        tab = context.new_page()
        watch.attach(context, tab)
        try:
            assert cli.json("/console/serial")["available"] is False
            open_vm(tab, cli)
            expect(tab.get_by_role("button", name="Stop")).to_be_visible()
            expect(tab.get_by_role("button", name="Serial console")).to_have_count(0)
        finally:
            context.close()
        watch.assert_clean()


def test_type_into_a_vms_serial_console_and_close_it(page: Page, stack: Stack) -> None:
    open_vm(page, stack)
    page.get_by_role("button", name="Serial console").click()
    terminal = page.locator(".serial-console .xterm")
    expect(terminal).to_be_visible()
    expect(page.locator(".serial-console .xterm-rows")).to_contain_text(f"t{VMID} login:")
    # Typed as a user would: the terminal has the focus once connected.
    page.keyboard.type("debian\n")
    expect(page.locator(".serial-console .xterm-rows")).to_contain_text(f"debian@t{VMID}:~$")
    page.keyboard.type("echo typed in the page\n")
    # The command line itself contains the words: wait for the output row after it.
    expect(page.locator(".serial-console .xterm-rows")).to_contain_text(
        re.compile(r"echo typed in the page\s*typed in the page")
    )
    lines = [line.strip() for line in terminal_text(page).splitlines()]
    assert "typed in the page" in lines  # the echo's output line, not only the command line
    # What xterm.js styles itself is in force without any inline style: its rows are sized.
    box = page.locator(".serial-console .xterm-screen").bounding_box()
    assert box is not None and box["height"] > 100
    # Tab goes to the guest; Shift+Tab leaves the terminal (no keyboard trap).
    terminal_input = page.get_by_label(f"Serial console of VM {VMID}")
    expect(terminal_input).to_be_focused()
    page.keyboard.press("Tab")
    expect(terminal_input).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_role("button", name="Close serial console")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".serial-console")).to_have_count(0)
    expect(page.get_by_role("button", name="Serial console")).to_be_visible()


def test_24_bit_colours_are_drawn_without_an_inline_style(page: Page, stack: Stack) -> None:
    """xterm.js writes a cell's 24-bit colour as a style attribute, which the CSP refuses (the
    simulated guest echoes no escape sequence, so the colour is written to the terminal
    itself): it arrives through the CSSOM and shows, and the page reports nothing."""
    open_vm(page, stack)
    page.evaluate(
        """async (vmid) => {
            const holder = document.createElement("div");
            holder.className = "serial-console";
            document.querySelector("main").prepend(holder);
            const { openSerialConsole } = await import("/console/vendor/xterm/terminal.js");
            const session = openSerialConsole(holder, vmid);
            session.terminal.write("\\x1b[38;2;200;30;40mcoloured\\x1b[0m plain\\r\\n");
        }""",
        VMID,
    )
    coloured = page.locator(".serial-console .xterm-rows span", has_text="coloured")
    expect(coloured).to_have_css("color", "rgb(200, 30, 40)")


def test_on_a_phone_in_dark_it_scrolls_sideways_and_axe_finds_nothing_serious(
    browser: Browser, stack: Stack, watch: Watch
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    tab = context.new_page()
    watch.attach(context, tab)
    try:
        open_vm(tab, stack)
        tab.get_by_role("button", name="Serial console").click()
        expect(tab.locator(".serial-console .xterm-rows")).to_contain_text("login:")
        # The page itself does not grow wider than the phone: the terminal's box scrolls.
        assert tab.evaluate("document.documentElement.scrollWidth") <= 390
        holder = tab.locator(".serial-console")
        assert holder.evaluate("el => el.scrollWidth > el.clientWidth")
        tab.evaluate(AXE.read_text(encoding="utf-8"))
        assert tab.evaluate(RUN) == []
    finally:
        context.close()
    watch.assert_clean()


# Last: once tokens exist, every page asks who is there.
def test_a_viewer_is_not_offered_it_an_operator_is(
    browser: Browser, stack: Stack, watch: Watch
) -> None:
    def token(name: str, role: str) -> str:
        argv = [CAIRN, "token", "create", name, "--role", role]
        made = subprocess.run(
            argv, env=stack.env, cwd=stack.root, capture_output=True, text=True, check=True
        )
        return made.stdout.strip()

    made = {"viewer": token("vera", "viewer"), "operator": token("otto", "operator")}
    for role, secret in made.items():
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        watch.attach(context, tab)
        try:
            tab.goto(stack.base + "/")
            expect(tab).to_have_url(stack.base + "/console/login")
            tab.get_by_label("Token").fill(secret)
            tab.get_by_role("button", name="Sign in").click()
            expect(tab.locator("form.who")).to_contain_text(f"({role})")
            open_vm(tab, stack)
            button = tab.get_by_role("button", name="Serial console")
            if role == "viewer":
                expect(tab.get_by_role("heading", name="Details")).to_be_visible()
                expect(button).to_have_count(0)
            else:
                button.click()
                expect(tab.locator(".serial-console .xterm-rows")).to_contain_text("login:")
        finally:
            context.close()
    watch.assert_clean()
