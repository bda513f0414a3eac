"""Configuration from the environment and a ``.env`` file in the working directory.

Variables set in the environment win over ``.env``. Every parse error names the variable and
the rule it broke; values of variables that look secret are never echoed.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from dotenv import dotenv_values

_N = TypeVar("_N", int, float)

_SECRET_MARKERS = ("PASSWORD", "SECRET", "TOKEN", "KEY")


class ConfigError(Exception):
    """A configuration variable is missing or breaks its rule."""

    def __init__(self, name: str, rule: str, value: str | None = None) -> None:
        shown = ""
        if value is not None:
            secret = any(marker in name.upper() for marker in _SECRET_MARKERS)
            shown = " (value hidden)" if secret else f" (got {value!r})"
        super().__init__(f"{name}: {rule}{shown}")
        self.name = name
        self.rule = rule


def load_env(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment laid over ``<cwd>/.env``."""
    merged: dict[str, str] = {}
    dotenv = (cwd or Path.cwd()) / ".env"
    if dotenv.is_file():
        merged.update({k: v for k, v in dotenv_values(dotenv).items() if v is not None})
    merged.update(os.environ if environ is None else environ)
    return merged


def _raw(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _present(env: Mapping[str, str], name: str, required: bool) -> str | None:
    """The trimmed value, None when unset or blank, refused then if the variable is required."""
    value = _raw(env, name)
    if value is None and required:
        raise ConfigError(name, "is required")
    return value


def _converted(name: str, value: str, convert: Callable[[str], _N], rule: str) -> _N:
    """`value` as a number, or the variable's error naming `rule`."""
    try:
        return convert(value)
    except ValueError:
        raise ConfigError(name, rule, value) from None


def env_str(
    env: Mapping[str, str], name: str, default: str | None = None, *, required: bool = False
) -> str | None:
    value = _present(env, name, required)
    return default if value is None else value


def env_required(env: Mapping[str, str], name: str) -> str:
    value = _present(env, name, required=True)
    assert value is not None  # _present refused the missing value
    return value


def env_int(
    env: Mapping[str, str],
    name: str,
    default: int | None = None,
    *,
    min: int | None = None,
    max: int | None = None,
    required: bool = False,
) -> int | None:
    value = _present(env, name, required)
    if value is None:
        return default
    number = _converted(name, value, int, "must be an integer")
    if min is not None and number < min:
        raise ConfigError(name, f"must be at least {min}", value)
    if max is not None and number > max:
        raise ConfigError(name, f"must be at most {max}", value)
    return number


def env_float(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    min: float | None = None,
) -> float:
    value = _raw(env, name)
    if value is None:
        return default
    number = _converted(name, value, float, "must be a number")
    if number != number or (min is not None and number < min):  # NaN never passes
        raise ConfigError(name, f"must be a number of at least {min}", value)
    return number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = _raw(env, name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(name, "must be one of 1/0, true/false, yes/no, on/off", value)


def env_choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` (compared case-insensitively)."""
    value = _raw(env, name)
    if value is None:
        return default
    if value.lower() not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}", value)
    return value.lower()


def env_list(env: Mapping[str, str], name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    """A comma-separated list; entries are trimmed and empty ones dropped."""
    value = _raw(env, name)
    if value is None:
        return default
    return tuple(item.strip() for item in value.split(",") if item.strip())


def env_networks(
    env: Mapping[str, str], name: str
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of addresses or CIDR networks."""
    networks = []
    for item in env_list(env, name):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ConfigError(name, "entries must be IP addresses or CIDR networks", item) from None
    return tuple(networks)


def is_ip(text: str) -> bool:
    """Whether ``text`` is an IP address literal (v4 or v6), not a name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def data_dir(env: Mapping[str, str], cwd: Path | None = None) -> Path:
    """``CAIRN_DATA``, default ``./data`` under the working directory; created if missing."""
    path = Path(env_str(env, "CAIRN_DATA") or (cwd or Path.cwd()) / "data")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("CAIRN_DATA", f"must be a directory cairn can create ({exc})") from None
    return path.resolve()
