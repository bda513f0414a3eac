"""A safe change's check by a stored function (`{"function": "<path>", "input": …}`): the
functions service runs it (an HTTP probe of the VM, say) and its result `true` or
`{"ok": true}` passes; any other result, an error or a time-out fails the check.

The VM service reaches the functions service through `FunctionRuns`, given by the
composition root (gateway/apps/vm.py), so the VM's actors never import another service."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

# How much of a failing result the stream shows.
SHOWN_RESULT = 200


class FunctionRuns(Protocol):
    async def missing(self, path: str) -> tuple[int, str] | None:
        """None when `path` is a stored function; else why it cannot be run, with its status
        (404: none is stored there; 503: the functions service does not answer)."""
        ...

    async def run(self, path: str, input_json: str, by: str) -> tuple[Any, str | None]:
        """The function's result and None, or None and why it gave none."""
        ...


async def refusal(
    functions: FunctionRuns | None, checks: list[dict[str, Any]]
) -> tuple[int, str] | None:
    """Why the change's function checks cannot run, said before anything changes: 400 for a
    path with no stored function, 503 when the functions service does not answer."""
    for i, one in enumerate(checks):
        if "function" not in one:
            continue
        where = "verify.function" if len(checks) == 1 else f"verify[{i}].function"
        if functions is None:
            return 503, f"{where}: this cairn runs no functions service to ask"
        missing = await functions.missing(one["function"])
        if missing is not None:
            status, why = missing
            return (400 if status == 404 else 503), f"{where}: {why}"
    return None


def passes(result: Any) -> bool:
    return result is True or (isinstance(result, dict) and result.get("ok") is True)


async def check(
    functions: FunctionRuns | None, path: str, input_json: str, timeout: float, by: str
) -> str | None:
    """None when the function's result passes; else why the check failed."""
    if functions is None:
        return "this cairn runs no functions service to ask"
    try:
        async with asyncio.timeout(timeout):
            result, error = await functions.run(path, input_json, by)
    except TimeoutError:
        return f"function {path} timed out after {timeout:g}s"
    if error is not None:
        return f"function {path} failed: {error}"
    if passes(result):
        return None
    shown = json.dumps(result, separators=(",", ":"))
    if len(shown) > SHOWN_RESULT:
        shown = shown[:SHOWN_RESULT] + "…"
    return f'function {path} returned {shown}, not true or {{"ok": true}}'
