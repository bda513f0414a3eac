"""A storage's status through both adapters of the port against the simulator: the same typed
answer, Proxmox's `shared` flag included (which the CLI reads with pvesh: `pvesm status` does
not print it), and an unknown storage as the port's NotFound."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from pvesim.cluster import SimCluster

from actors.vm import pve
from actors.vm.cli.adapter import CliPve
from actors.vm.cli.transport import LocalTransport


async def test_the_shared_flag_is_proxmoxs_not_the_types(sim: SimCluster, port: pve.Pve) -> None:
    sim.add_storage("san", "lvm", content="images", shared=True)  # `pvesm set san --shared 1`
    sim.add_storage("nas", "nfs", content="images")  # pve-storage forces it for nfs
    sim.add_storage("files", "dir", content="images")
    for name in ("san", "nas", "files"):
        sim.grant_api(f"/storage/{name}", ["Datastore.Audit"])
    san = await port.storage_status("pve1", "san")
    assert (san.type, san.content, san.usable, san.shared) == ("lvm", ("images",), True, True)
    assert san.total == 832888832 * 1024 and san.avail == san.total
    assert (await port.storage_status("pve1", "nas")).shared is True
    assert (await port.storage_status("pve1", "files")).shared is False
    lvm = await port.storage_status("pve1", "local-lvm")
    assert (lvm.type, lvm.content, lvm.shared) == ("lvmthin", ("images", "rootdir"), False)


async def test_an_unknown_storage_is_not_found(sim: SimCluster, port: pve.Pve) -> None:
    sim.grant_api("/storage/nosuch", ["Datastore.Audit"])  # else the token's 403 comes first
    with pytest.raises(pve.NotFound) as caught:
        await port.storage_status("pve1", "nosuch")
    assert "No such storage" in caught.value.text


async def test_a_node_with_an_older_command_helper_is_read_with_pvesm(
    sim: SimCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgraded cairn before the nodes' cairn_allow.py is: the helper refuses the pvesh
    read as it did (exit 126, its own words), and the storage is read as before, its `shared`
    flag the one its type implies, with one warning saying what to copy."""
    sim.add_storage("nas", "nfs", content="images")
    sim.add_storage("san", "lvm", content="images", shared=True)
    old = tmp_path / "bin"
    old.mkdir()
    real = sim.bin_dir() / "pvesh"
    (old / "pvesh").write_text(
        "#!/bin/sh\n"
        'case "$2" in */storage/*/status)\n'
        '  echo "cairn_allow: refused: pvesh: only the reads cairn makes (cluster resources, '
        "a node's status and bridges, a VM's tasks)\" >&2; exit 126;;\n"
        "esac\n"
        f'exec {real} "$@"\n'
    )
    (old / "pvesh").chmod(0o755)
    env = {**sim.env(), "PATH": f"{old}{os.pathsep}{sim.env()['PATH']}"}
    port = CliPve({"pve1": LocalTransport(env)}, "pve1")
    try:
        caplog.set_level(logging.WARNING, logger="actors.vm.cli.adapter")
        nas = await port.storage_status("pve1", "nas")
        assert (nas.type, nas.usable, nas.shared) == ("nfs", True, True)
        san = await port.storage_status("pve1", "san")
        assert (san.type, san.shared) == ("lvm", False)  # the flag is not printed: by type
        lvm = await port.storage_status("pve1", "local-lvm")
        assert (lvm.type, lvm.usable, lvm.shared) == ("lvmthin", True, False)
        with pytest.raises(pve.NotFound):
            await port.storage_status("pve1", "nosuch")
    finally:
        await port.close()
    warned = [r.getMessage() for r in caplog.records if "cairn_allow.py" in r.getMessage()]
    assert len(warned) == 1, warned
    assert "copied to the nodes" in warned[0]
