"""``CAIRN_SERVICES`` leaves services out of ``cairn up``; a host without search loads no
embedding model (issue 32: a VM-only host needs none)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aiohttp
import pytest

from actors.config import ConfigError
from gateway import server as services
from tests.ports import free_port
from tests.processes import until_ready


def names(env: dict[str, str]) -> list[str]:
    return [service.name for service in services.chosen(env)]


def test_unset_or_empty_is_every_service() -> None:
    every = [service.name for service in services.available()]
    assert names({}) == names({"CAIRN_SERVICES": " "}) == every
    assert "search" in every


def test_a_list_keeps_start_up_order_and_the_status_service() -> None:
    assert names({"CAIRN_SERVICES": "functions, VM"}) == ["status", "vm", "functions"]
    assert names({"CAIRN_SERVICES": "images,images"}) == ["status", "images"]


@pytest.mark.parametrize("value", ["vm,serach", "status", ",", "vm;functions"])
def test_anything_else_is_a_configuration_error(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        services.chosen({"CAIRN_SERVICES": value})
    assert str(caught.value) == (
        f"CAIRN_SERVICES: a comma-separated list of vm, functions, search, images (got {value!r})"
    )


def mapped(pid: int) -> str:
    """Every file a process has mapped (its libraries and mmapped files)."""
    return Path(f"/proc/{pid}/maps").read_text()


async def test_up_without_search_loads_no_model(tmp_path: Path) -> None:
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NATS_", "CAIRN_", "PORT", "SEARCH_", "PVE_", "MAIN_NODE"))
    }
    env.update(
        CAIRN_SERVICES="vm,functions",
        CAIRN_DATA=str(tmp_path / "data"),
        CAIRN_PORT=str(port),
        VM_PORT=str(free_port()),
        FUNCTIONS_PORT=str(free_port()),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        HOME=str(tmp_path),
    )
    async with until_ready(
        str(Path(sys.executable).parent / "cairn"),
        "up",
        what="cairn up with CAIRN_SERVICES",
        cwd=tmp_path,
        env=env,
    ) as cairn:
        started = [line.split()[1].decode() for line in cairn.output if b" on http://" in line]
        assert started == ["console", "vm", "functions"]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/status") as resp,
        ):
            assert resp.status == 200
            assert "search" not in await resp.text()
        maps = mapped(cairn.proc.pid)
        for part in ("onnxruntime", "tokenizers", "model.safetensors", "openvino"):
            assert part not in maps
        assert not (tmp_path / "cache" / "cairn").exists()
