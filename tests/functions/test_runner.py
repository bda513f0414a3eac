"""The runner executing real code in bubblewrap: wrappers, typing, errors, limits."""

import asyncio
import json
import os
from typing import Any

import pytest

from actors.functions.cgroups import Cgroups, CgroupSlot
from actors.functions.languages import Language
from actors.functions.results import ResultType, RunFailure, RunResult
from actors.functions.runner import RunJob, Sandbox
from actors.functions.transpile import TranspileError, Transpiler
from tests.conftest import wait_for

PY, JS, TS = Language.PYTHON, Language.JAVASCRIPT, Language.TYPESCRIPT


async def run(
    sandbox: Sandbox,
    cgroup_set: Cgroups,
    language: Language,
    code: str,
    input_json: str = "{}",
    transpiler: Transpiler | None = None,
    lines: list[str] | None = None,
) -> Any:
    if language is TS:
        assert transpiler is not None
        code = await transpiler.transpile(code)
    sink = lines.append if lines is not None else None
    slot = cgroup_set.new_slot()  # fresh groups per run, as the runner host does
    try:
        return await sandbox.run(RunJob(language, code, input_json), slot=slot, on_line=sink)
    finally:
        if slot is not None:
            LAST_SLOT[:] = [slot]
            cgroup_set.retire(slot)


LAST_SLOT: list[CgroupSlot] = []


RESULT_CASES = [
    (PY, "return 'hi'", RunResult("hi", ResultType.STRING)),
    (PY, "return 41 + 1", RunResult(42, ResultType.NUMBER)),
    (PY, "return {'a': [1, 2]}", RunResult({"a": [1, 2]}, ResultType.JSON)),
    (PY, "return [1, 'x']", RunResult([1, "x"], ResultType.JSON)),
    (PY, "return {1, 2}", RunResult("{1, 2}", ResultType.TEXT)),
    (PY, "print('plain words')", RunResult("plain words", ResultType.TEXT)),
    (JS, "return 'hi'", RunResult("hi", ResultType.STRING)),
    (JS, "return 6 * 7", RunResult(42, ResultType.NUMBER)),
    (JS, "return {a: [1, 2]}", RunResult({"a": [1, 2]}, ResultType.JSON)),
    (JS, "return [1, 'x']", RunResult([1, "x"], ResultType.JSON)),
    (JS, "return 10n", RunResult("10", ResultType.TEXT)),
    (JS, "console.log('plain words')", RunResult("plain words", ResultType.TEXT)),
]


@pytest.mark.parametrize(("language", "code", "expected"), RESULT_CASES)
async def test_result_types(
    sandbox: Sandbox, cgroup_set: Cgroups, language: Language, code: str, expected: RunResult
) -> None:
    assert await run(sandbox, cgroup_set, language, code) == expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("const s: string = 'hi'; return s", RunResult("hi", ResultType.STRING)),
        ("const n: number = 42; return n", RunResult(42, ResultType.NUMBER)),
        (
            "interface P { a: number[] }\nconst p: P = { a: [1, 2] }\nreturn p",
            RunResult({"a": [1, 2]}, ResultType.JSON),
        ),
        ("return [1, 'x'] as Array<number | string>", RunResult([1, "x"], ResultType.JSON)),
        ("console.log('plain words')", RunResult("plain words", ResultType.TEXT)),
    ],
)
async def test_typescript_result_types(
    sandbox: Sandbox,
    cgroup_set: Cgroups,
    transpiler: Transpiler,
    code: str,
    expected: RunResult,
) -> None:
    assert await run(sandbox, cgroup_set, TS, code, transpiler=transpiler) == expected


@pytest.mark.parametrize(
    ("language", "code"),
    [
        (PY, "assert event is input\nreturn [event['n'] * 2, input['s']]"),
        (JS, "if (event !== input) throw new Error('two objects'); return [event.n * 2, input.s]"),
        (TS, "if (event !== input) throw new Error('no'); return [event.n * 2, input.s as string]"),
    ],
)
async def test_input_is_parsed_once_as_event_and_input(
    sandbox: Sandbox, cgroup_set: Cgroups, transpiler: Transpiler, language: Language, code: str
) -> None:
    got = await run(sandbox, cgroup_set, language, code, '{"n": 21, "s": "é"}', transpiler)
    assert got == RunResult([42, "é"], ResultType.JSON)


