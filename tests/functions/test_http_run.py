"""POST /run/*targetPath and /run-now over real HTTP: results, versions, errors, time-outs."""

import asyncio
import json

import pytest
from yarl import URL

from actors.platform import Runtime
from tests.conftest import wait_for
from tests.functions.conftest import Service, start_service
from tests.functions.test_hardening import processes_named

TYPE_CASES = {
    "python": {
        "string": ("return 'hi'", "hi"),
        "number": ("return 42", 42),
        "json": ("return {'a': [1, 2]}", {"a": [1, 2]}),
        "array": ("return [1, 'x']", [1, "x"]),
        "text": ("print('plain words')", "plain words"),
    },
    "javascript": {
        "string": ("return 'hi'", "hi"),
        "number": ("return 42", 42),
        "json": ("return {a: [1, 2]}", {"a": [1, 2]}),
        "array": ("return [1, 'x']", [1, "x"]),
        "text": ("console.log('plain words')", "plain words"),
    },
    "typescript": {
        "string": ("const s: string = 'hi'; return s", "hi"),
        "number": ("const n: number = 42; return n", 42),
        "json": ("type T = {a: number[]}; const t: T = {a: [1, 2]}; return t", {"a": [1, 2]}),
        "array": ("return [1, 'x'] as (number | string)[]", [1, "x"]),
        "text": ("console.log('plain words' as string)", "plain words"),
    },
}
EXPECTED_TYPE = {
    "string": "string",
    "number": "number",
    "json": "json",
    "array": "json",
    "text": "text",
}


@pytest.mark.parametrize("language", list(TYPE_CASES))
async def test_result_types_per_language(service: Service, language: str) -> None:
    for kind, (code, data) in TYPE_CASES[language].items():
        reply = await service.run_now(language, code)
        assert reply.status == 200, (kind, reply)
        assert reply.json() == {"data": data, "type": EXPECTED_TYPE[kind]}, kind


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "return [event['n'], input['n'], event is input]"),
        ("javascript", "return [event.n, input.n, event === input]"),
        ("typescript", "return [event.n as number, input.n, event === input]"),
    ],
)
async def test_event_and_input(service: Service, language: str, code: str) -> None:
    reply = await service.run_now(language, code, input='{"n": 7}')
    assert reply.json() == {"data": [7, 7, True], "type": "json"}


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "print('{\"not\": \"this\"}')\nprint(42)\nreturn 'returned'"),
        (
            "javascript",
            "console.log(JSON.stringify({not: 'this'})); console.log(42); return 'returned'",
        ),
    ],
)
async def test_prints_plus_return(service: Service, language: str, code: str) -> None:
    assert (await service.run_now(language, code)).json() == {"data": "returned", "type": "string"}


async def test_python_multiline_string(service: Service) -> None:
    code = 'def f():\n    return """a\n  b\nc"""\nreturn f()'
    assert (await service.run_now("python", code)).json() == {"data": "a\n  b\nc", "type": "string"}


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "import asyncio\nawait asyncio.sleep(0)\nreturn 'ok'"),
        ("javascript", "const v = await Promise.resolve('ok'); return v"),
        ("typescript", "const v: string = await Promise.resolve('ok'); return v"),
    ],
)
async def test_top_level_await(service: Service, language: str, code: str) -> None:
    assert (await service.run_now(language, code)).json() == {"data": "ok", "type": "string"}


@pytest.mark.parametrize(
    ("language", "code", "message"),
    [
        ("python", "return 1 / 0", "failed to run: ZeroDivisionError: division by zero"),
        ("javascript", "null.x",
         "failed to run: TypeError: Cannot read properties of null (reading 'x')"),
        ("typescript", "throw new RangeError('too far' as string)",
         "failed to run: RangeError: too far"),
        ("typescript", "const x: = 1", "failed to run: TypeScript: Unexpected \"=\" (line 1)"),
    ],
)  # fmt: skip
async def test_runtime_errors_with_their_message(
    service: Service, language: str, code: str, message: str
) -> None:
    reply = await service.run_now(language, code)
    assert (reply.status, reply.content_type, reply.text) == (500, "text/plain", message)


