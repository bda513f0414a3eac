"""Stream mode over real HTTP: SSE headers, event order, live lines, clean ends, 503."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from actors.platform import Runtime
from tests.conftest import wait_for
from tests.functions.conftest import Service, start_service


async def events_of(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """Each ``data:`` line as the Stream event object it holds; anything else is an error."""
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            continue
        assert line.startswith("data: "), line
        event = json.loads(line[len("data: ") :])
        assert set(event) == {"event", "data", "type"} and isinstance(event["data"], str)
        yield event


async def stream(service: Service, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with service.session.post(path, json={**body, "stream": True}) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["Connection"] == "keep-alive"
        return [event async for event in events_of(response)]


async def test_logs_then_result_then_the_end(service: Service) -> None:
    code = "print('one')\nprint('two')\nreturn {'n': 3}"
    got = await stream(service, "/run-now", {"language": "python", "code": code})
    assert got == [
        {"event": "log", "data": "one", "type": "text"},
        {"event": "log", "data": "two", "type": "text"},
        {"event": "result", "data": '{"n":3}', "type": "json"},
    ]


async def test_stream_of_a_stored_function_and_each_result_type(service: Service) -> None:
    await service.upload("s", "javascript", "console.log(input.x); return input.x")
    for value, expected in [('"hi"', ("hi", "string")), ("4.5", ("4.5", "number"))]:
        got = await stream(service, "/run/s", {"input": json.dumps({"x": json.loads(value)})})
        assert got[-1] == {"event": "result", "data": expected[0], "type": expected[1]}
        assert got[0]["event"] == "log"


async def test_stderr_lines_are_logs_and_a_warning_does_not_kill_the_run(
    service: Service,
) -> None:
    code = "console.warn('careful'); console.error('still fine'); return 'done'"
    got = await stream(service, "/run-now", {"language": "javascript", "code": code})
    logs = sorted(e["data"] for e in got if e["event"] == "log")
    assert logs == ["careful", "still fine"]
    assert got[-1] == {"event": "result", "data": "done", "type": "string"}


async def test_error_ends_the_stream(service: Service) -> None:
    code = "print('before')\nraise RuntimeError('broken')"
    got = await stream(service, "/run-now", {"language": "python", "code": code})
    assert got[0] == {"event": "log", "data": "before", "type": "text"}
    assert got[-1] == {"event": "error", "data": "RuntimeError: broken", "type": "text"}
    assert all(e["event"] == "log" for e in got[:-1])


async def test_time_out_in_stream_mode_is_an_error_event(runtime: Runtime) -> None:
    code = "print('spinning')\nwhile True:\n    pass"
    async with start_service(runtime, RUN_TIMEOUT="1") as service:
        got = await stream(service, "/run-now", {"language": "python", "code": code})
    assert got[-1] == {"event": "error", "data": "timed out after 1 s", "type": "text"}
    # The second counts from the sandbox's start: on a loaded machine the interpreter may not
    # reach its first line in time, and then the stream holds the error alone.
    assert got[:-1] in ([], [{"event": "log", "data": "spinning", "type": "text"}])


async def test_a_log_arrives_while_the_script_still_runs(service: Service) -> None:
    runner = service.host.runner
    assert runner is not None
    code = "print('first', flush=True)\nimport time\ntime.sleep(60)"
    body = {"language": "python", "code": code, "stream": True}
    async with service.session.post("/run-now", json=body) as response:
        first = await anext(events_of(response))
        assert first == {"event": "log", "data": "first", "type": "text"}
        # The script is still running: its process is alive in a runner slot right now.
        assert runner.pending == 1 and runner._running
    # The client left: the run is cancelled and its processes are gone.
    await wait_for(lambda: runner.settled, what="the abandoned run to be cancelled")
    await wait_for(lambda: not runner.leftovers(), timeout=5, what="its processes to be gone")
    assert (await service.run_now("python", "return 'next'")).json()["data"] == "next"


async def test_errors_before_the_stream_are_plain_statuses(service: Service) -> None:
    async with service.session.post("/run/missing", json={"stream": True}) as response:
        assert (response.status, await response.text()) == (404, "script not found")
    body = {"language": "nope", "code": "x", "stream": True}
    async with service.session.post("/run-now", json=body) as response:
        assert (response.status, await response.text()) == (
            400,
            "unsupported language: use python, javascript or typescript",
        )


async def test_a_full_queue_answers_503_at_once(service: Service) -> None:
    runner = service.host.runner
    assert runner is not None
    capacity = runner.capacity  # RUN_CONCURRENCY=2 + RUN_QUEUE=2 in the tests
    body = {"language": "python", "code": "import time\ntime.sleep(60)", "stream": True}
    held = [service.session.post("/run-now", json=body) for _ in range(capacity)]
    responses = await asyncio.gather(*(h.__aenter__() for h in held))
    try:
        await wait_for(lambda: runner.pending == capacity, what="the queue to fill")
        reply = await service.run_now("python", "return 1")
        assert (reply.status, reply.content_type, reply.text) == (
            503,
            "text/plain",
            "run queue is full",
        )
        busy_stream = await service.post("/run-now", {**body, "code": "return 1"})
        assert (busy_stream.status, busy_stream.text) == (503, "run queue is full")
    finally:
        for response in responses:
            response.close()
    await wait_for(lambda: runner.pending == 0, what="the held runs to be cancelled")
    assert (await service.run_now("python", "return 'free'")).json()["data"] == "free"
