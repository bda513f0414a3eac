"""API tokens on disk and on the command line: printed once, kept as a digest only, listed
by name and role, revoked at once (gateway/http/tokens.py, gateway/cli/tokens.py)."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.http.tokens import Identity, Role, TokenError, TokenStore, create, revoke

CAIRN = str(Path(sys.executable).parent / "cairn")


def cairn(tmp_path: Path, *args: str, **more: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CAIRN_PUBLIC_ROUTES"}
    env.update(CAIRN_DATA=str(tmp_path / "data"), **more)
    return subprocess.run(
        [CAIRN, "token", *args], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )


def test_the_cli_prints_a_token_once_and_keeps_its_digest(tmp_path: Path) -> None:
    assert "identities are off" in cairn(tmp_path, "list").stdout
    made = cairn(tmp_path, "create", "ana", "--role", "operator")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("cairn_") and len(token) == len("cairn_") + 43
    assert "shown only now" in made.stderr and "identities are now on" in made.stderr
    path = tmp_path / "data" / "tokens.json"
    text = path.read_text()
    assert token not in text and token[6:] not in text
    assert hashlib.sha256(token.encode()).hexdigest() in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    listed = cairn(tmp_path, "list").stdout
    assert "ana" in listed and "operator" in listed and token not in listed
    again = cairn(tmp_path, "create", "ana", "--role", "admin")
    assert again.returncode == 2 and "exists" in again.stderr
    bad = cairn(tmp_path, "create", "ana", "--role", "root")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    gone = cairn(tmp_path, "revoke", "ana")
    assert gone.returncode == 0 and "no token is left: identities are off" in gone.stderr
    assert cairn(tmp_path, "revoke", "ana").returncode == 1


def test_create_says_which_routes_stay_public(tmp_path: Path) -> None:
    made = cairn(tmp_path, "create", "ana", "--role", "admin")
    assert made.returncode == 0, made.stderr
    assert made.stderr.splitlines()[-1] == (
        "cairn: still served without a token (CAIRN_PUBLIC_ROUTES; `none` closes them all): "
        "* GET /health, vm GET /api/health, search GET /api/health, vm GET /api/vm/list, "
        "vm GET /api/vm/*, vm GET /api/vm/*/status, vm GET /sh/*, images GET /c/img/**"
    )
    closed = cairn(tmp_path, "create", "bo", "--role", "viewer", CAIRN_PUBLIC_ROUTES="none")
    assert closed.stderr.splitlines()[-1] == (
        "cairn: no route is served without a token (CAIRN_PUBLIC_ROUTES=none) but the "
        "console's sign-in"
    )
    chosen = cairn(
        tmp_path, "create", "cy", "--role", "viewer", CAIRN_PUBLIC_ROUTES="* GET /health"
    )
    assert chosen.stderr.splitlines()[-1].endswith("`none` closes them all): * GET /health")
    # A setting the services would refuse is said before any token is made.
    bad = cairn(tmp_path, "create", "di", "--role", "viewer", CAIRN_PUBLIC_ROUTES="vm /x")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "CAIRN_PUBLIC_ROUTES" in bad.stderr
    assert "di" not in cairn(tmp_path, "list").stdout


@pytest.mark.parametrize("name", ["", "-x", "a b", "a/b", "x" * 65, "ä", "a\nb"])
def test_names_that_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(TokenError):
        create(tmp_path / "tokens.json", name, Role.VIEWER)


def test_the_store_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    store = TokenStore(path)
    assert not store.enabled()
    token = create(path, "ci", Role.ADMIN)
    assert store.enabled()
    assert store.identify(token) == Identity("ci", Role.ADMIN)
    assert store.identify(token + "x") is None
    assert store.identify("not-a-token") is None
    other = create(path, "bob", Role.VIEWER)
    assert store.identify(other) == Identity("bob", Role.VIEWER)
    assert revoke(path, "ci")
    assert store.enabled()
    assert store.identify(token) is None  # at once, no restart
    assert revoke(path, "bob")
    assert not store.enabled()


def test_a_damaged_file_is_said_not_ignored(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text("{nonsense")
    with pytest.raises(TokenError, match="not a token file"):
        TokenStore(path).enabled()
