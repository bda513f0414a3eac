"""printed_env(): what a child prints once it is ready, read up to its PATH line."""

from __future__ import annotations

import asyncio

import pytest

from events.printed_env import printed_env


def fed(text: str, *, ended: bool) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(text.encode())
    if ended:
        reader.feed_eof()
    return reader


async def test_the_lines_up_to_path_are_the_environment() -> None:
    # A later line stays unread: the stream is left open, as a running child's is.
    out = fed(
        "# simulated cluster\nPVE_HOST=127.0.0.1\nnoise\nTOKEN=a=b\nPATH=/x\nLATER=1\n",
        ended=False,
    )
    assert await printed_env(out, "cairn sim") == {
        "PVE_HOST": "127.0.0.1",
        "TOKEN": "a=b",
        "PATH": "/x",
    }
    assert await out.readline() == b"LATER=1\n"


async def test_output_that_ends_first_names_the_child() -> None:
    with pytest.raises(EOFError) as ended:
        await printed_env(fed("PVE_HOST=127.0.0.1\n", ended=True), "the simulator")
    assert str(ended.value) == "the simulator ended before printing its environment"