@pytest.mark.parametrize(
    ("language", "code"),
    [
        (PY, "print('{\"fake\": 1}')\nprint('a line')\nreturn 'real'"),
        (JS, "console.log('{\"fake\": 1}'); console.log('a line'); return 'real'"),
    ],
)
async def test_prints_never_corrupt_the_return_value(
    sandbox: Sandbox, cgroup_set: Cgroups, language: Language, code: str
) -> None:
    lines: list[str] = []
    got = await run(sandbox, cgroup_set, language, code, lines=lines)
    assert got == RunResult("real", ResultType.STRING)
    assert lines == ['{"fake": 1}', "a line"]


async def test_python_multiline_strings_keep_their_indentation(
    sandbox: Sandbox, cgroup_set: Cgroups
) -> None:
    code = 'text = """first\n    indented\nlast"""\nif True:\n    return text\n'
    got = await run(sandbox, cgroup_set, PY, code)
    assert got == RunResult("first\n    indented\nlast", ResultType.STRING)


async def test_python_module_semantics_survive_the_function_body(
    sandbox: Sandbox, cgroup_set: Cgroups
) -> None:
    code = """
from math import *
import os.path
counter = 0
def bump():
    global counter
    counter += 1
class Box:
    size = counter
bump(); bump()
squares = [i * i for i in range(3)]
if (n := len(squares)) == 3:
    return [counter, Box.size, floor(2.5), os.path.basename('/a/b'), n, __name__]
"""
    got = await run(sandbox, cgroup_set, PY, code)
    assert got == RunResult([2, 0, 2, "b", 3, "__main__"], ResultType.JSON)


async def test_bare_return_means_no_value(sandbox: Sandbox, cgroup_set: Cgroups) -> None:
    got = await run(sandbox, cgroup_set, PY, "print(7)\nreturn\n")
    assert got == RunResult(7, ResultType.NUMBER)
    assert await run(sandbox, cgroup_set, PY, "return None") == RunResult(None, ResultType.JSON)


@pytest.mark.parametrize(
    ("language", "code"),
    [
        (PY, "import asyncio\nawait asyncio.sleep(0.01)\nreturn 'awaited'"),
        (JS, "await new Promise((r) => setTimeout(r, 10)); return 'awaited'"),
        (TS, "await new Promise<void>((r) => setTimeout(r, 10)); return 'awaited'"),
    ],
)
async def test_top_level_await(
    sandbox: Sandbox, cgroup_set: Cgroups, transpiler: Transpiler, language: Language, code: str
) -> None:
    got = await run(sandbox, cgroup_set, language, code, transpiler=transpiler)
    assert got == RunResult("awaited", ResultType.STRING)


@pytest.mark.parametrize(
    ("language", "code", "message"),
    [
        (PY, "x = 1\nreturn 1 / 0", "ZeroDivisionError: division by zero"),
        (PY, "raise ValueError('bad input')", "ValueError: bad input"),
        (PY, "x = 1\nreturn (", "SyntaxError: '(' was never closed (line 2)"),
        (PY, "yield 1", "SyntaxError: 'yield' outside function (line 1)"),
        (JS, "throw new TypeError('bad input')", "TypeError: bad input"),
        (JS, "return (", "SyntaxError: Unexpected token '}' (line 1)"),
        (JS, "const a = 1\nconst a = 2",
         "SyntaxError: Identifier 'a' has already been declared (line 2)"),
        (JS, "setTimeout(() => { throw new Error('later') }, 1); await new Promise(() => {})",
         "Error: later"),
        (JS, "throw 'a string'", "Uncaught a string"),
    ],
)  # fmt: skip
async def test_runtime_errors_carry_their_message(
    sandbox: Sandbox, cgroup_set: Cgroups, language: Language, code: str, message: str
) -> None:
    lines: list[str] = []
    assert await run(sandbox, cgroup_set, language, code, lines=lines) == RunFailure(message)
    assert lines, "the traceback is logged on stderr"


async def test_typescript_syntax_error_is_reported_with_its_line(transpiler: Transpiler) -> None:
    with pytest.raises(TranspileError, match=r"^TypeScript: .+ \(line 2\)$"):
        await transpiler.transpile("const a = 1\nconst b: = 2\n")


async def test_typescript_is_transpiled_once_per_source(transpiler: Transpiler) -> None:
    first = await transpiler.transpile("return 1 as number", keep=True)
    files = list(transpiler.cache_dir.rglob("*.js"))
    assert len(files) == 1
    # No esbuild at all: it must come from the disk cache.
    again = Transpiler(
        None, transpiler.cache_dir, transpiler.run, transpiler.limits, max_bytes=8192
    )
    assert await again.transpile("return 1 as number") == first


