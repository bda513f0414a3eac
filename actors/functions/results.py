"""Typing a run's outcome: the return value comes on its own channel; with no
return value the last stdout line that is JSON is the result, else the output is ``text``."""

from __future__ import annotations

import enum
import json
from typing import Any

import attrs


class ResultType(enum.StrEnum):
    STRING = "string"
    NUMBER = "number"
    JSON = "json"
    TEXT = "text"


@attrs.frozen
class RunResult:
    data: Any
    type: ResultType

    def as_body(self) -> dict[str, Any]:
        return {"data": self.data, "type": str(self.type)}

    def stream_data(self) -> str:
        """The stream event's ``data`` is a string: the value itself for strings and text,
        its JSON text otherwise."""
        if self.type in (ResultType.STRING, ResultType.TEXT):
            return str(self.data)
        return json.dumps(self.data, separators=(",", ":"))


@attrs.frozen
class RunFailure:
    message: str


Outcome = RunResult | RunFailure


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_strict(text: str) -> Any:
    """JSON as the standard has it: NaN and Infinity are not JSON."""
    return json.loads(text, parse_constant=_no_constants)


def type_of(value: Any) -> ResultType:
    if isinstance(value, str):
        return ResultType.STRING
    if isinstance(value, bool) or value is None:
        return ResultType.JSON  # true, false and null are JSON values that are not numbers
    if isinstance(value, int | float):
        return ResultType.NUMBER
    return ResultType.JSON


def typed(value: Any) -> RunResult:
    return RunResult(value, type_of(value))


def from_stdout(stdout: str) -> RunResult:
    for line in reversed(stdout.splitlines()):
        candidate = line.strip()
        if not candidate:
            continue
        try:
            return typed(loads_strict(candidate))
        except (ValueError, RecursionError):
            continue
    return RunResult(stdout.removesuffix("\n"), ResultType.TEXT)


def from_channel(payload: bytes, stdout: str) -> Outcome | None:
    """The outcome the wrapper reported on fd 3, or None when it reported nothing (the code
    exited on its own, or was killed)."""
    if not payload:
        return None
    kind, body = payload[:1], payload[1:].decode("utf-8", "replace")
    if kind == b"V":
        try:
            return typed(loads_strict(body))
        except (ValueError, RecursionError):
            return RunResult(body, ResultType.TEXT)
    if kind == b"T":
        return RunResult(body, ResultType.TEXT)
    if kind == b"N":
        return from_stdout(stdout)
    if kind == b"E":
        return RunFailure(body or "the function raised an error")
    return RunFailure("the function wrote an unreadable result")
