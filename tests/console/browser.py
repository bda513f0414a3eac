"""A real Chromium (Debian's `chromium`, driven by Playwright's Python API) and a real cairn:
`cairn up` as its own process, on free ports, with a search database and the simulated cluster.

Playwright's own browser download does not work here, and a user's host has the distribution's
browser anyway: Playwright drives `/usr/bin/chromium` (`ops/apt-packages-dev.txt`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Locator,
    Page,
    Playwright,
    Route,
    expect,
)

from tests.gateway.test_cli_up import up_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
CAIRN = str(Path(sys.executable).parent / "cairn")
# The root password of the VMs the tests install through the console.
PASSWORD = "a-password-for-the-demo"
# What the search database of every stack holds: one text about foxes, one about clusters, and
# a file of a kind search does not read.
DOCUMENTS = {
    "fox.txt": "The quick brown fox jumps over the lazy dog.\n",
    "cluster.txt": "Proxmox clusters keep their VMs on nodes; each node runs qemu guests.\n",
    "scan.xyz": "not a format search reads\n",
}
T = TypeVar("T")
# How long an `expect(...)` assertion waits for what a user would see. Playwright's own default
# is 5 s, and a context's set_default_timeout does not change it (it is for actions): on a loaded
# machine 5 s is short for a page that waits on the server (a save, a run, the editor bundle
# esbuild builds on its first request). Passing assertions end as soon as they hold.
EXPECT_TIMEOUT_MS = 30_000


def launch(playwright: Playwright) -> Browser:
    if not os.access(CHROMIUM, os.X_OK):
        raise RuntimeError(f"{CHROMIUM} is missing: `ops/setup --dev` installs Debian's chromium")
    expect.set_options(timeout=EXPECT_TIMEOUT_MS)
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def is_loopback(host: str | None) -> bool:
    if host in ("localhost", "[::1]"):
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def wait_until(condition: Callable[[], T], *, timeout: float = 30.0, what: str = "condition") -> T:
    """Poll ``condition`` until truthy, for state that offers nothing to await."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@attrs.define