async def test_time_out(runtime: Runtime) -> None:
    async with start_service(runtime, RUN_TIMEOUT="1") as service:
        reply = await service.run_now("python", "while True:\n    pass")
        assert (reply.status, reply.text) == (500, "failed to run: timed out after 1 s")
        assert (await service.run_now("python", "return 'alive'")).json()["data"] == "alive"


@pytest.mark.parametrize("value", [{"n": 7, "s": "x"}, [1, 2], 3.5, True, '{"n": 7, "s": "x"}'])
async def test_input_may_be_a_json_value_or_the_specs_json_string(
    service: Service, value: object
) -> None:
    reply = await service.post(
        "/run-now", {"language": "python", "code": "return input", "input": value}
    )
    assert reply.status == 200, reply.text
    expected = json.loads(value) if isinstance(value, str) else value
    assert reply.json()["data"] == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"language": "cobol", "code": "x"},
            "unsupported language: use python, javascript or typescript",
        ),
        ({"code": "return 1"}, "unsupported language: use python, javascript or typescript"),
        ({"language": "python"}, "code is required"),
        ({"language": "python", "code": ""}, "code is required"),
        ({"language": "python", "code": "   \n\t"}, "code is required"),
        ({"language": "python", "code": 5}, "Invalid request payload"),
        ({"language": 5, "code": "x"}, "Invalid request payload"),
        ({"language": "python", "code": "x", "stream": "yes"}, "Invalid request payload"),
        ({"language": "python", "code": "x", "input": "{nope"}, "input is not valid JSON"),
        ([], "Invalid request payload"),
    ],
)
async def test_run_now_bad_requests(service: Service, body: object, message: str) -> None:
    reply = await service.post("/run-now", body)
    assert (reply.status, reply.content_type, reply.text) == (400, "text/plain", message)


async def test_run_now_malformed_and_oversized_bodies(service: Service) -> None:
    assert (await service.post("/run-now", raw=b"{not json")).status == 400
    big = await service.run_now("python", "#" * 9000)
    assert (big.status, big.text) == (400, "request body is larger than CODE_MAX_SIZE (8192 bytes)")


# -- stored functions ----------------------------------------------------------------------


async def test_run_latest_and_exact_versions(service: Service) -> None:
    python, javascript = "return event['a'] + event['b']", "return `${event.a}${event.b}`"
    first = (await service.upload("math/add", "python", python))["version"]
    second = (await service.upload("math/add", "javascript", javascript))["version"]
    body = {"input": json.dumps({"a": 1, "b": 2})}
    assert (await service.post("/run/math/add", body)).json() == {"data": "12", "type": "string"}
    exact = await service.post(f"/run/math/add?version={first}", body)
    assert exact.json() == {"data": 3, "type": "number"}  # language belongs to the version
    assert (await service.post(f"/run//math/add?version={second}", body)).json()["data"] == "12"


@pytest.mark.parametrize("version", ["abc", "1.5", "", "0x10", "99999999999999999999", " 1"])
async def test_non_integer_version_means_latest(service: Service, version: str) -> None:
    await service.upload("v", "python", "return 'old'")
    await service.upload("v", "python", "return 'latest'")
    reply = await service.post(f"/run/v?version={version}", {})
    assert reply.json() == {"data": "latest", "type": "string"}


@pytest.mark.parametrize("version", ["1", "-5", "0", "9223372036854775807"])
async def test_unknown_version(service: Service, version: str) -> None:
    await service.upload("v", "python", "return 1")
    reply = await service.post(f"/run/v?version={version}", {})
    assert (reply.status, reply.content_type, reply.text) == (
        404,
        "text/plain",
        "assign version not found",
    )


@pytest.mark.parametrize(
    "path", ["/run/nope", "/run/", "/run/v/%2e%2e/v", "/run/%2e%2e%2fetc", "/run/v%00"]
)
async def test_unknown_script(service: Service, path: str) -> None:
    await service.upload("v", "python", "return 1")
    url = URL(f"http://127.0.0.1:{service.port}{path}", encoded=True)
    async with service.session.post(url, data=b"{}") as response:
        assert (response.status, await response.text()) == (404, "script not found")


