"""POST /upload over real HTTP: fields, messages, statuses, versions."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.platform import Runtime
from tests.functions.conftest import Service, start_service

GOOD = {"path": "tools/hello", "language": "python", "code": "return 'hi'"}


async def test_upload_answers_path_language_and_version(service: Service) -> None:
    reply = await service.post("/upload", GOOD)
    assert reply.status == 200
    body = reply.json()
    assert body["path"] == "tools/hello" and body["language"] == "python"
    assert isinstance(body["version"], int) and body["version"] > 1_600_000_000_000


async def test_leading_slash_is_stripped(service: Service) -> None:
    body = await service.upload("/tools/x", "javascript", "return 1")
    assert body["path"] == "tools/x"


async def test_versions_of_a_path_strictly_increase(service: Service) -> None:
    versions = [(await service.upload("p", "python", f"return {i}"))["version"] for i in range(5)]
    assert versions == sorted(set(versions)) and len(versions) == 5


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"language": "python", "code": "x"},
        {"path": "a", "code": "x"},
        {"path": "a", "language": "python"},
        {"path": 5, "language": "python", "code": "x"},
        {"path": "a", "language": ["python"], "code": "x"},
        {"path": "a", "language": "python", "code": {"x": 1}},
        {"path": "", "language": "python", "code": "x"},
        {"path": "a", "language": "python", "code": ""},
        [GOOD],
        "just a string",
        None,
    ],
)
async def test_missing_or_mistyped_fields(service: Service, body: object) -> None:
    reply = await service.post("/upload", body)
    assert (reply.status, reply.content_type, reply.text) == (
        400,
        "text/plain",
        "Invalid request payload",
    )


@pytest.mark.parametrize("raw", [b"{", b"", b'{"path": "a",}', b"\xff\xfe", b'{"path": NaN}'])
async def test_malformed_json(service: Service, raw: bytes) -> None:
    reply = await service.post("/upload", raw=raw)
    assert (reply.status, reply.text) == (400, "Invalid request payload")


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("../etc/passwd", "python"),
        ("a/../../b", "python"),
        ("a/..", "python"),
        ("a..b", "python"),
        ("/", "python"),
        ("a\nb", "python"),
        ("a\x00b", "python"),
        ("a", "ruby"),
        ("a", "Python"),
        ("a", "ts"),
    ],
)
async def test_bad_path_or_unsupported_language(service: Service, path: str, language: str) -> None:
    reply = await service.post("/upload", {"path": path, "language": language, "code": "x"})
    assert (reply.status, reply.content_type, reply.text) == (400, "text/plain", "Invalid path")


async def test_body_over_code_max_size(service: Service) -> None:
    big = {**GOOD, "code": "#" * 9000}  # the tests run with CODE_MAX_SIZE=8192
    reply = await service.post("/upload", big)
    assert reply.status == 400
    assert reply.text == "request body is larger than CODE_MAX_SIZE (8192 bytes)"


async def test_body_over_the_limit_without_a_length_is_refused_too(service: Service) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 1000

    async with service.session.post("/upload", data=chunks()) as response:
        assert response.status == 400
        assert (await response.text()).startswith("request body is larger than CODE_MAX_SIZE")


async def test_storage_failure_is_500(runtime: Runtime) -> None:
    # The code store's directory cannot be created: a file sits where it should be.
    functions_dir = Path(runtime.data_dir) / "functions"
    functions_dir.mkdir(parents=True, exist_ok=True)
    (functions_dir / "code").write_text("not a directory")
    async with start_service(runtime) as service:
        reply = await service.post("/upload", GOOD)
        assert (reply.status, reply.content_type, reply.text) == (
            500,
            "text/plain",
            "Failed to save function",
        )
        # Nothing was recorded: the path stays unknown.
        run = await service.post("/run/tools/hello", {})
        assert (run.status, run.text) == (404, "script not found")
