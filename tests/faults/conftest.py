"""cairn as an operator runs it: its own process, its own CAIRN_DATA and ports, the embedded
nats-server as its child, a real SQLite file; the Proxmox simulator and the image mirror run in
the test so the test can read the cluster's state. Every test ends by checking that nothing
cairn started is still running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from nats.aio.client import Client
from pvesim.cluster import SimCluster

from events.access import NatsAccess
from events.credentials import Keyring
from events.permissions import Role
from tests.conftest import wait_for
from tests.ports import free_ports
from tests.vm import conftest as vm_fixtures
from tests.vm.conftest import Sse, read_sse
from tests.vm.mirror import Mirror

CAIRN = str(Path(sys.executable).parent / "cairn")
# The VM tests' simulated cluster and image mirror, run in the test process.
sim = vm_fixtures.sim
mirror = vm_fixtures.mirror
SERVICES = ("status", "vm", "functions", "images", "search")


@attrs.define
class Cairn:
    """One running cairn process."""

    proc: asyncio.subprocess.Process
    env: dict[str, str]
    log_path: Path
    ports: dict[str, int]
    session: aiohttp.ClientSession

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    @property
    def api(self) -> str:
        return self.url("vm") + "/api"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_log(self, pattern: str, *, timeout: float = 20.0) -> re.Match[str]:
        regex = re.compile(pattern)
        found: re.Match[str] | None = await wait_for(
            lambda: regex.search(self.log()), timeout=timeout, what=f"log line {pattern!r}"
        )
        assert found is not None
        return found

    def nats_port(self) -> int:
        match = re.search(r"cairn: nats nats://127\.0\.0\.1:(\d+)", self.log())
        assert match, self.log()
        return int(match.group(1))

    async def bus_client(self, role: Role) -> Client:
        """A client of this cairn's embedded NATS in ``role``, with the keys of its data."""
        keyring = Keyring(Path(self.env["CAIRN_DATA"]) / "nats" / "keys")
        return await NatsAccess(f"nats://127.0.0.1:{self.nats_port()}", keyring).connect(role)

    async def request(self, method: str, url: str, **kw: Any) -> tuple[int, str]:
        async with self.session.request(method, url, **kw) as resp:
            return resp.status, await resp.text()

    async def install(self, **body: Any) -> Sse:
        payload = {"os": "debian", "version": "12", **body}
        async with self.session.post(self.api + "/vm/install", json=payload) as resp:
            return await read_sse(resp)

    async def vm_list(self) -> dict[str, Any]:
        async with self.session.get(self.api + "/vm/list") as resp:
            assert resp.status == 200, await resp.text()
            data: dict[str, Any] = await resp.json()
            return data

    async def health(self) -> tuple[int, str]:
        return await self.request("GET", self.url("status") + "/health")

    async def upload_image(self, path: str, data: bytes) -> tuple[int, str]:
        """Upload ``data`` as ``<directory>/<name>`` (an upload needs a directory)."""
        directory, name = path.rsplit("/", 1)
        form = aiohttp.FormData()
        form.add_field("filepath", data, filename=name)
        return await self.request("POST", f"{self.url('images')}/upload/{directory}", data=form)

    async def upload_function(self, path: str, code: str) -> tuple[int, str]:
        body = {"path": path, "language": "python", "code": code}
        return await self.request("POST", self.url("functions") + "/upload", json=body)

    async def run_function(self, path: str) -> tuple[int, str]:
        return await self.request("POST", f"{self.url('functions')}/run/{path}", json={})

    async def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), timeout)


