"""What is stored, over HTTP: list the functions, read a version's code, delete a function,
and the runtimes each language runs on."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from actors.platform import Runtime
from tests.conftest import wait_for
from tests.functions.conftest import Service


async def get(service: Service, path: str) -> tuple[int, str, Any]:
    async with service.session.get(path) as resp:
        text = await resp.text()
        body = await resp.json() if resp.content_type == "application/json" else text
        return resp.status, resp.headers.get("X-Function-Version", ""), body


async def test_list_describe_and_read_the_code_of_any_version(service: Service) -> None:
    assert await get(service, "/functions") == (200, "", {"count": 0, "functions": []})
    first = await service.upload("tools/add", "python", "return 1 + 1")
    second = await service.upload("tools/add", "javascript", "return 1 + 2")
    other = await service.upload("hello", "typescript", "return 'hi' as string")
    _, _, listing = await get(service, "/functions")
    assert listing == {
        "count": 2,
        "functions": [
            {"path": "hello", "language": "typescript", "latest": other["version"],
             "versions": [other["version"]]},
            {"path": "tools/add", "language": "javascript", "latest": second["version"],
             "versions": [first["version"], second["version"]]},
        ],
    }  # fmt: skip
    status, _, detail = await get(service, "/functions/tools/add")
    assert status == 200
    assert [(v["version"], v["language"], v["size"]) for v in detail["versions"]] == [
        (first["version"], "python", 12),
        (second["version"], "javascript", 12),
    ]
    assert await get(service, "/code/tools/add") == (200, str(second["version"]), "return 1 + 2")
    old = f"/code/tools/add?version={first['version']}"
    assert await get(service, old) == (200, str(first["version"]), "return 1 + 1")
    assert await get(service, "/code/tools/add?version=5") == (404, "", "assign version not found")
    assert await get(service, "/code/nope") == (404, "", "script not found")
    assert await get(service, "/functions/nope") == (404, "", "script not found")


async def test_a_deleted_function_is_gone_with_its_code_and_its_path_can_be_used_again(
    service: Service, runtime: Runtime
) -> None:
    gone = await service.upload("gone", "python", "return 'old'")
    kept = await service.upload("kept", "python", "return 'shared'")
    await service.upload("gone", "python", "return 'shared'")  # the same code as "kept"
    root = runtime.data_dir / "functions" / "code"

    def code_files() -> set[str]:
        return {p.name for p in root.rglob("*") if p.is_file()}

    before = code_files()
    async with service.session.delete("/functions/gone") as resp:
        assert (resp.status, await resp.json()) == (200, {"path": "gone", "deleted": 2})
    assert len(code_files()) == len(before) - 1  # 'old' went; the shared code stays for 'kept'
    reply = await service.post("/run/gone", {})
    assert (reply.status, reply.text) == (404, "script not found")
    assert (await service.post("/run/kept", {})).json()["data"] == "shared"
    async with service.session.delete("/functions/gone") as resp:
        assert (resp.status, await resp.text()) == (404, "script not found")
    again = await service.upload("gone", "python", "return 'new'")
    assert again["version"] > gone["version"]  # a version number never names two codes
    assert (await service.post("/run/gone", {})).json()["data"] == "new"
    assert kept["path"] == "kept"


async def test_paths_that_climb_out_find_nothing(service: Service) -> None:
    await service.upload("safe", "python", "return 1")
    for path in ("/functions/..%2F..%2Fetc%2Fpasswd", "/code/../../etc/passwd", "/code/%00"):
        status, _, _ = await get(service, path)
        assert status == 404, path
    async with service.session.delete("/functions/..%2Fsafe") as resp:
        assert resp.status == 404
    assert (await service.post("/run/safe", {})).json()["data"] == 1


async def test_runtimes_name_each_language_and_its_version(service: Service) -> None:
    status, _, runtimes = await get(service, "/runtimes")
    assert status == 200
    assert [r["language"] for r in runtimes] == ["python", "javascript", "typescript"]
    assert all(re.fullmatch(r"\d+\.\d+(\.\d+)?", r["version"]) for r in runtimes), runtimes
    assert runtimes[2]["transpiler"].startswith("esbuild ")


async def test_each_run_leaves_one_journal_line_with_its_outcome(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cairn.journal")
    stored = await service.upload("tools/div", "python", "return 1 / event['d']")
    assert (await service.post("/run/tools/div", {"input": {"d": 2}})).status == 200
    assert (await service.post("/run/tools/div", {"input": {"d": 0}})).status == 500
    assert (await service.run_now("javascript", "return 1")).status == 200

    def runs() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if " in " in r.getMessage()
            and r.name == "cairn.journal"
            and r.getMessage().startswith("function ")
            and "stored" not in r.getMessage()
        ]

    await wait_for(lambda: len(runs()) == 3, what="three run lines")
    lines = runs()
    version = f"tools/div version {stored['version']}"
    by = r", asked by ip:127\.0\.0\.1"  # who asked: no tokens, so the client's address
    assert re.fullmatch(rf"function {version} \(python\): ok in \d+ ms{by}", lines[0])
    assert re.fullmatch(
        rf"function {version} \(python\): failed: ZeroDivisionError: division by zero"
        rf" in \d+ ms{by}",
        lines[1],
    )
    assert re.fullmatch(rf"function /run-now \(javascript\): ok in \d+ ms{by}", lines[2])
