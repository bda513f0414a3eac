"""Parsing the HTTP bodies of the three endpoints, with the exact messages clients
compare against. Pure:
bytes in, a request or a ``BadRequest`` out."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from actors.functions.languages import Language, parse_language
from actors.functions.results import loads_strict

INVALID_PAYLOAD = "Invalid request payload"
INVALID_PATH = "Invalid path"
SAVE_FAILED = "Failed to save function"
# The words clients know first, then what to send instead.
UNSUPPORTED_LANGUAGE = "unsupported language: use python, javascript or typescript"
CODE_REQUIRED = "code is required"
INPUT_NOT_JSON = "input is not valid JSON"
FAILED_TO_RUN = "failed to run: "
EMPTY_BODY = "bad request: EOF"  # the original's JSON decoder on an empty body

_INT64 = re.compile(r"^[+-]?[0-9]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def too_large(limit: int) -> str:
    return f"request body is larger than CODE_MAX_SIZE ({limit} bytes)"


@attrs.frozen
class UploadRequest:
    path: str
    language: Language
    code: str


@attrs.frozen
class RunOptions:
    input_json: str
    stream: bool


@attrs.frozen
class RunNowRequest:
    language: Language
    code: str
    input_json: str
    stream: bool


def normalize_path(raw: str) -> str:
    """Paths are the same with or without leading slashes (``/a/b`` is ``a/b``)."""
    return raw.lstrip("/")


def parse_object(body: bytes) -> dict[str, Any]:
    try:
        value = loads_strict(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRequest(INVALID_PAYLOAD) from None
    if not isinstance(value, dict):
        raise BadRequest(INVALID_PAYLOAD)
    return value


def _required_string(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or value == "":
        raise BadRequest(INVALID_PAYLOAD)
    return value


def parse_upload(body: bytes) -> UploadRequest:
    return parse_upload_fields(parse_object(body))


def parse_upload_fields(fields: Any, code_max_size: int | None = None) -> UploadRequest:
    """An upload's fields, by the rules of ``POST /upload``: the gateway parses the HTTP body
    with them, and the registry the command it is sent (whoever sent it); with
    ``code_max_size``, code longer than that is refused as the HTTP body would be."""
    if not isinstance(fields, dict):
        raise BadRequest(INVALID_PAYLOAD)
    path = _required_string(fields, "path")
    code = _required_string(fields, "code")
    language_name = _required_string(fields, "language")
    path = normalize_path(path)
    if not path or ".." in path or _CONTROL.search(path):
        raise BadRequest(INVALID_PATH)
    language = parse_language(language_name)
    if language is None:
        raise BadRequest(INVALID_PATH)  # clients know an unsupported language by this message
    if code_max_size is not None and len(code.encode("utf-8")) > code_max_size:
        raise BadRequest(too_large(code_max_size))  # 400, as the HTTP body limit answers
    return UploadRequest(path, language, code)


def input_json(fields: dict[str, Any]) -> str:
    """The ``input`` field as a JSON text; ``{}`` when there is none. The documented form is
    a string holding JSON; any other JSON value (an object, an array, a number, a boolean) is
    taken as the input itself, as a client would naturally write it."""
    value = fields.get("input")
    if value is None or (isinstance(value, str) and not value.strip()):
        return "{}"
    if not isinstance(value, str):
        return dumps(value)
    try:
        loads_strict(value)
    except (ValueError, RecursionError):
        raise BadRequest(INPUT_NOT_JSON) from None
    return value


def stream_flag(fields: dict[str, Any]) -> bool:
    value = fields.get("stream", False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(INVALID_PAYLOAD)
    return value


def parse_run(body: bytes) -> RunOptions:
    """The body of ``/run/*``; ``code`` and ``language`` in it are ignored (the stored
    function's own win). The body must be JSON (a client with no input sends ``{}``, so
    nothing is lost by asking for it); an empty one is refused as the original refuses it."""
    if not body.strip():
        raise BadRequest(EMPTY_BODY)
    fields = parse_object(body)
    return RunOptions(input_json(fields), stream_flag(fields))


def parse_run_now(body: bytes) -> RunNowRequest:
    fields = parse_object(body)
    code, language_name = fields.get("code"), fields.get("language")
    if code is not None and not isinstance(code, str):
        raise BadRequest(INVALID_PAYLOAD)
    if language_name is not None and not isinstance(language_name, str):
        raise BadRequest(INVALID_PAYLOAD)
    options = RunOptions(input_json(fields), stream_flag(fields))
    if not code or not code.strip():
        raise BadRequest(CODE_REQUIRED)
    language = parse_language(language_name)
    if language is None:
        raise BadRequest(UNSUPPORTED_LANGUAGE)
    return RunNowRequest(language, code, options.input_json, options.stream)


def parse_version(raw: str | None) -> int | None:
    """The ``version`` query parameter: an int64, or None (latest) when missing or not one."""
    if raw is None or not _INT64.match(raw):
        return None
    value = int(raw)
    if not -(2**63) <= value < 2**63:
        return None
    return value


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