async def test_run_body_rules(service: Service) -> None:
    await service.upload("echo", "python", "return input")
    # The body must be JSON ({} when there is no input): an empty one is refused as the
    # original refuses it.
    for empty in (b"", b"  \n"):
        async with service.session.post("/run/echo", data=empty) as response:
            assert (response.status, await response.text()) == (400, "bad request: EOF")
            assert response.content_type == "text/plain"
    assert (await service.post("/run/echo", {})).json() == {"data": {}, "type": "json"}
    # code and language in the body are overwritten by the stored function's.
    reply = await service.post(
        "/run/echo", {"code": "return 'evil'", "language": "javascript", "input": "[1]"}
    )
    assert reply.json() == {"data": [1], "type": "json"}
    for raw in (b"{", b"[1, 2]", b'"s"'):
        bad = await service.post("/run/echo", raw=raw)
        assert (bad.status, bad.content_type) == (400, "text/plain")
    big = await service.post("/run/echo", {"input": json.dumps("x" * 9000)})
    assert (big.status, big.text) == (400, "request body is larger than CODE_MAX_SIZE (8192 bytes)")
    not_json = await service.post("/run/echo", {"input": "{'single': 1}"})
    assert (not_json.status, not_json.text) == (400, "input is not valid JSON")


async def test_stored_run_failure_is_500_with_prefix(service: Service) -> None:
    await service.upload("boom", "python", "raise KeyError('k')")
    reply = await service.post("/run/boom", {})
    assert (reply.status, reply.text) == (500, "failed to run: KeyError: 'k'")


async def test_registry_is_rebuilt_from_the_store(runtime: Runtime) -> None:
    async with start_service(runtime) as service:
        first = (await service.upload("keep", "python", "return 'one'"))["version"]
        await service.upload("keep", "python", "return 'two'")
    async with start_service(runtime) as again:
        assert (await again.post("/run/keep", {})).json()["data"] == "two"
        old = await again.post(f"/run/keep?version={first}", {})
        assert old.json()["data"] == "one"
        newer = (await again.upload("keep", "python", "return 'three'"))["version"]
        assert newer > first


async def test_a_broken_sandbox_answers_500_and_never_hangs(runtime: Runtime) -> None:
    async with start_service(runtime, BWRAP="/nonexistent/bwrap") as service:
        reply = await service.run_now("python", "return 1")
        assert (reply.status, reply.content_type) == (500, "text/plain")
        assert reply.text.startswith("failed to run: exited with status 127")
        assert "/nonexistent/bwrap" in reply.text


async def test_without_waiting_sandboxes_each_run_starts_cold(runtime: Runtime) -> None:
    async with start_service(runtime, RUN_WARM="0") as service:
        runner = service.host.runner
        assert runner is not None
        cases = [("python", "return 'py'"), ("typescript", "return 'ts' as string")]
        for language, code in cases:
            reply = await service.run_now(language, code)
            assert reply.json() == {"data": code.split("'")[1], "type": "string"}
        await wait_for(lambda: runner.settled, what="the runner to be idle")
        assert runner.leftovers() == set()


async def test_fewer_waiting_sandboxes_than_slots_still_fill_every_slot(runtime: Runtime) -> None:
    # RUN_WARM below RUN_CONCURRENCY: a run that finds its runtime's pool empty waits for a
    # sandbox being started (the pool refills as soon as one is taken), never for a run to end.
    mark = "cairn-slots"
    code = (
        "import ctypes, time\n"
        f"ctypes.CDLL(None).prctl(15, b'{mark}', 0, 0, 0)\n"  # PR_SET_NAME: the host sees it
        "time.sleep(input['seconds'])\n"
        "return 'done'\n"
    )
    env = {"RUN_CONCURRENCY": "3", "RUN_WARM": "1", "RUN_TIMEOUT": "30"}
    async with start_service(runtime, **env) as service:
        runs = [
            asyncio.create_task(service.run_now("python", code, input={"seconds": 10}))
            for _ in range(3)
        ]
        await wait_for(
            lambda: len(processes_named(mark)) == 3, timeout=10, what="three runs at once"
        )
        replies = await asyncio.gather(*runs)
    assert [r.json() for r in replies] == [{"data": "done", "type": "string"}] * 3