def stray_processes(marker: str) -> list[str]:
    """Processes whose command line names ``marker`` (a test's own directory), or that run in
    it (cairn's children inherit its working directory: the search indexer's processes name
    nothing of the test in their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if marker in cmdline or cwd.startswith(marker):
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found


async def end_strays(marker: str, grace: float = 10.0) -> list[str]:
    """Give processes under ``marker`` ``grace`` seconds to end, kill what is left; returns
    what had to be killed (a test fails on it: something outlived what started it)."""

    def nothing_left() -> bool:
        return not stray_processes(marker)

    with contextlib.suppress(AssertionError):
        await wait_for(nothing_left, timeout=grace, what="processes to end")
    left = stray_processes(marker)
    for line in left:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
    return left


def children_named(pid: int, name: str) -> list[int]:
    """Direct children of ``pid`` whose executable is ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and comm == name:
            found.append(int(entry.name))
    return found


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process; None once it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> dict[int, tuple[int, str]]:
    """Every process under ``root``: pid -> (start time, command line)."""
    parents: dict[int, int] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            parents[int(entry.name)], starts[int(entry.name)] = found
    tree: dict[int, tuple[int, str]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                try:
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                tree[pid] = (starts[pid], raw.replace(b"\0", b" ").decode(errors="replace"))
                frontier.append(pid)
    return tree


def still_alive(tree: dict[int, tuple[int, str]]) -> list[str]:
    """The processes of ``tree`` still running (the same process: same start time)."""
    return [
        f"{pid}: {cmdline[:160]}"
        for pid, (start, cmdline) in tree.items()
        if (now := _stat(pid)) is not None and now[1] == start
    ]


CREATE = "VM creation > creating VM"
Records = list[dict[str, Any]]


def reached(step: str) -> Callable[[Records], bool]:
    """Whether an install's records have come to ``step``."""
    return lambda records: any(r["step"] == step for r in records)


async def kill_when(
    cairn: Cairn,
    vmid: int,
    seen_enough: Callable[[Records], bool],
    until: Callable[[], bool] | None = None,
    **extra: str,
) -> tuple[Records, dict[int, tuple[int, str]]]:
    """Install ``vmid`` (and ``extra`` fields), kill -9 cairn alone once
    ``seen_enough(records)`` and then ``until()`` (what the stream does not show: a command's
    effect on the cluster): the records seen and cairn's process tree just before."""
    body = {"os": "debian", "version": "12", "id": vmid, **extra}
    async with cairn.session.post(cairn.api + "/vm/install", json=body) as resp:
        seen: Records = []
        while not seen_enough(seen):
            got = await read_sse(resp, stop_after=1)
            assert got.records, f"the stream ended early: {seen[-2:]}"
            seen += got.records
        if until is not None:
            await wait_for(until, timeout=20, what="the cluster's side before the kill")
        tree = descendants(cairn.proc.pid)
        os.kill(cairn.proc.pid, signal.SIGKILL)
        await cairn.proc.wait()
    return seen, tree


async def settled(again: Cairn, vmid: int) -> dict[str, Any]:
    """The last record of ``vmid``'s task re-attached after a restart: its recovery, which says
    the restart interrupted it."""
    async with again.session.get(again.api + f"/vm/{vmid}/task") as task:
        got: Sse = await read_sse(task)
    assert got.closed, "the re-attached stream did not end"
    last: dict[str, Any] = got.records[-1]
    assert (last["step"], last["status"]) == ("recovery", "error"), last
    assert "interrupted by a restart" in last["message"], last
    return last


StartCairn = Callable[..., Awaitable[Cairn]]


@pytest.fixture
async def start_cairn(tmp_path: Path, sim: SimCluster, mirror: Mirror) -> AsyncIterator[StartCairn]:
    """``await start_cairn("up", **env)``: a cairn process, ready; ``wrapper`` prefixes its
    command line (``prlimit …``, ``unshare …``). All are killed at the end, and the test fails
    if anything started under its directory is still running."""
    started: list[Cairn] = []
    sessions: list[aiohttp.ClientSession] = []
    ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))

    async def start(*args: str, wrapper: tuple[str, ...] = (), **extra: str) -> Cairn:
        env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
        env.update(sim.env())
        env.update(
            CAIRN_DATA=str(tmp_path / "data"),
            XDG_CONFIG_HOME=str(tmp_path / "config"),
            SEARCH_INBOX=str(tmp_path / "inbox"),
            IMAGE_BASE_URL=mirror.base_url,
            VM_SSH_POLL="0.02",
            VM_SSH_WAIT="10",
            VM_POLL_INTERVAL="30",
            VM_CPU_TYPE="x86-64-v2-AES",
            EMBEDDING_PROVIDER="none",
            CAIRN_PORT=str(ports["status"]),
            VM_PORT=str(ports["vm"]),
            FUNCTIONS_PORT=str(ports["functions"]),
            IMAGES_PORT=str(ports["images"]),
            SEARCH_PORT=str(ports["search"]),
        )
        env.update(extra)
        log_path = tmp_path / f"cairn-{len(started)}.log"
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                *wrapper, CAIRN, *(args or ("up",)),
                cwd=tmp_path, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        sessions.append(session)
        cairn = Cairn(proc, env, log_path, ports, session)
        started.append(cairn)

        def ready() -> bool:
            if proc.returncode is not None:
                raise AssertionError(f"cairn exited ({proc.returncode}):\n{cairn.log()}")
            return "cairn: ready" in cairn.log()

        await wait_for(ready, timeout=60, what="cairn to be ready")
        return cairn

    yield start
    for session in sessions:
        await session.close()
    for cairn in started:
        if cairn.proc.returncode is None:
            cairn.proc.kill()
            await cairn.proc.wait()
    left = await end_strays(str(tmp_path))
    if left:
        pytest.fail("processes outlived cairn:\n" + "\n".join(left))
