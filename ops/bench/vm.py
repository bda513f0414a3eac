"""Benchmark of the VM provisioning service against the simulated cluster (zero delays).

1. One install at a time: median wall time, median time spent outside the service (the fake
   `qm`/`pvesh`/`pvesm` processes, SSH to nodes and guests, the image mirror), and the service's
   own overhead, the difference.
2. Wall time of 20 installs started together.
3. `GET /api/vm/list` with 150 VMs over 3 nodes: median and p99, against `GET /api/health` on
   the same server as the baseline (HTTP alone).
4. Delay from an event being stored to the SSE client reading it: median and p99, against a
   bare NATS publish -> subscribe in the same process.

The simulator runs in its own process (`python -m pvesim.cli sim`), as a real cluster would be
elsewhere; the service, NATS and the client share this one.
Targets (issue 3): list <= 20 ms with 150 VMs; event to SSE client <= 2 ms.
5. Both drivers side by side on the same simulator (issue 27): an install on a node other
   than the main one and every lifecycle command, through PVE_DRIVER=cli (qm subprocesses and
   SSH) and PVE_DRIVER=api (the simulated pveproxy over HTTPS): medians, the ratio api/cli
   (target: install <= 1.2x), and the disk bytes copied between nodes by an install.

    .venv/bin/python -m ops.bench.vm [--installs 5] [--parallel 20] [--lists 200]
6. Templates (issue 41), with the simulator's cost model (its delays on, scaled by
   --delay-scale: every figure of the model scales alike, so the ratio holds at 1): per
   driver and node (the main one, and another, where the CLI driver migrates),
   install-to-"VM is ready" with VM_TEMPLATES=0 (an import per install) and for a later
   install cloned from the template (each series through one running cairn), medians, the
   ratio templates / today's (target: <= 0.3x), the same less the guest's two boots (what
   Proxmox and cairn spend), and the bytes the nodes' storages wrote per install.

    .venv/bin/python -m ops.bench.vm --section drivers [--rounds 3]
    .venv/bin/python -m ops.bench.vm --section templates [--rounds 3] [--delay-scale 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
from aiohttp import web

from actors.platform import Runtime, open_runtime
from actors.vm import install as install_pipeline
from actors.vm import jobs
from actors.vm.events import Progress, TaskEnded, TaskStarted
from actors.vm.fakemirror import serve_mirror
from actors.vm.host import VmService
from actors.vm.node import Cluster
from events.nats_server import EmbeddedNats
from events.permissions import Role
from events.store import EventStore, Recorded
from gateway.apps.vm import build
from gateway.server import domain_events, journal

from .stats import ms_line


def ms(values: list[float]) -> str:
    return ms_line(values, "8.2f")


POLLING: contextvars.ContextVar[bool] = contextvars.ContextVar("polling", default=False)


class External:
    """Time spent waiting on things outside the service (summed per install when serial).

    The inventory poller's cluster reads run beside an install and are not part of it.
    """

    def __init__(self) -> None:
        self.total = 0.0

    def wrap(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            if POLLING.get():
                return await fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start

        return timed


def mark_polls(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def polling(*args: Any, **kwargs: Any) -> Any:
        token = POLLING.set(True)  # seen by the tasks the poll starts, too
        try:
            return await fn(*args, **kwargs)
        finally:
            POLLING.reset(token)

    return polling


@contextlib.asynccontextmanager
async def simulator(root: Path, delay_scale: float = 0.0) -> AsyncIterator[dict[str, str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pvesim.cli",
        "sim",
        "--root",
        str(root),
        "--delay-scale",
        str(delay_scale),
        stdout=asyncio.subprocess.PIPE,
    )
    env: dict[str, str] = {}
    assert proc.stdout is not None
    try:
        while "PATH" not in env:
            line = (await proc.stdout.readline()).decode()
            if not line:
                raise RuntimeError("the simulator exited before printing its environment")
            key, sep, value = line.rstrip("\n").partition("=")
            if sep and not key.startswith("#"):
                env[key] = value
        yield env
    finally:
        proc.terminate()
        await proc.wait()


class BenchCluster(NamedTuple):
    root: Path
    sim_env: dict[str, str]
    mirror_url: str
    nats: EmbeddedNats

    def env(self, data: Path, extra: dict[str, str]) -> dict[str, str]:
        """cairn's environment against this cluster, its data in `data`; fast SSH polls so
        the guest's boot, not the poll, is what a section measures."""
        return {
            **os.environ,
            **self.sim_env,
            **self.nats.client_env(),
            "CAIRN_DATA": str(data),
            "IMAGE_BASE_URL": self.mirror_url,
            "VM_SSH_POLL": "0.02",
            **extra,
        }


