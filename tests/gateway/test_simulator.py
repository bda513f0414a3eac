"""cairn runs the simulated cluster as a child program (gateway/apps/simulator.py): its
environment read from what it prints, the program gone when the VM service stops, and a
simulator that cannot start said plainly."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import asyncssh
import pytest

from events.proc import command_lines
from gateway.apps.simulator import SimulatorFailed, simulated_cluster
from tests.conftest import wait_for
from tests.gateway.test_cli_up import start, up_env

CAIRN = str(Path(sys.executable).parent / "cairn")


def simulators(root: Path) -> list[int]:
    """The pids of simulator programs running on ``root``."""
    return [
        pid
        for pid, args in command_lines()
        if "pvesim.cli" in args and "sim" in args and str(root) in args
    ]


async def test_the_simulator_runs_as_a_program_and_stops_with_its_owner(tmp_path: Path) -> None:
    root = tmp_path / "pvesim"
    async with simulated_cluster(root, 0.0) as env:
        assert env["MAIN_NODE"] == "pve1" and env["PVESIM_ROOT"] == str(root)
        assert env["PATH"].startswith(str(root / "bin" / "pve1") + os.pathsep)
        [pid] = simulators(root)
        assert pid != os.getpid()
        async with await asyncssh.connect(
            "127.0.0.2", int(env["PVE_SSH_PORT"]), username="root",
            client_keys=[env["PVE_SSH_KEY"]], known_hosts=env["PVE_KNOWN_HOSTS"],
        ) as conn:  # fmt: skip
            assert (await conn.run("pvesm status")).exit_status == 0
    assert simulators(root) == []


async def test_a_simulator_that_cannot_start_is_a_plain_error(tmp_path: Path) -> None:
    root = tmp_path / "taken"
    root.write_text("a file where the state directory would go\n")
    with pytest.raises(SimulatorFailed) as caught:
        async with simulated_cluster(root, 0.0):
            pytest.fail("the simulator started on a file")
    assert str(caught.value) == (
        f"the simulated cluster did not start in {root} (its errors are above)"
    )
    assert simulators(root) == []


async def test_a_killed_cairn_takes_its_simulator_down(tmp_path: Path) -> None:
    env = up_env(tmp_path, "PORT")
    proc, lines = await start([CAIRN, "serve", "vm", "--sim"], tmp_path, env)
    root = (tmp_path / "data" / "pvesim").resolve()
    try:
        assert f"driving the simulated cluster in {root}" in "".join(lines)
        assert len(simulators(root)) == 1
    finally:
        proc.kill()
        await proc.wait()
    await wait_for(lambda: not simulators(root), timeout=30, what="the simulator to end")
