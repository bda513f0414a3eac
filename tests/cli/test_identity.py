"""The command line and identities: once cairn has tokens, a command without one is refused
with exit 4 and a message that says what to set; the token comes from CAIRN_TOKEN or a file,
its role is enforced by the service, a revoked one is refused at once, the audit trail names
it, and it is never printed. It is sent only where it belongs: not over plain http to another
machine, not along a redirect, not through a proxy of the environment."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.http.tokens import Role, create, read_entries, revoke, tokens_path
from tests.cli.conftest import Cairn, Result


@pytest.fixture
def tokens(cairn: Cairn) -> Iterator[dict[str, str]]:
    """A viewer, an operator and an admin token; identities are off again afterwards."""
    path = tokens_path(cairn.env)
    made = {role.label: create(path, f"cli-{role.label}", role) for role in Role}
    try:
        yield made
    finally:
        for entry in read_entries(path):
            revoke(path, entry.name)


def never_shows(result: Result, tokens: dict[str, str]) -> None:
    for token in tokens.values():
        assert token not in result.out and token not in result.err


def test_without_a_token_a_command_is_refused_with_exit_4(
    cairn: Cairn, tokens: dict[str, str]
) -> None:
    result = cairn.program("fn", "list")
    assert result.code == 4 and result.out == ""
    assert result.err == (
        "cairn: sign-in required: this route needs a token with role viewer (or above) (send "
        "Authorization: Bearer <token>; an admin makes one with cairn token create) "
        "[set CAIRN_TOKEN, CAIRN_TOKEN_FILE or --token-file]\n"
    )
    as_json = cairn.run("vm", "stop", "100", "--json")
    assert as_json.code == 4
    assert as_json.json()["status"] == 401 and as_json.json()["exit"] == 4


def test_the_token_comes_from_the_environment_or_a_file_and_its_role_counts(
    cairn: Cairn, tokens: dict[str, str], tmp_path: Path
) -> None:
    viewer = {"CAIRN_TOKEN": tokens["viewer"]}
    listed = cairn.program("fn", "list", env=viewer)
    assert listed.code == 0, listed
    never_shows(listed, tokens)

    code = tmp_path / "who.py"
    code.write_text("return 'me'\n")
    low = cairn.run("fn", "put", "cli/who", str(code), env=viewer)
    assert low.code == 4
    assert low.err == "cairn: token 'cli-viewer' has role viewer; this route needs admin\n"

    admin_file = tmp_path / "admin.token"
    admin_file.write_text(tokens["admin"] + "\n")
    put = cairn.run("fn", "put", "cli/who", str(code), "--token-file", str(admin_file), env=viewer)
    assert put.code == 0, put  # the file named on the command line wins over CAIRN_TOKEN
    operator_file = tmp_path / "operator.token"
    operator_file.write_text(tokens["operator"])
    run = cairn.run("fn", "run", "cli/who", env={"CAIRN_TOKEN_FILE": str(operator_file)})
    assert (run.code, run.out) == (0, "me\n")
    never_shows(run, tokens)

    revoke(tokens_path(cairn.env), "cli-operator")
    after = cairn.run("fn", "run", "cli/who", env={"CAIRN_TOKEN_FILE": str(operator_file)})
    assert after.code == 4
    assert after.err.startswith("cairn: unknown or revoked token: ")
    assert after.err.endswith("[the token sent was refused]\n")


def test_a_task_records_the_token_that_asked_for_it(cairn: Cairn, tokens: dict[str, str]) -> None:
    admin = {"CAIRN_TOKEN": tokens["admin"]}
    install = cairn.run("vm", "install", "--os", "debian", "--version", "12", "--json", env=admin)
    assert install.code == 0, install
    vmid = install.json()["vm_id"]
    stop = cairn.run("vm", "stop", str(vmid), env={"CAIRN_TOKEN": tokens["operator"]})
    assert stop.code == 0, stop
    shown = cairn.run("vm", "show", str(vmid), env=admin)
    fields = dict(line.split(None, 1) for line in shown.out.splitlines())
    assert fields["created_by"] == "cli-admin"
    assert fields["last_task"] == "stop ok (by cli-operator)"
    denied = cairn.run("vm", "destroy", str(vmid), env={"CAIRN_TOKEN": tokens["operator"]})
    assert (denied.code, denied.err) == (
        4,
        "cairn: token 'cli-operator' has role operator; this route needs admin\n",
    )
    assert cairn.run("vm", "destroy", str(vmid), env=admin).code == 0


def test_a_token_file_that_holds_no_token_is_a_usage_error(cairn: Cairn, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    result = cairn.run("fn", "list", "--token-file", str(empty))
    assert (result.code, result.err) == (2, f"cairn: the token file {empty} is empty\n")
    spaced = tmp_path / "spaced"
    spaced.write_text("cairn_abc def\x1b[2J\n")
    result = cairn.run("fn", "list", "--token-file", str(spaced))
    assert result.code == 2 and "holds no token" in result.err
    assert "\x1b" not in result.err and "abc" not in result.err
    missing = cairn.run("fn", "list", "--token-file", str(tmp_path / "none"))
    assert missing.code == 2 and "no such file or directory" in missing.err


def test_the_token_never_goes_over_plain_http_to_another_machine(cairn: Cairn) -> None:
    result = cairn.run(
        "vm",
        "list",
        env={"CAIRN_TOKEN": "cairn_x", "CAIRN_VM_URL": "http://192.0.2.10:8100/api"},
    )
    assert result.code == 2
    assert result.err == (
        "cairn: refusing to send the token over plain http to 192.0.2.10: use an https:// "
        "address in CAIRN_VM_URL\n"
    )


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request with a redirect (``location``) or 502, recording what it got."""

    seen: list[tuple[str, str | None]]
    location: str | None

    def _answer(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.location is not None:
            self.send_response(302)
            self.send_header("Location", self.location + self.path)
        else:
            self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        return None


def recorder(location: str | None) -> tuple[http.server.HTTPServer, list[tuple[str, str | None]]]:
    seen: list[tuple[str, str | None]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen, "location": location})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_redirect_is_not_followed_so_the_token_stays(cairn: Cairn) -> None:
    elsewhere, elsewhere_seen = recorder(None)
    port = elsewhere.server_address[1]
    bouncer, bouncer_seen = recorder(f"http://127.0.0.1:{port}")
    try:
        result = cairn.run(
            "fn",
            "list",
            env={
                "CAIRN_TOKEN": "cairn_secret",
                "CAIRN_FUNCTIONS_URL": f"http://127.0.0.1:{bouncer.server_address[1]}",
            },
        )
    finally:
        bouncer.shutdown()
        elsewhere.shutdown()
    assert result.code == 1
    assert result.err == (
        f"cairn: the functions service redirected to http://127.0.0.1:{port}/functions; "
        "not followed\n"
    )
    assert bouncer_seen == [("/functions", "Bearer cairn_secret")]
    assert elsewhere_seen == []


