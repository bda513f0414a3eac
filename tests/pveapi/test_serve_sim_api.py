"""`cairn serve vm --sim` honours PVE_DRIVER=api: the simulated cluster is driven through its
pveproxy, and a real cluster's PVE_API_URL from a .env does not leak into it."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp

from tests.gateway.test_cli_up import start, up_env

CAIRN = str(Path(sys.executable).parent / "cairn")


async def test_serve_vm_sim_with_the_api_driver(tmp_path: Path) -> None:
    env = {
        **up_env(tmp_path, "PORT"),
        "PVE_DRIVER": "api",
        "PVE_API_URL": "https://192.0.2.10:8006",
        "PVESIM_DELAY_SCALE": "0",
        "VM_SSH_POLL": "0.02",
    }
    proc, _ = await start([CAIRN, "serve", "vm", "--sim"], tmp_path, env)
    try:
        url = f"http://127.0.0.1:{env['PORT']}/api"
        async with aiohttp.ClientSession() as http:
            body = {"os": "debian", "version": "12", "id": 120, "node": "pve3"}
            async with http.post(f"{url}/vm/install", json=body) as resp:
                text = await resp.text()
            assert (
                resp.status == 200 and '"status":"success","message":"[*] User: debian' in text
            ), text[-500:]
            async with http.get(f"{url}/vm/list") as resp:
                listing = await resp.json()
        assert listing["simulated"] is True
        assert [(r["vmid"], r["node"]) for r in listing["list"]] == [(120, "pve3")]
        log = (tmp_path / "data" / "pvesim" / "commands.log").read_text().splitlines()
        argvs = [(e["node"], e["argv"]) for e in map(json.loads, log)]
        created = [(n, a) for n, a in argvs if a[:2] == ["qm", "create"]]
        assert len(created) == 1 and created[0][0] == "pve3"  # made on pve3 itself
        assert any(v.startswith("local-lvm:0,import-from=") for v in created[0][1])
        assert not [a for _, a in argvs if a[:3] in (["qm", "disk", "import"], ["qm", "migrate"])]
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.communicate(), 60)
