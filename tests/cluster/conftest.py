"""cairn in cluster mode on one machine, every part a process of its own: three nats-servers
clustered with JetStream, one PostgreSQL event store, one simulated Proxmox cluster
(`cairn sim`), and three cairn hosts (`cairn serve vm functions`, `CAIRN_CLUSTER=1`), each with
its own data directory and ports. Tests kill, pause and resume them as an operator's machines
would fail; what they assert is what a client of the gateways, and the Proxmox cluster, see."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from pvesim.cli import read_printed_env
from pvesim.cluster import SimCluster, VmView

from tests.conftest import wait_for
from tests.faults.conftest import end_strays
from tests.nats_cluster import NatsCluster
from tests.ports import free_ports
from tests.postgres import PostgresServer
from tests.vm import conftest as vm_fixtures
from tests.vm.conftest import Sse, read_sse
from tests.vm.helpers import guests
from tests.vm.mirror import Mirror

CAIRN = str(Path(sys.executable).parent / "cairn")
mirror = vm_fixtures.mirror
HOSTS = 3


@attrs.define
class Host:
    """One cairn host: its process, ports and log."""

    name: str
    env: dict[str, str]
    log_path: Path
    session: aiohttp.ClientSession
    proc: asyncio.subprocess.Process | None = None

    @property
    def vm_url(self) -> str:
        return f"http://127.0.0.1:{self.env['VM_PORT']}"

    @property
    def api(self) -> str:
        return self.vm_url + "/api"

    @property
    def functions_url(self) -> str:
        return f"http://127.0.0.1:{self.env['FUNCTIONS_PORT']}"

    @property
    def images_url(self) -> str:
        return f"http://127.0.0.1:{self.env['IMAGES_PORT']}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                CAIRN,
                "serve",
                "vm",
                "functions",
                "images",
                cwd=self.log_path.parent,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.returncode is not None:
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{self.log()}")
            return "cairn: ready" in self.log()

        await wait_for(ready, timeout=60, what=f"{self.name} to be ready")

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        await self.proc.wait()

    async def runs(self, service_url: str) -> bool:
        """Whether this host runs the leased part of a service (its /health says). Short: a
        paused host answers nothing, and must not hold the poll up."""
        quick = aiohttp.ClientTimeout(total=1.0)
        try:
            async with self.session.get(service_url + "/health", timeout=quick) as resp:
                return bool((await resp.json())["lease"]["runs_here"])
        except (TimeoutError, aiohttp.ClientError, KeyError):
            return False

    async def runs_vm_actors(self) -> bool:
        return await self.runs(self.vm_url)

    async def install(self, **body: Any) -> Sse:
        payload = {"os": "debian", "version": "12", **body}
        async with self.session.post(self.api + "/vm/install", json=payload) as resp:
            return await read_sse(resp)

    async def task(self, vmid: int) -> Sse:
        """The whole stream of the VM's current (or last) task, re-attached from its start."""
        async with self.session.get(f"{self.api}/vm/{vmid}/task") as resp:
            return await read_sse(resp)


@attrs.define
class Cluster:
    root: Path
    nats: NatsCluster
    hosts: list[Host]
    sim_root: Path

    def sim(self) -> SimCluster:
        """A reader of the simulated cluster's state (the simulator runs elsewhere)."""
        return SimCluster(self.sim_root)

    def vms(self) -> dict[int, VmView]:
        return self.sim().vms()

    def guests(self) -> set[int]:
        """The VMs' ids, without the template their installs cloned."""
        return guests(self.sim())

    def commands(self) -> list[str]:
        return self.sim().commands()

    def alive(self) -> list[Host]:
        return [h for h in self.hosts if h.alive]

    async def owner(self, timeout: float = 30.0) -> Host:
        """The host that runs the VM actors now (waits for one)."""
        return await self.runner_of("vm_url", timeout)

    async def runner_of(self, service: str, timeout: float = 30.0) -> Host:
        """The live host that runs the leased part of ``service`` (a Host's URL attribute:
        ``vm_url``, ``functions_url``, ``images_url``) now; waits for exactly one."""
        found: list[Host] = []

        async def one() -> bool:
            found.clear()
            for host in self.alive():
                if await host.runs(getattr(host, service)):
                    found.append(host)
            return len(found) == 1

        await wait_for(one, timeout=timeout, what=f"one host to run the leased part of {service}")
        return found[0]


async def _start_sim(
    root: Path, log_path: Path
) -> tuple[asyncio.subprocess.Process, dict[str, str]]:
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            CAIRN, "sim", "--root", str(root), "--delay-scale", "0.05",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
    assert proc.stdout is not None
    try:
        env = await asyncio.wait_for(read_printed_env(proc.stdout), 60)
    except EOFError:
        raise AssertionError(f"cairn sim exited:\n{log_path.read_text()}") from None  # noqa: ASYNC240
    return proc, env