def test_a_proxy_of_the_environment_is_not_used(cairn: Cairn) -> None:
    proxy, seen = recorder(None)
    address = f"http://127.0.0.1:{proxy.server_address[1]}"
    try:
        result = cairn.program(
            "images", "ls", env={"http_proxy": address, "HTTP_PROXY": address, "no_proxy": ""}
        )
    finally:
        proxy.shutdown()
    assert result.code == 0, result
    assert seen == []


@pytest.mark.parametrize(
    ("argv", "done"),
    [(("vm", "task", "999999"), 1), (("fn", "list"), 0), (("images", "ls"), 0)],
    ids=["vm", "fn", "images"],
)
def test_every_group_takes_the_token_from_each_source(
    cairn: Cairn, tokens: dict[str, str], tmp_path: Path, argv: tuple[str, ...], done: int
) -> None:
    """Refused without a token; past the check (its answer, `done`) with --token-file,
    CAIRN_TOKEN_FILE or CAIRN_TOKEN alike."""
    assert cairn.run(*argv).code == 4
    held = tmp_path / "viewer.token"
    held.write_text(tokens["viewer"] + "\n")
    for extra, env in (
        (("--token-file", str(held)), {}),
        ((), {"CAIRN_TOKEN_FILE": str(held)}),
        ((), {"CAIRN_TOKEN": tokens["viewer"]}),
    ):
        result = cairn.run(*argv, *extra, env=env)
        assert result.code == done, (extra, env, result)
        never_shows(result, tokens)
