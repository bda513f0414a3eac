"""What one simulated Proxmox command costs, by transport, with zero delays.

    .venv/bin/python ops/bench/sim_commands.py [--runs N]

Prints medians and p99 of: the command in-process (the baseline, measured in this process),
the main node's shim on PATH (a new interpreter per call, as the VM service's local transport
pays), one exec over an open SSH connection to pve2, and `pvesh get /cluster/resources` with 150
VMs over 3 nodes. Ratios are against the in-process baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncssh
from pvesim.cluster import SimCluster
from pvesim.commands import execute
from pvesim.context import Ctx

from .stats import median_p99


async def measure(runs: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    await fn()
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with SimCluster(Path(tmp) / "pve", delay_scale=0, statd_lag=0) as sim:
            env = {**os.environ, **sim.env()}

            def inproc(*argv: str) -> int:
                ctx = Ctx(sim.store, "pve1", lambda _s: None, lambda _s: None, lambda: "", scale=0)
                return execute(ctx, list(argv))

            inproc("qm", "create", "100")
            for i in range(150):
                node = ("pve1", "pve2", "pve3")[i % 3]
                ctx = Ctx(sim.store, node, lambda _s: None, lambda _s: None, lambda: "", scale=0)
                execute(ctx, ["qm", "create", str(101 + i), "--name", f"vm-{101 + i}",
                              "--memory", "2048", "--cores", "2"])  # fmt: skip

            async def local_shim(*argv: str) -> None:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    env=env,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                await proc.wait()

            async def in_process() -> None:
                await asyncio.to_thread(inproc, "qm", "status", "100")

            results: dict[str, list[float]] = {}
            results["in-process qm status"] = await measure(runs, in_process)
            results["local shim qm status"] = await measure(
                runs, lambda: local_shim("qm", "status", "100")
            )
            conn = await asyncssh.connect(
                "127.0.0.2",
                int(env["PVE_SSH_PORT"]),
                username="root",
                client_keys=[env["PVE_SSH_KEY"]],
                known_hosts=env["PVE_KNOWN_HOSTS"],
            )
            async with conn:
                results["ssh pve2 qm status"] = await measure(
                    runs, lambda: conn.run("qm status 101")
                )
            results["local shim pvesh /cluster/resources (150 VMs)"] = await measure(
                runs,
                lambda: local_shim(
                    "pvesh", "get", "/cluster/resources", "--type", "vm", "--output-format", "json"
                ),
            )
    base, _ = median_p99(results["in-process qm status"])
    print(f"{'measurement':<48} {'median ms':>10} {'p99 ms':>10} {'x base':>8}")
    for name, samples in results.items():
        median, p99 = median_p99(samples)
        print(f"{name:<48} {median:>10.2f} {p99:>10.2f} {median / base:>8.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.runs))
    sys.exit(0)
