"""Result typing: the return value's own channel first, then the last JSON line, else text."""

import pytest

from actors.functions.results import (
    ResultType,
    RunFailure,
    RunResult,
    from_channel,
    from_stdout,
    type_of,
)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("hi", ResultType.STRING),
        ("", ResultType.STRING),
        (3, ResultType.NUMBER),
        (2.5, ResultType.NUMBER),
        ({"a": 1}, ResultType.JSON),
        ([1, 2], ResultType.JSON),
        (True, ResultType.JSON),
        (None, ResultType.JSON),
    ],
)
def test_type_of(value: object, kind: ResultType) -> None:
    assert type_of(value) is kind


def test_returned_value_wins_over_any_printed_json() -> None:
    assert from_channel(b'V"ok"', '{"printed": true}\n') == RunResult("ok", ResultType.STRING)


def test_no_return_value_takes_the_last_json_line() -> None:
    out = 'starting\n{"a": 1}\n42\nnot json\n\n'
    assert from_channel(b"N", out) == RunResult(42, ResultType.NUMBER)
    assert from_stdout('{"a": [1]}\n') == RunResult({"a": [1]}, ResultType.JSON)


def test_no_return_value_and_no_json_is_text() -> None:
    assert from_stdout("hello\nworld\n") == RunResult("hello\nworld", ResultType.TEXT)
    assert from_stdout("") == RunResult("", ResultType.TEXT)


def test_nan_is_not_json() -> None:
    assert from_stdout("NaN\n") == RunResult("NaN", ResultType.TEXT)
    assert from_channel(b"VNaN", "") == RunResult("NaN", ResultType.TEXT)


def test_text_and_errors_and_garbage() -> None:
    assert from_channel(b"T{1, 2}", "") == RunResult("{1, 2}", ResultType.TEXT)
    assert from_channel(b"EValueError: bad", "") == RunFailure("ValueError: bad")
    assert from_channel(b"", "x") is None
    assert isinstance(from_channel(b"Zwhat", ""), RunFailure)
    assert from_channel(b"V[[[[", "") == RunResult("[[[[", ResultType.TEXT)


def test_stream_data_is_a_string() -> None:
    assert RunResult("hi", ResultType.STRING).stream_data() == "hi"
    assert RunResult({"a": 1}, ResultType.JSON).stream_data() == '{"a":1}'
    assert RunResult(1.5, ResultType.NUMBER).stream_data() == "1.5"
    assert RunResult("raw", ResultType.TEXT).stream_data() == "raw"
