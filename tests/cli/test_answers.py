"""What an HTTP answer means for the exit code, for answers a healthy cairn does not give on
demand (503 while NATS reconnects, a stream cut off mid-task, a body that is not what was
promised): a loopback server that answers them, and the real client against it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import attrs
import pytest

from tests.cli.conftest import Cairn, Result

Answer = tuple[int, str, bytes]


@attrs.frozen
class Answering:
    port: int
    queue: list[Answer]


@pytest.fixture
def answering() -> Iterator[Answering]:
    """A server on loopback answering each request with the next (status, type, body)."""
    queue: list[Answer] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def _answer(self) -> None:
            status, content_type, body = queue.pop(0)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if content_type == "text/event-stream":
                self.send_header("X-VM-Id", "150")
                self.send_header("X-Task-Id", "t1")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Answering(server.server_address[1], queue)
    finally:
        server.shutdown()
        server.server_close()


def run_against(cairn: Cairn, server: Answering, answer: Answer, *argv: str) -> Result:
    server.queue.append(answer)
    base = f"http://127.0.0.1:{server.port}"
    env = {"CAIRN_VM_URL": base + "/api", "CAIRN_FUNCTIONS_URL": base}
    return cairn.run(*argv, env=env)


BUS = b"the message bus (NATS) is unavailable; cairn is reconnecting, try again shortly"


@pytest.mark.parametrize(
    ("answer", "code", "err"),
    [
        ((503, "text/plain", BUS), 3, f"cairn: {BUS.decode()}\n"),
        ((500, "text/plain", b"qm failed:\n  exit 255"), 1, "cairn: qm failed: exit 255\n"),
        ((403, "text/plain", b"host not allowed: ..."), 4, "cairn: host not allowed: ...\n"),
        (
            (200, "application/json", b"<html>"),
            1,
            "cairn: the service answered 200 with a body that is not JSON\n",
        ),
    ],
)
def test_status_to_exit_code(
    cairn: Cairn, answering: Answering, answer: Answer, code: int, err: str
) -> None:
    result = run_against(cairn, answering, answer, "fn", "list", "--json")
    assert (result.code, result.err) == (code, err)
    assert result.json()["exit"] == code


def test_a_stream_cut_short_is_exit_3_and_says_how_to_follow_the_task(
    cairn: Cairn, answering: Answering
) -> None:
    cut = (
        b'id: 150:1\ndata: {"step":"start > starting VM","status":"processing",'
        b'"message":"[*] starting VM 150 (0.00s)"}\n\n'
    )
    result = run_against(cairn, answering, (200, "text/event-stream", cut), "vm", "start", "150")
    assert result.code == 3
    assert (
        result.out == "start: VM 150, task t1\nstart > starting VM\n  [*] starting VM 150 (0.00s)\n"
    )
    assert result.err == (
        "cairn: the stream of the start ended before the task did; it goes on in cairn: "
        "follow it with `cairn vm task 150`\n"
    )


def test_hostile_text_from_a_service_reaches_the_terminal_escaped(
    cairn: Cairn, answering: Answering
) -> None:
    body = (
        b'data: {"step":"x\\u001b]0;pwned\\u0007","status":"error",'
        b'"message":"[-] \\u001b[2Jgone"}\n\nevent: close\ndata: {}\n\n'
    )
    result = run_against(cairn, answering, (200, "text/event-stream", body), "vm", "start", "150")
    assert result.code == 1
    assert "\x1b" not in result.out + result.err and "\x07" not in result.out + result.err
    assert "x\\x1b]0;pwned\\x07\n  [-] \\x1b[2Jgone\n" in result.out
    assert result.err == "cairn: start failed: [-] \\x1b[2Jgone\n"


def test_cairn_stopping_mid_task_is_exit_3(cairn: Cairn, answering: Answering) -> None:
    body = (
        b'event: stopping\ndata: {"step":"stopping","status":"processing","message":"[*] cairn '
        b'is stopping: this stream ends here (GET /api/vm/150/task, with Last-Event-ID)"}\n\n'
    )
    result = run_against(cairn, answering, (200, "text/event-stream", body), "vm", "start", "150")
    assert result.code == 3
    assert result.err == (
        "cairn: [*] cairn is stopping: this stream ends here (GET /api/vm/150/task, with "
        "Last-Event-ID): follow it with `cairn vm task 150`\n"
    )
