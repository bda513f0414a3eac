"""Where each service listens: ports from their variables, hosts per service, search pinned to
loopback whatever the environment says."""

from __future__ import annotations

import socket

import attrs
import pytest

from actors.config import ConfigError
from gateway import server as root
from gateway.main import listen_address, release
from tests.ports import free_port


def test_ports_come_from_the_service_variable_or_its_default() -> None:
    images = root.load("images")
    assert listen_address({}, images, single=False) == ("127.0.0.1", 8300)
    assert listen_address({"IMAGES_PORT": "9001"}, images, single=False) == ("127.0.0.1", 9001)


def test_port_wins_when_one_service_runs_alone() -> None:
    images = root.load("images")
    env = {"PORT": "9002", "IMAGES_PORT": "9001"}
    assert listen_address(env, images, single=True)[1] == 9002
    assert listen_address(env, images, single=False)[1] == 9001


def test_each_service_has_its_own_host_variable() -> None:
    env = {"VM_HOST": "0.0.0.0"}
    assert listen_address(env, root.load("vm"), single=False)[0] == "0.0.0.0"
    assert listen_address(env, root.load("functions"), single=False)[0] == "127.0.0.1"


def test_search_stays_on_loopback_whatever_is_asked() -> None:
    host, port = listen_address({"SEARCH_HOST": "0.0.0.0"}, root.load("search"), single=False)
    assert host == "127.0.0.1"
    assert 0 < port < 65536


def test_search_keeps_its_default_port_unless_another_program_holds_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    search = root.load("search")
    assert search.default_port == 8400  # what bookmarks and agents keep
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        free = free_port("127.0.0.1")
        assert listen_address({}, attrs.evolve(search, default_port=free), single=False) == (
            "127.0.0.1",
            free,
        )
        assert capsys.readouterr().out == ""
        # Held until the service listens: a second cairn starting meanwhile moves elsewhere.
        second = listen_address({}, attrs.evolve(search, default_port=free), single=False)
        assert second[1] != free
        assert f"port {free} is taken" in capsys.readouterr().out
        release("127.0.0.1", free)
        with socket.socket() as after:  # let go: the service itself can listen there now
            after.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            after.bind(("127.0.0.1", free))
        held.listen()
        host, port = listen_address({}, attrs.evolve(search, default_port=taken), single=False)
        assert host == "127.0.0.1" and port != taken
        assert capsys.readouterr().out == (
            f"cairn: search: port {taken} is taken; listening on a free one (set SEARCH_PORT "
            "to choose)\n"
        )
        # A port asked for is kept, taken or not: listening on it then fails, naming it.
        asked = {"SEARCH_PORT": str(taken)}
        assert listen_address(asked, search, single=False) == ("127.0.0.1", taken)
        # The other services' clients know only the port setting: no fallback for them.
        images = attrs.evolve(root.load("images"), default_port=taken)
        assert listen_address({}, images, single=False) == ("127.0.0.1", taken)


def test_a_bad_port_names_its_variable() -> None:
    with pytest.raises(ConfigError, match="IMAGES_PORT: must be at most 65535"):
        listen_address({"IMAGES_PORT": "70000"}, root.load("images"), single=False)