class Stack:
    """A running `cairn up`: the console's address and the way to its services."""

    root: Path
    env: dict[str, str]
    proc: subprocess.Popen[str]
    lines: list[str]
    base: str

    def url(self, page: str = "") -> str:
        return f"{self.base}/#/{page}"

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """A plain HTTP client (no Origin, like curl) against the console."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def upload_image(self, folder: str, name: str, data: bytes) -> dict[str, Any]:
        """A multipart upload as a form would send it, through the console."""
        boundary = "cairn-test-boundary"
        body = b"".join(
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="filepath"; '.encode(),
                f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        req = urllib.request.Request(
            f"{self.base}/console/svc/images/upload/{folder}", data=body, method="POST"
        )
        req.add_header("Content-Type", f"multipart/form-data; boundary={boundary}")
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert resp.status == 201
            reply: dict[str, Any] = json.loads(resp.read())
            return reply

    def install(
        self, name: str, os_name: str = "debian", version: str = "12", node: str | None = None
    ) -> int:
        """A VM installed through the console's forwarding, with a password so none is made
        up; its id."""
        body = {"os": os_name, "version": version, "name": name, "passwd": PASSWORD}
        if node:
            body["node"] = node
        status, text = self.request("POST", "/console/svc/vm/api/vm/install", body)
        assert status == 200 and '"status":"error"' not in text, text
        listed = self.json("/console/svc/vm/api/vm/list")["list"]
        return int(next(v["vmid"] for v in listed if v["name"] == name))

    def json(self, path: str) -> Any:
        status, text = self.request("GET", path)
        assert status == 200, (path, status, text)
        return json.loads(text)

    def output(self) -> str:
        return "".join(self.lines)


def reading(
    args: list[str], env: dict[str, str], cwd: Path, enough: Callable[[list[str]], bool]
) -> tuple[subprocess.Popen[str], list[str], threading.Event]:
    """`cairn ARGS` started, a thread copying its output (stderr too) line by line into the list
    returned; the event is set once `enough(lines)` holds, or when the output ends (the process
    exited: the waiter sees that, not a timeout)."""
    proc = subprocess.Popen(
        [CAIRN, *args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    lines: list[str] = []
    seen = threading.Event()

    def copy() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not seen.is_set() and enough(lines):
                seen.set()
        seen.set()

    threading.Thread(target=copy, daemon=True).start()
    return proc, lines, seen


def start_stack(
    root: Path,
    databases: dict[str, dict[str, str]] | None = None,
    extra_env: dict[str, str] | None = None,
) -> Stack:
    """``extra_env``: e.g. a cluster's variables, for a stack that drives one of the test's."""
    root.mkdir(parents=True, exist_ok=True)
    env = up_env(root)  # its own data, config, inbox and free ports, as `cairn up` tests use
    env.update(
        PVESIM_DELAY_SCALE="0",
        VM_SSH_POLL="0.05",
        VM_POLL_INTERVAL="1",
        # A guest made never to answer SSH holds its install this long, then fails it.
        VM_SSH_WAIT="15",
        RUN_WARM="0",
    )
    env.update(extra_env or {})
    for db, files in (databases if databases is not None else {"notes": DOCUMENTS}).items():
        subprocess.run(
            [CAIRN, "search", "add", db], env=env, cwd=root, check=True, capture_output=True
        )
        inbox = root / "inbox" / db
        inbox.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (inbox / name).write_text(text)
    proc, lines, ready = reading(["up"], env, root, lambda lines: "cairn: ready" in lines[-1])
    if not ready.wait(180) or proc.poll() is not None:
        proc.kill()
        raise AssertionError("cairn up did not start:\n" + "".join(lines))
    return Stack(root, env, proc, lines, f"http://127.0.0.1:{env['CAIRN_PORT']}")


def stop_stack(stack: Stack) -> None:
    stack.proc.send_signal(signal.SIGTERM)
    try:
        code = stack.proc.wait(60)
    except subprocess.TimeoutExpired:
        stack.proc.kill()
        raise AssertionError("cairn up did not stop on SIGTERM:\n" + stack.output()) from None
    assert code == 0, stack.output()
    assert "Traceback" not in stack.output(), stack.output()


@contextlib.contextmanager
def running_stack(root: Path, extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    stack = start_stack(root, extra_env=extra_env)
    try:
        yield stack
    finally:
        stop_stack(stack)


@attrs.define
class Watch:
    """What a page did that it must not: requests beyond loopback, script errors, CSP
    violations."""

    outside: list[str] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)

    def guard(self, route: Route) -> None:
        if is_loopback(urlsplit(route.request.url).hostname):
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def attach(self, context: BrowserContext, page: Page) -> None:
        context.route("**/*", lambda route: self.guard(route))
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        page.on(
            "console",
            lambda m: self.errors.append(m.text) if "Content Security Policy" in m.text else None,
        )

    def page(self, browser: Browser, width: int, height: int) -> Page:
        """A page in a fresh context of that size, watched; close its context when done."""
        context = browser.new_context(viewport={"width": width, "height": height})
        context.set_default_timeout(30_000)
        page = context.new_page()
        self.attach(context, page)
        return page

    def assert_clean(self) -> None:
        assert not self.outside, f"requests left loopback: {self.outside}"
        assert not self.errors, f"the page reported: {self.errors}"


def tail_until(
    stack: Stack, subject: str, wanted: list[str], *, since: str = "1", timeout: float = 60
) -> list[str]:
    """Lines of `cairn events tail SUBJECT --since SINCE` until each of `wanted` has shown up
    (or `timeout` has passed: the caller's assertion then says what is missing)."""
    proc, lines, done = reading(
        ["events", "tail", subject, "--since", since],
        stack.env,
        stack.root,
        lambda lines: all(any(w in seen for seen in lines) for w in wanted),
    )
    try:
        done.wait(timeout)
    finally:
        proc.terminate()
        proc.wait(30)
    return lines


def code_of(editor: Locator) -> str:
    """The text in a code editor (CodeMirror's content element, found by its label): its lines
    as the user sees them, joined by newlines."""
    text: str = editor.evaluate(
        "el => [...el.querySelectorAll('.cm-line')].map((l) => l.textContent).join('\\n')"
    )
    return text


def store_function(page: Page, stack: Stack, path: str, code: str) -> None:
    """Store `code` as a Python function at `path` through the Functions page's form, and land
    on the function's own page."""
    page.goto(stack.url("functions"))
    page.get_by_label("Path").fill(path)
    page.get_by_label("Language").select_option("python")
    paste_code(page.get_by_label("Code", exact=True), code)
    page.get_by_role("button", name="Store").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(path)


def paste_code(editor: Locator, text: str) -> None:
    """Replace a code editor's text as a user pasting it would: select all, paste. (Playwright's
    fill() types through the browser's own editing, which adds style attributes the console's
    CSP refuses; CodeMirror takes a paste itself.)"""
    editor.click()
    editor.press("Control+a")
    editor.evaluate(
        """(el, text) => {
            const data = new DataTransfer();
            data.setData("text/plain", text);
            el.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true,
                                                          cancelable: true}));
        }""",
        text,
    )