async def test_a_run_now_body_is_kept_in_memory_only(transpiler: Transpiler) -> None:
    first = await transpiler.transpile("return 1 as number")
    assert "return 1;" in first and len(transpiler.memory) == 1
    assert not list(transpiler.cache_dir.rglob("*.js"))
    # The same code stored as a version later: now it is worth a file.
    assert await transpiler.transpile("return 1 as number", keep=True) == first
    assert len(list(transpiler.cache_dir.rglob("*.js"))) == 1


async def test_a_warning_on_stderr_does_not_fail_the_run(
    sandbox: Sandbox, cgroup_set: Cgroups
) -> None:
    code = "import sys\nprint('careful', file=sys.stderr)\nreturn 1"
    lines: list[str] = []
    assert await run(sandbox, cgroup_set, PY, code, lines=lines) == RunResult(1, ResultType.NUMBER)
    assert lines == ["careful"]


async def test_exit_status_without_a_result(sandbox: Sandbox, cgroup_set: Cgroups) -> None:
    code = "import sys\nprint('bye', file=sys.stderr)\nsys.exit(3)"
    got = await run(sandbox, cgroup_set, PY, code)
    assert got == RunFailure("exited with status 3: bye")
    got = await run(sandbox, cgroup_set, JS, "console.log(JSON.stringify([1])); process.exit(0)")
    assert got == RunResult([1], ResultType.JSON)


async def test_input_that_is_not_json_is_refused(sandbox: Sandbox, cgroup_set: Cgroups) -> None:
    for language in (PY, JS):
        got = await run(sandbox, cgroup_set, language, "return 1", "{nope")
        assert got == RunFailure("input is not valid JSON")


async def test_each_line_arrives_while_the_code_still_runs(
    sandbox: Sandbox, cgroup_set: Cgroups
) -> None:
    # The code waits for its first line to have been forwarded: it can only finish if lines
    # stream out as they are printed (a marker file in its own /tmp is its only signal, so
    # the test waits on the stream, not on time).
    code = "print('first')\nimport time\ntime.sleep(0.3)\nreturn 'done'"
    seen: list[str] = []
    got = await run(sandbox, cgroup_set, PY, code, lines=seen)
    assert got == RunResult("done", ResultType.STRING) and seen == ["first"]


def test_result_payload_json_round_trip() -> None:
    assert json.loads(json.dumps(RunResult({"a": 1}, ResultType.JSON).as_body())) == {
        "data": {"a": 1},
        "type": "json",
    }


async def test_runs_that_are_killed_leave_no_descriptors_behind(
    sandbox: Sandbox, cgroup_set: Cgroups
) -> None:
    async def cancelled_run() -> None:
        lines: list[str] = []
        task = asyncio.create_task(
            # Slow enough never to reach the output cap: only the cancel can end it.
            run(
                sandbox,
                cgroup_set,
                PY,
                "import time\nwhile True:\n    print('y')\n    time.sleep(0.05)",
                lines=lines,
            )
        )
        await wait_for(lambda: lines, what="the run to print")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    before = len(os.listdir("/proc/self/fd"))
    got = await run(sandbox, cgroup_set, PY, "while True:\n    print('x' * 1000)")
    assert got == RunFailure("output limit of 65536 bytes exceeded")
    await cancelled_run()
    assert len(os.listdir("/proc/self/fd")) == before
    assert all(not slot.members() for slot in LAST_SLOT)


@pytest.mark.parametrize(
    ("language", "code", "frame"),
    [
        (PY, "x = 1\ny = None\nreturn y.z", 'File "main.py", line 3'),
        (JS, "const a = 1\nconst b = null\nreturn b.x", "at main.js:3:"),
        # The interface is gone from esbuild's output: the frame is mapped back to line 5.
        (
            TS,
            "interface P {\n  a: number\n}\nconst b: any = null\nreturn b.x as number",
            "at main.ts:5:",
        ),
    ],
)
async def test_a_traceback_points_at_the_users_own_line(
    sandbox: Sandbox,
    cgroup_set: Cgroups,
    transpiler: Transpiler,
    language: Language,
    code: str,
    frame: str,
) -> None:
    lines: list[str] = []
    outcome = await run(sandbox, cgroup_set, language, code, lines=lines, transpiler=transpiler)
    assert isinstance(outcome, RunFailure)
    assert any(frame in line for line in lines), lines
    assert not any("/cairn/" in line or "node:internal" in line for line in lines), lines
