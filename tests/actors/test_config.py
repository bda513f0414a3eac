"""Configuration errors name the variable and the rule, and never echo secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.config import (
    ConfigError,
    env_bool,
    env_int,
    env_list,
    env_networks,
    env_required,
    is_ip,
    load_env,
)


def test_dotenv_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text('PORT=8100\nGATEWAY="10.0.0.1"\n# comment\nexport X=1\n')
    env = load_env(tmp_path, {"PORT": "9000"})
    assert env["PORT"] == "9000"
    assert env["GATEWAY"] == "10.0.0.1"
    assert env["X"] == "1"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "PORT: must be an integer (got 'abc')"),
        ("0", "PORT: must be at least 1 (got '0')"),
        ("70000", "PORT: must be at most 65535 (got '70000')"),
    ],
)
def test_int_rules_name_the_variable(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        env_int({"PORT": value}, "PORT", min=1, max=65535)
    assert str(info.value) == message


def test_required_and_defaults() -> None:
    with pytest.raises(ConfigError, match=r"^MAIN_NODE: is required$"):
        env_required({"MAIN_NODE": "  "}, "MAIN_NODE")
    assert env_int({}, "VM_MAX_CPU") is None
    assert env_int({}, "RUN_TIMEOUT", 30) == 30


def test_secret_values_are_not_echoed() -> None:
    with pytest.raises(ConfigError) as info:
        env_int({"EMBEDDING_API_KEY": "sk-very-secret"}, "EMBEDDING_API_KEY")
    assert "sk-very-secret" not in str(info.value)
    assert "value hidden" in str(info.value)


def test_lists_bools_and_networks() -> None:
    assert env_list({"ALLOW_IPS": " 1.2.3.4 , ,10.0.0.0/8 "}, "ALLOW_IPS") == (
        "1.2.3.4",
        "10.0.0.0/8",
    )
    assert env_bool({"SEARCH_REMOTE": "1"}, "SEARCH_REMOTE") is True
    assert env_bool({"SEARCH_REMOTE": "off"}, "SEARCH_REMOTE") is False
    with pytest.raises(ConfigError, match="SEARCH_REMOTE: must be one of"):
        env_bool({"SEARCH_REMOTE": "maybe"}, "SEARCH_REMOTE")
    nets = env_networks({"TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}, "TRUSTED_PROXIES")
    assert [str(n) for n in nets] == ["127.0.0.1/32", "10.0.0.0/8"]
    with pytest.raises(ConfigError, match="TRUSTED_PROXIES: entries must be"):
        env_networks({"TRUSTED_PROXIES": "not-an-ip"}, "TRUSTED_PROXIES")


def test_ip_literals_are_told_from_names() -> None:
    assert is_ip("10.0.0.5") and is_ip("::1") and is_ip("fe80::1")
    for text in ("pve1", "localhost", "10.0.0.256", "10.0.0.5/24", "[::1]", " 10.0.0.5", ""):
        assert not is_ip(text), text
