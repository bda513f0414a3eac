"""The VM service started as an operator starts it: beyond loopback only with ALLOW_IPS said
out loud, never quietly on the simulator when half a real cluster is configured, and always
saying which cluster it drives."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp

from tests.gateway.test_cli_up import start, up_env

CAIRN = str(Path(sys.executable).parent / "cairn")


async def refused(argv: list[str], tmp_path: Path, **extra: str) -> str:
    """Run `cairn ARGV`, expecting a configuration error; its stderr."""
    env = {**up_env(tmp_path, "PORT"), **extra}
    proc = await asyncio.create_subprocess_exec(
        CAIRN,
        *argv,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2, (out + err).decode()
    assert b"Traceback" not in err
    return err.decode()


async def test_beyond_loopback_without_allow_ips_refuses_to_start(tmp_path: Path) -> None:
    err = await refused(["serve", "vm", "--sim"], tmp_path, VM_HOST="0.0.0.0")
    assert (
        "cairn: configuration error: ALLOW_IPS: must be set when the VM service listens on "
        "0.0.0.0 (beyond loopback): list the client addresses or CIDRs allowed to install, stop "
        "and destroy VMs, or set ALLOW_IPS=0.0.0.0 to allow every client that can reach it"
    ) in err


async def test_half_a_real_cluster_stops_cairn_up(tmp_path: Path) -> None:
    err = await refused(["up"], tmp_path, GATEWAY="192.168.0.1", NODE_pve2="192.168.0.12")
    assert (
        "cairn: configuration error: MAIN_NODE: is not set, but GATEWAY, NODE_pve2 are: set "
        "MAIN_NODE (and the other variables of docs/vm.md) to drive your cluster, or unset them "
        "to use the simulated one"
    ) in err
    assert not (tmp_path / "data" / "pvesim").exists()  # the simulator never started


async def test_allow_all_beyond_loopback_is_said_at_start_up(tmp_path: Path) -> None:
    env = {
        **up_env(tmp_path, "PORT"),
        "VM_HOST": "0.0.0.0",
        "ALLOW_IPS": "0.0.0.0",
        "NODE_pve9": "10.0.0.9",
    }
    proc, lines = await start([CAIRN, "serve", "vm", "--sim"], tmp_path, env)
    try:
        output = "".join(lines)
        assert (
            "cairn: vm: WARNING: ALLOW_IPS=0.0.0.0 lets any client that reaches 0.0.0.0 "
            "install, stop and destroy VMs"
        ) in output
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{env['PORT']}/api/vm/list") as resp,
        ):
            listing = await resp.json()
        assert listing["simulated"] is True
        # A NODE_ of a real cluster (from .env) does not join the simulated one.
        assert {n["node"] for n in listing["cluster"]} == {"pve1", "pve2", "pve3"}
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 60)