@contextlib.asynccontextmanager
async def served_api(runtime: Runtime) -> AsyncIterator[str]:
    """The VM service's HTTP app on a free loopback port; its /api base address."""
    runner = web.AppRunner(await build(runtime), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/api"
    finally:
        await runner.cleanup()


def _driver_env(driver: str) -> dict[str, str]:
    """A section that compares drivers: no inventory poll in the way, one CPU type for both."""
    return {"PVE_DRIVER": driver, "VM_POLL_INTERVAL": "30", "VM_CPU_TYPE": "x86-64-v2-AES"}


@contextlib.asynccontextmanager
async def bench_cluster(delay_scale: float = 0.0) -> AsyncIterator[BenchCluster]:
    """A scratch folder with the simulator, the image mirror and NATS: what each section
    runs cairn against."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with (
            simulator(root / "pve", delay_scale) as sim_env,
            serve_mirror() as mirror,
            EmbeddedNats(root / "nats") as nats,
        ):
            yield BenchCluster(root, sim_env, mirror.base_url, nats)


async def read_stream(
    resp: aiohttp.ClientResponse,
    seen: dict[str, float] | None = None,
    arrived: list[float] | None = None,
) -> list[dict[str, Any]]:
    """The stream's records; `seen` gets the time each event id arrived, `arrived` the time
    of each record, in order."""
    records: list[dict[str, Any]] = []
    current: str | None = None
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("id: "):
            current = line[4:]
            if seen is not None:
                seen[current] = time.perf_counter()
        elif line.startswith("event: close"):
            break
        elif line.startswith("data: "):
            records.append(json.loads(line[6:]))
            if arrived is not None:
                arrived.append(time.perf_counter())
    return records


async def bench(
    installs: int, parallel: int, lists: int, section: str, rounds: int, scale: float = 0.05
) -> None:
    domain_events()
    if section == "drivers":
        await drivers_bench(rounds)
        return
    if section == "templates":
        await templates_bench(rounds, scale)
        return
    external = External()
    # Cluster.on (every operation of the Proxmox port) is awaited in the job's (or the
    # poller's) own task, so the mark is visible.
    Cluster.on = external.wrap(Cluster.on)  # type: ignore[method-assign,assignment]
    VmService.poll = mark_polls(VmService.poll)  # type: ignore[method-assign,assignment]
    jobs.wait_ready = external.wrap(jobs.wait_ready)  # type: ignore[assignment]
    install_pipeline.run_init = external.wrap(install_pipeline.run_init)  # type: ignore[assignment]
    jobs.verify = external.wrap(jobs.verify)  # type: ignore[assignment]
    from actors.vm.imagecache import ImageCache

    ImageCache.head = external.wrap(ImageCache.head)  # type: ignore[method-assign,assignment]
    ImageCache.fetch = external.wrap(ImageCache.fetch)  # type: ignore[method-assign,assignment]

    async with bench_cluster() as cluster:
        data = cluster.root / "data"
        env = cluster.env(data, {"VM_POLL_INTERVAL": "0.5"})
        async with open_runtime(env, data, journal=journal()) as runtime:
            stored: dict[str, float] = {}

            def on_append(records: list[Recorded]) -> None:
                now = time.perf_counter()
                for r in records:
                    ident = r.stream.partition(":")[2]
                    stored[f"{ident}:{r.version}"] = now

            runtime.store.add_listener(on_append)
            async with served_api(runtime) as api, aiohttp.ClientSession() as http:
                await run(http, api, env, installs, parallel, lists, external, stored)
                quiet = await quiet_delays(http, api, runtime.store, stored)
                nats_rounds = await nats_baseline(cluster.nats)
                print("event stored -> SSE client, nothing else running (200 events)")
                print(f"  store -> client      {ms(quiet)}   (target: median <= 2 ms)")
                print(f"  NATS pub -> sub      {ms(nats_rounds)}   (baseline)")
    await drivers_bench(rounds)


async def install(http: aiohttp.ClientSession, api: str, seen: dict[str, float]) -> int:
    body = {"os": "debian", "version": "12"}
    async with http.post(f"{api}/vm/install", json=body) as resp:
        records = await read_stream(resp, seen)
    if records[-1]["status"] != "success":
        raise RuntimeError(f"install failed: {records[-1]}")
    vmid: int = records[-1]["vm_id"]
    return vmid


async def run(
    http: aiohttp.ClientSession,
    api: str,
    env: dict[str, str],
    installs: int,
    parallel: int,
    lists: int,
    external: External,
    stored: dict[str, float],
) -> None:
    seen: dict[str, float] = {}
    walls, outside = [], []
    await install(http, api, {})  # warm: the image download and the key are one-off costs
    for _ in range(installs):
        external.total = 0.0
        start = time.perf_counter()
        await install(http, api, seen)
        walls.append(time.perf_counter() - start)
        outside.append(external.total)
    overhead = [w - o for w, o in zip(walls, outside, strict=True)]
    print(f"install, one at a time ({installs} runs, zero simulator delays)")
    print(f"  wall                 {ms(walls)}")
    print(f"  outside the service  {ms(outside)}   (fake qm/pvesh/pvesm, SSH, image mirror)")
    print(f"  service overhead     {ms(overhead)}")

    start = time.perf_counter()
    done = await asyncio.gather(*(install(http, api, {}) for _ in range(parallel)))
    wall = time.perf_counter() - start
    print(f"{parallel} installs in parallel: wall {wall:.2f} s, {len(set(done))} distinct ids")

    delays = [seen[k] - stored[k] for k in seen if k in stored]
    await fill_cluster(env, 150)
    await wait_count(http, api, 150)
    list_times, health_times = [], []
    for _ in range(lists):
        t = time.perf_counter()
        async with http.get(f"{api}/vm/list") as resp:
            data = await resp.json()
        list_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        async with http.get(f"{api}/health") as resp:
            await resp.read()
        health_times.append(time.perf_counter() - t)
    nodes = sorted({row["node"] for row in data["list"]})
    print(f"GET /api/vm/list, {data['count']} VMs over {len(nodes)} nodes ({', '.join(nodes)})")
    print(f"  list                 {ms(list_times)}   (target: median <= 20 ms)")
    print(f"  health (baseline)    {ms(health_times)}")
    ratio = statistics.median(list_times) / statistics.median(health_times)
    print(f"  ratio                {ratio:.1f}x")

    print(f"event stored -> SSE client, during the {installs} installs ({len(delays)} events)")
    print(f"  store -> client      {ms(delays)}")


async def quiet_delays(
    http: aiohttp.ClientSession, api: str, store: EventStore, stored: dict[str, float], n: int = 200
) -> list[float]:
    """A task of a made-up VM 99 (outside every id range, so no actor owns its stream), fed
    straight into the store one event at a time while a client follows it over HTTP."""
    stream, task = "vm:99", "bench"
    version = await store.stream_version(stream)
    await store.append(stream, version, [TaskStarted(task, "start", "starting")])
    version += 1
    seen: dict[str, float] = {}
    got = asyncio.Event()
    delays = []
    async with http.get(f"{api}/vm/99/task") as resp:

        async def reader() -> None:
            async for raw in resp.content:
                line = raw.decode()
                if line.startswith("id: "):
                    seen[line[4:].strip()] = time.perf_counter()
                    got.set()
                elif line.startswith("event: close"):
                    return

        reading = asyncio.create_task(reader())
        for i in range(n):
            got.clear()
            event = Progress(task, "bench > tick", "processing", f"[*] tick {i} (0.00s)")
            await store.append(stream, version, [event])
            version += 1
            await asyncio.wait_for(got.wait(), 5)
            key = f"99:{version}"
            delays.append(seen[key] - stored[key])
        await store.append(stream, version, [TaskEnded(task, True, "running")])
        await asyncio.wait_for(reading, 5)
    return delays


async def fill_cluster(env: dict[str, str], total: int) -> None:
    """VMs made behind cairn's back on every node, until the cluster holds `total`."""
    pve = Path(env["PVESIM_ROOT"]) / "bin"
    proc = await asyncio.create_subprocess_exec(
        str(pve / "pve1" / "pvesh"),
        "get",
        "/cluster/resources",
        "--type",
        "vm",
        "--output-format",
        "json",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    used = {e["vmid"] for e in json.loads(out)}
    free = [v for v in range(100, 255) if v not in used][: max(0, total - len(used))]
    nodes = ["pve2", "pve3", "pve1"]
    sem = asyncio.Semaphore(6)

    async def make(i: int, vmid: int) -> None:
        node = nodes[i % 3]
        async with sem:
            proc = await asyncio.create_subprocess_exec(
                str(pve / node / "qm"),
                "create",
                str(vmid),
                "--name",
                f"bulk-{vmid}",
                "--cores",
                "2",
                "--memory",
                "1024",
                "--tags",
                "debian",
                stdout=asyncio.subprocess.DEVNULL,
            )
            await proc.wait()

    await asyncio.gather(*(make(i, v) for i, v in enumerate(free)))


async def wait_count(http: aiohttp.ClientSession, api: str, want: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with http.get(f"{api}/vm/list") as resp:
            if (await resp.json())["count"] >= want:
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"the list never reached {want} VMs")


async def nats_baseline(nats: EmbeddedNats, n: int = 500) -> list[float]:
    """A bare publish from a gateway's connection to a host's, on a query subject (what the
    closed bus lets them use)."""
    gateway, host = await nats.connect(Role.GATEWAY), await nats.connect(Role.HOST)
    got: asyncio.Queue[float] = asyncio.Queue()

    async def on_msg(_: Any) -> None:
        got.put_nowait(time.perf_counter())

    await host.subscribe("cairn.q.bench.baseline", cb=on_msg)
    await host.flush()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await gateway.publish("cairn.q.bench.baseline", b"{}")
        out.append(await got.get() - t)
    await gateway.close()
    await host.close()
    return out


LIFECYCLE: list[tuple[str, dict[str, Any] | None]] = [
    ("stop", None),
    ("set/cpu", {"cpu": 2}),
    ("set/memory", {"memory": 1024}),
    ("set/disk", {"disk": "4G"}),
    ("set/node", {"node": "pve3"}),
    ("start", None),
    ("reboot", None),
    ("shutdown", None),
    ("destroy", None),
]


async def drivers_bench(rounds: int) -> None:
    """Section 5: the same work through each driver, in one run, on one simulator."""
    times: dict[str, dict[str, list[float]]] = {"cli": {}, "api": {}}
    copied: dict[str, list[int]] = {"cli": [], "api": []}
    async with bench_cluster() as cluster:
        for rnd in range(rounds + 1):  # round 0 warms up (image download, SSH key)
            for driver in ("cli", "api"):
                data = cluster.root / f"data-{driver}"
                env = cluster.env(data, _driver_env(driver))
                got = await one_round(env, data, Path(cluster.sim_env["PVESIM_ROOT"]))
                if rnd == 0:
                    continue
                for name, seconds in got[0].items():
                    times[driver].setdefault(name, []).append(seconds)
                copied[driver].append(got[1])
    print(
        f"drivers side by side: install on pve2 (main node pve1) and every lifecycle command, "
        f"{rounds} rounds each, zero simulator delays; medians, ratio api/cli"
    )
    for name in times["cli"]:
        cli, api = statistics.median(times["cli"][name]), statistics.median(times["api"][name])
        target = "   (target: <= 1.2x)" if name == "install" else ""
        print(
            f"  {name:<12} cli {cli * 1000:8.1f} ms   api {api * 1000:8.1f} ms   "
            f"ratio {api / cli:4.2f}x{target}"
        )
    for driver in ("cli", "api"):
        mib = statistics.median(copied[driver]) / 2**20
        print(f"  disk bytes copied between nodes by one install, {driver}: {mib:,.0f} MiB")


async def one_round(
    env: dict[str, str], data: Path, sim_root: Path
) -> tuple[dict[str, float], int]:
    """One install on pve2 and every lifecycle command; (seconds per command, bytes a
    migration inside the install copied)."""
    out: dict[str, float] = {}
    log = sim_root / "commands.log"
    before = len(log.read_text().splitlines()) if log.exists() else 0
    async with (
        open_runtime(env, data, journal=journal()) as runtime,
        served_api(runtime) as api,
        aiohttp.ClientSession() as http,
    ):
        start = time.perf_counter()
        body = {"os": "debian", "version": "12", "node": "pve2", "disk": "16G"}
        async with http.post(f"{api}/vm/install", json=body) as resp:
            records = await read_stream(resp)
        out["install"] = time.perf_counter() - start
        if records[-1]["status"] != "success":
            raise RuntimeError(f"install failed: {records[-1]}")
        vmid = records[-1]["vm_id"]
        lines = log.read_text().splitlines()[before:]
        migrations = [json.loads(x) for x in lines if '"migrate"' in x]
        # An offline migration copies every local volume: the 16 GiB disk and the
        # 4 MiB cloud-init drive.
        moved = (16 * 2**30 + 4 * 2**20) * len(migrations)
        for command, cbody in LIFECYCLE:
            start = time.perf_counter()
            async with http.post(f"{api}/vm/{vmid}/{command}", json=cbody) as resp:
                text = await resp.text()
            out[command] = time.perf_counter() - start
            if resp.status != 200 or '"status": "error"' in text:
                raise RuntimeError(f"{command} failed: {text[-300:]}")
    return out, moved


class Timed(NamedTuple):
    """One install, as its client saw it: seconds to `VM is ready`, and of those the seconds
    the guest spent booting (its first boot, and the reboot of the `rebooting VM` stage)."""

    total: float
    boots: float

    @property
    def rest(self) -> float:
        """What Proxmox and cairn spent: all a template can save."""
        return self.total - self.boots


# The records that open and close the two waits for the guest, by the start of their message.
_BOOTS = (
    ("[*] VM started, waiting for SSH", "[+] VM is reachable over SSH"),
    ("[*] rebooting to apply all settings", "[+] VM is ready"),
)


async def templates_bench(rounds: int, scale: float) -> None:
    """Section 6: today's import per install against a clone of the template, in one run."""
    timed: dict[tuple[str, str, str], list[Timed]] = {}
    written: dict[tuple[str, str, str], list[int]] = {}
    nodes = ("pve1", "pve2")  # the simulator's main node, and another
    async with bench_cluster(scale) as cluster:
        state = Path(cluster.sim_env["PVESIM_ROOT"]) / "cluster.json"
        for driver, node, (path, flag) in itertools.product(
            ("cli", "api"), nodes, (("today", "0"), ("template", "1"))
        ):
            data = cluster.root / f"data-{driver}-{node}-{path}"
            env = cluster.env(data, {**_driver_env(driver), "VM_TEMPLATES": flag})
            key = (driver, node, path)
            # One cairn for the series, as a running service: the first install warms up (the
            # image download, the SSH key and, with templates, the one template build).
            async with (
                open_runtime(env, data, journal=journal()) as runtime,
                served_api(runtime) as api,
                aiohttp.ClientSession() as http,
            ):
                for rnd in range(rounds + 1):
                    before = _written(state)
                    one = await _install_ready(http, api, node)
                    if rnd:
                        timed.setdefault(key, []).append(one)
                        written.setdefault(key, []).append(_written(state) - before)
    print(
        f"templates: install to 'VM is ready', {rounds} installs each after one warm-up, "
        f"simulator delays x{scale}; medians; 'without boots': less the guest's two boots"
    )
    for driver, node in itertools.product(("cli", "api"), nodes):
        today, cloned = timed[(driver, node, "today")], timed[(driver, node, "template")]
        where = "main node" if node == nodes[0] else "other node"
        print(f"  {driver} on {node} ({where}):")
        for what, pick in (("whole install", "total"), ("without boots", "rest")):
            was = statistics.median(getattr(t, pick) for t in today)
            now = statistics.median(getattr(t, pick) for t in cloned)
            print(
                f"    {what:<14} today {was:7.2f} s   from a template {now:7.2f} s   "
                f"ratio {now / was:4.2f}x   (target: <= 0.3x)"
            )
        for path in ("today", "template"):
            mib = statistics.median(written[(driver, node, path)]) / 2**20
            print(f"    bytes written on the nodes per install, {path}: {mib:,.0f} MiB")


def _written(state: Path) -> int:
    """Bytes the simulated nodes' storages wrote for VM disks so far (all nodes)."""
    data = json.loads(state.read_text())
    return sum(int(v) for v in data.get("written", {}).values())


async def _install_ready(http: aiohttp.ClientSession, api: str, node: str) -> Timed:
    """One install through the running service, timed from its request as its stream arrives."""
    start = time.perf_counter()
    body = {"os": "debian", "version": "12", "node": node}
    arrived: list[float] = []
    async with http.post(f"{api}/vm/install", json=body) as resp:
        records = await read_stream(resp, arrived=arrived)
    seen = list(zip(arrived, (r["message"] for r in records), strict=True))
    ready = next((at for at, message in seen if message.startswith("[+] VM is ready")), None)
    if ready is None:
        raise RuntimeError(f"install failed: {seen[-1][1] if seen else 'no record'}")

    def at(prefix: str) -> float:
        return next(t for t, message in seen if message.startswith(prefix))

    boots = sum(at(end) - at(begin) for begin, end in _BOOTS)
    return Timed(ready - start, boots)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--installs", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=20)
    parser.add_argument("--lists", type=int, default=200)
    parser.add_argument("--section", choices=("all", "drivers", "templates"), default="all")
    parser.add_argument("--rounds", type=int, default=3, help="drivers, templates: rounds each")
    parser.add_argument("--delay-scale", type=float, default=0.05, help="templates section")
    args = parser.parse_args()
    section, rounds, scale = args.section, args.rounds, args.delay_scale
    asyncio.run(bench(args.installs, args.parallel, args.lists, section, rounds, scale))


if __name__ == "__main__":
    main()
