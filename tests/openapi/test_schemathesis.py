"""schemathesis against each running service, as its own tests start it (real NATS, event
store and HTTP; the VM service on the simulated cluster): every answer is documented (status,
5xx included, content type, headers, body schema), invalid input is refused, and no request
makes the service log a crash.

A bounded run: ``CAIRN_SCHEMATHESIS_EXAMPLES`` examples per operation (10) with a fixed seed
(``CAIRN_SCHEMATHESIS_SEED``, 1), so CI sees the same cases every time; raise both for a
longer hunt. Set ``CAIRN_SCHEMATHESIS_REPORT`` to a folder for its HAR of every exchange.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.images.imagedata import encoded
from tests.openapi.conftest import Running

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# Settings beyond the command line, per service.
CONFIG = {
    "vm": Path(__file__).with_name("schemathesis-vm.toml"),
    "status": Path(__file__).with_name("schemathesis-status.toml"),
}
CHECKS = (
    "status_code_conformance",  # no undocumented status, 5xx included
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",  # SSE events included, one by one
    "negative_data_rejection",  # what the document says is invalid is refused
    "missing_required_header",
    "unsupported_method",  # 405 for a method a path does not take ...
)
# ... except on the image service, whose contract answers 404 `Not Found` there.
CHECKS_OF = {"images": tuple(c for c in CHECKS if c != "unsupported_method")}
# The stateful phase follows links between operations; the documents define none.
PHASES = "examples,coverage,fuzzing"


async def seed(service: Running) -> None:
    """What the documents' examples name (VM 101, the function tools/add, the image
    photos/2026/cat.jpg), so that the examples reach something that exists."""
    async with aiohttp.ClientSession(service.url) as http:
        if service.name == "vm":
            body = {"os": "debian", "version": "12", "id": 101}
            async with http.post("/api/vm/install", json=body) as response:
                assert response.status == 200
                assert b'"vm_id":101' in await response.read()
        elif service.name == "functions":
            code = "return sum(event['numbers'])"
            body = {"path": "tools/add", "language": "python", "code": code}
            async with http.post("/upload", json=body) as response:
                assert response.status == 200
        elif service.name == "images":
            form = aiohttp.FormData()
            form.add_field("filepath", encoded(size=(64, 48)), filename="cat.jpg")
            async with http.post("/upload/photos/2026", data=form) as response:
                assert response.status == 201


async def schemathesis(service: Running, cwd: Path) -> tuple[int, str]:
    report = os.environ.get("CAIRN_SCHEMATHESIS_REPORT")
    reporting = ["--report", "har", "--report-dir", f"{report}/{service.name}"] if report else []
    config = ["--config-file", str(CONFIG[service.name])] if service.name in CONFIG else []
    proc = await asyncio.create_subprocess_exec(
        str(SCHEMATHESIS),
        *config,
        "--no-color",
        "run",
        service.document_url,
        "--checks",
        ",".join(CHECKS_OF.get(service.name, CHECKS)),
        "--phases",
        PHASES,
        "--max-examples",
        os.environ.get("CAIRN_SCHEMATHESIS_EXAMPLES", "10"),
        "--seed",
        os.environ.get("CAIRN_SCHEMATHESIS_SEED", "1"),
        "--generation-database",
        "none",  # nothing written beside the tests
        "--request-timeout",
        "60",
        "--workers",
        "1",
        *reporting,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def crashes(records: list[logging.LogRecord]) -> list[str]:
    """Log records of a failure of ours: a traceback, or an error of aiohttp or asyncio (a
    handler that raised, a task whose exception nobody read)."""
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in records
        if r.exc_info or (r.levelno >= logging.ERROR and r.name.startswith(("aiohttp", "asyncio")))
    ]


@pytest.mark.slow
@pytest.mark.usefixtures("cairn_log_filters")
async def test_schemathesis_finds_nothing(
    running: Running, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await seed(running)
    code, report = await schemathesis(running, tmp_path)
    assert code == 0, report
    assert "Test cases:" in report and " passed" in report, report
    assert crashes(caplog.records) == []
