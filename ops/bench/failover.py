"""Benchmark: cluster mode's failover, from the loss of the host running the VM actors to the
install it was running being settled by a survivor.

Everything is a process of its own, as in tests/cluster: three nats-servers (JetStream), the
simulated Proxmox cluster (`cairn sim`), and three cairn hosts (`cairn serve vm`,
`CAIRN_CLUSTER=1`) on one shared event store (an SQLite file by default; `--store URL` for
PostgreSQL). Each round starts an install through a gateway that does not run the VM actors,
waits until the VM is half-built in Proxmox, then ends the owner and measures, from that
moment: until another host answers that it runs the VM actors (`takeover`), and until a client
re-attached through a survivor's gateway has the install's whole stream, ended (`settled`).

Two ways to end the owner, alternating: `kill -9` (the lease must expire: `CAIRN_LEASE_TTL`)
and a graceful stop (SIGTERM: the lease is handed on at once; `CAIRN_STOP_GRACE=0`, so it cuts
the install off instead of letting it finish), the baseline. The ended host is
started again before the next round.

    .venv/bin/python -m ops.bench.failover [--rounds 3] [--ttl 15] [--store URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from pvesim.cli import read_printed_env

from actors.vm.fakemirror import serve_mirror
from events.leases import LeaseSettings
from events.nats_server import free_port
from tests.nats_cluster import NatsCluster

CAIRN = str(Path(sys.executable).parent / "cairn")
CUT = "VM creation > importing disk image"
# Issue 30: kill -9 of the lease holder to the install settled, median, at the defaults.
TARGET = 15.0


class Host:
    def __init__(self, name: str, env: dict[str, str], log: Path) -> None:
        self.name, self.env, self.log = name, env, log
        self.proc: asyncio.subprocess.Process | None = None
        self.url = f"http://127.0.0.1:{env['VM_PORT']}"

    async def start(self) -> None:
        seen = self.log.stat().st_size if self.log.exists() else 0  # a restart appends
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                CAIRN,
                "serve",
                "vm",
                env=self.env,
                cwd=self.log.parent,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        while "cairn: ready" not in self.log.read_text(errors="replace")[seen:]:
            if self.proc.returncode is not None:
                raise SystemExit(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
            await asyncio.sleep(0.05)

    async def runs_vm_actors(self, http: aiohttp.ClientSession) -> bool:
        if self.proc is None or self.proc.returncode is not None:
            return False
        try:
            quick = aiohttp.ClientTimeout(total=1.0)
            async with http.get(self.url + "/health", timeout=quick) as resp:
                return bool((await resp.json())["lease"]["runs_here"])
        except (TimeoutError, aiohttp.ClientError, KeyError):
            return False


async def owner(hosts: list[Host], http: aiohttp.ClientSession) -> Host:
    while True:
        for host in hosts:
            if await host.runs_vm_actors(http):
                return host
        await asyncio.sleep(0.02)


async def install_until_cut(host: Host, http: aiohttp.ClientSession, vmid: int) -> None:
    body = {"os": "debian", "version": "12", "id": vmid}
    last = None
    async with http.post(host.url + "/api/vm/install", json=body) as resp:
        async for raw in resp.content:
            if raw.startswith(b"data: "):
                last = json.loads(raw[6:])
                if last.get("step") == CUT:
                    return
    raise SystemExit(f"install of {vmid} ended before {CUT!r}: {last}")


async def whole_task(host: Host, http: aiohttp.ClientSession, vmid: int) -> str:
    """Re-attach to the VM's task from its start; returns the last record's status."""
    last: dict[str, object] = {}
    async with http.get(f"{host.url}/api/vm/{vmid}/task") as resp:
        async for raw in resp.content:
            if raw.startswith(b"data: "):
                data = json.loads(raw[6:])
                if data:
                    last = data
    return str(last.get("status"))


@contextlib.asynccontextmanager
async def cluster(root: Path, ttl: float, store: str | None) -> AsyncIterator[list[Host]]:
    async with contextlib.AsyncExitStack() as stack:
        nats = await stack.enter_async_context(NatsCluster(root / "nats", 3))
        mirror = await stack.enter_async_context(serve_mirror())
        sim = await asyncio.create_subprocess_exec(
            CAIRN, "sim", "--root", str(root / "pvesim"), "--delay-scale", "0.05",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        stack.push_async_callback(_end, sim)
        assert sim.stdout is not None
        try:
            sim_env = await read_printed_env(sim.stdout)
        except EOFError as exc:
            raise SystemExit(str(exc)) from None
        url = store or f"sqlite+aiosqlite:///{root / 'events.db'}"
        hosts = []
        for i in range(3):
            home = root / f"host{i}"
            home.mkdir()
            env = {
                **{k: v for k, v in os.environ.items() if k != "NATS_URL"},
                **sim_env,
                **nats.client_env(),
                "CAIRN_EVENT_STORE": url,
                "CAIRN_CLUSTER": "1",
                "CAIRN_HOST_NAME": f"host{i}",
                "CAIRN_EVENTS_REPLICAS": "3",
                "CAIRN_LEASE_TTL": str(ttl),
                "CAIRN_DATA": str(home / "data"),
                "IMAGE_BASE_URL": mirror.base_url,
                "VM_SSH_POLL": "0.02",
                "VM_POLL_INTERVAL": "30",
                "VM_CPU_TYPE": "x86-64-v2-AES",
                "LOG_LEVEL": "warning",
                # A graceful stop would let the install finish first (that is what it is
                # for); here it must cut it off, to compare the hand-over with a kill.
                "CAIRN_STOP_GRACE": "0",
                "VM_PORT": str(free_port()),
            }
            hosts.append(Host(f"host{i}", env, home / "cairn.log"))
        for host in hosts:
            stack.push_async_callback(_end_host, host)
        await asyncio.gather(*(h.start() for h in hosts))
        yield hosts


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _end_host(host: Host) -> None:
    if host.proc is not None:
        await _end(host.proc)


async def one_round(
    hosts: list[Host], http: aiohttp.ClientSession, vmid: int, how: signal.Signals
) -> tuple[float, float]:
    first = await owner(hosts, http)
    client = next(h for h in hosts if h is not first)
    await install_until_cut(client, http, vmid)
    assert first.proc is not None
    first.proc.send_signal(how)
    began = time.monotonic()
    survivors = [h for h in hosts if h is not first]
    await owner(survivors, http)
    takeover = time.monotonic() - began
    status = await whole_task(client, http, vmid)
    settled = time.monotonic() - began
    if status != "error":
        raise SystemExit(f"install {vmid} ended {status!r}, not settled as interrupted")
    await first.proc.wait()
    await first.start()
    return takeover, settled


async def bench(rounds: int, ttl: float, store: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="cairn-failover-") as tmp:
        async with cluster(Path(tmp), ttl, store) as hosts, aiohttp.ClientSession() as http:
            print(
                f"three hosts, CAIRN_LEASE_TTL={ttl:g} s, store "
                f"{'PostgreSQL' if store else 'SQLite (one file, three processes)'}"
            )
            figures: dict[str, list[tuple[float, float]]] = {"kill -9": [], "SIGTERM": []}
            vmid = 200
            for _ in range(rounds):
                for name, how in (("SIGTERM", signal.SIGTERM), ("kill -9", signal.SIGKILL)):
                    figures[name].append(await one_round(hosts, http, vmid, how))
                    vmid += 1
            for name, runs in figures.items():
                take = statistics.median(t for t, _ in runs)
                settle = statistics.median(s for _, s in runs)
                worst = max(s for _, s in runs)
                print(
                    f"{name:8} takeover median {take:6.2f} s   settled median {settle:6.2f} s"
                    f"   worst {worst:6.2f} s   ({len(runs)} rounds)"
                )
            base = statistics.median(s for _, s in figures["SIGTERM"])
            kill = statistics.median(s for _, s in figures["kill -9"])
            print(f"kill -9 / graceful stop, settled: {kill / base:.1f}x")
            # A survivor cannot take the lease before the TTL ends (counted from the dead
            # holder's last renewal, up to ttl/24 before the kill); the rest is what cairn adds.
            take = statistics.median(t for t, _ in figures["kill -9"])
            print(
                f"kill -9: takeover {take - ttl:+.2f} s after the TTL, "
                f"settled {kill - ttl:+.2f} s; issue 30's target "
                f"(settled median <= {TARGET:g} s): "
                f"{'met' if kill <= TARGET else 'NOT met'}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=LeaseSettings().ttl)
    parser.add_argument("--store", default=None, help="an event store URL (PostgreSQL)")
    args = parser.parse_args()
    asyncio.run(bench(args.rounds, args.ttl, args.store))


if __name__ == "__main__":
    main()
