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


CUT = (
    b'id: 150:1\ndata: {"step":"start > starting VM","status":"processing",'
    b'"message":"[*] starting VM 150 (0.00s)"}\n\n'
)
HOSTILE = (
    b'data: {"step":"x\\u001b]0;pwned\\u0007","status":"error",'
    b'"message":"[-] \\u001b[2Jgone"}\n\nevent: close\ndata: {}\n\n'
)
STOPPING = (
    b'event: stopping\ndata: {"step":"stopping","status":"processing","message":"[*] cairn '
    b'is stopping: this stream ends here (GET /api/vm/150/task, with Last-Event-ID)"}\n\n'
)


@pytest.mark.parametrize(
    ("stream", "code", "out", "err"),
    [
        # Cut short: exit 3, saying how to follow the task that goes on.
        (
            CUT,
            3,
            "start: VM 150, task t1\nstart > starting VM\n  [*] starting VM 150 (0.00s)\n",
            "cairn: the stream of the start ended before the task did; it goes on in cairn: "
            "follow it with `cairn vm task 150`\n",
        ),
        # Escape sequences from the service reach the terminal escaped, never as they are.
        (
            HOSTILE,
            1,
            "start: VM 150, task t1\nx\\x1b]0;pwned\\x07\n  [-] \\x1b[2Jgone\n",
            "cairn: start failed: [-] \\x1b[2Jgone\n",
        ),
        # cairn stopping mid-task: exit 3, as for a cut.
        (
            STOPPING,
            3,
            "start: VM 150, task t1\n",
            "cairn: [*] cairn is stopping: this stream ends here (GET /api/vm/150/task, with "
            "Last-Event-ID): follow it with `cairn vm task 150`\n",
        ),
    ],
    ids=["cut", "hostile", "stopping"],
)
def test_how_a_task_stream_ends_on_the_terminal(
    cairn: Cairn, answering: Answering, stream: bytes, code: int, out: str, err: str
) -> None:
    result = run_against(cairn, answering, (200, "text/event-stream", stream), "vm", "start", "150")
    assert (result.code, result.out, result.err) == (code, out, err)
    assert "\x1b" not in result.out + result.err and "\x07" not in result.out + result.err