@pytest.fixture
def pve_driver(request: pytest.FixtureRequest) -> str:
    """How the hosts drive Proxmox: the test's parameter when a module runs with both
    (`pytest.mark.parametrize("pve_driver", DRIVERS, indirect=True)`), else PVE_DRIVER from
    the environment (cli when unset)."""
    param = getattr(request, "param", None)
    return str(param) if param else os.environ.get("PVE_DRIVER", "").strip() or "cli"


@pytest.fixture
async def cluster(
    tmp_path: Path, postgres: PostgresServer, mirror: Mirror, pve_driver: str
) -> AsyncIterator[Cluster]:
    """Everything started and ready; everything ended after the test, which fails if any
    process started under its directory outlives it."""
    nats = NatsCluster(tmp_path / "nats", HOSTS)
    await nats.start()
    sim_proc, sim_env = await _start_sim(tmp_path / "pvesim", tmp_path / "sim.log")
    store_url = postgres.url(postgres.new_database())
    sessions: list[aiohttp.ClientSession] = []
    hosts: list[Host] = []
    base = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    shared_images = tmp_path / "shared-images"
    shared_images.mkdir()
    try:
        ports = iter(free_ports(4 * HOSTS))  # all different, across the hosts too
        for i in range(HOSTS):
            home = tmp_path / f"host{i}"
            # One image tree for every host, as a shared filesystem would be (docs/images.md):
            # store, trash and tmp shared, the variant cache each host's own.
            (home / "data" / "images").mkdir(parents=True)
            for part in ("store", "trash", "tmp"):
                (shared_images / part).mkdir(exist_ok=True)
                (home / "data" / "images" / part).symlink_to(shared_images / part)
            env = {
                **base,
                **sim_env,
                **nats.client_env(),
                "CAIRN_EVENT_STORE": store_url,
                "CAIRN_CLUSTER": "1",
                "CAIRN_HOST_NAME": f"host{i}",
                "PVE_DRIVER": pve_driver,
                "CAIRN_EVENTS_REPLICAS": "3",
                "CAIRN_DATA": str(home / "data"),
                "XDG_CONFIG_HOME": str(home / "config"),
                "IMAGE_BASE_URL": mirror.base_url,
                "VM_SSH_POLL": "0.02",
                "VM_SSH_WAIT": "20",
                "VM_POLL_INTERVAL": "30",
                "VM_CPU_TYPE": "x86-64-v2-AES",
                # Each host can run all six of test_functions' runs at once, however the queue
                # group spreads them (with 4, a host got five 5 % of the time and one waited);
                # two warm sandboxes per runtime keep three hosts' idle pools small.
                "RUN_CONCURRENCY": "6",
                "RUN_WARM": "2",
                "CAIRN_PORT": str(next(ports)),
                "VM_PORT": str(next(ports)),
                "FUNCTIONS_PORT": str(next(ports)),
                "IMAGES_PORT": str(next(ports)),
            }
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
            sessions.append(session)
            hosts.append(Host(f"host{i}", env, home / "cairn.log", session))
        await asyncio.gather(*(h.start() for h in hosts))
        made = Cluster(tmp_path, nats, hosts, tmp_path / "pvesim")
        for service in ("vm_url", "functions_url", "images_url"):
            await made.runner_of(service)
        yield made
    finally:
        for session in sessions:
            await session.close()
        for host in hosts:
            if host.proc is not None and host.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    host.proc.send_signal(signal.SIGCONT)
                host.proc.kill()
                await host.proc.wait()
        sim_proc.terminate()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(sim_proc.wait(), 20)
        if sim_proc.returncode is None:
            sim_proc.kill()
            await sim_proc.wait()
        await nats.stop()
    left = await end_strays(str(tmp_path))
    assert not left, "processes outlived the test:\n" + "\n".join(left)


def outcome(sse: Sse) -> dict[str, Any]:
    """How an install's stream ended: its last record when it closed after one; else what the
    client got instead (a refusal's status and text, or a stream cut off)."""
    if sse.records and sse.closed:
        return sse.last
    return {"http": sse.status, "text": sse.text, "closed": sse.closed, "last": sse.records[-1:]}


def versions(sse: Sse) -> list[int]:
    """The stream versions of an SSE stream's records (from their `id:` lines)."""
    return [int(i.split(":", 1)[1]) for i in sse.ids]


def journal(host: Host, pattern: str) -> list[str]:
    return [line for line in host.log().splitlines() if re.search(pattern, line)]


def dump(cluster: Cluster) -> str:
    """Every host's log, for a failing assertion's message."""
    parts = [f"--- {h.name}\n{h.log()[-6000:]}" for h in cluster.hosts]
    return "\n".join(parts) + "\n--- sim vms " + json.dumps(sorted(cluster.vms()))
