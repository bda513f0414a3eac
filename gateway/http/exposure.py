"""Who may reach a service that changes things: beyond loopback (or behind a proxy that
forwards clients from anywhere), a service refuses to start until ``ALLOW_IPS`` says which
clients may, or, where tokens can stand in, until this cairn has tokens. The VM service and
the console ask for ``ALLOW_IPS`` always; functions and images take tokens instead.

The message names the setting, where the service listens and what anyone reaching it could
do, so the admin sees why and what to set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from actors.config import ConfigError, env_list
from gateway.http.loopback import is_loopback_address
from gateway.http.tokens import TokenError, TokenStore


def require_allow_ips(what: str, host: str, env: Mapping[str, str], could: str) -> None:
    """Refuse ``what`` listening on ``host`` beyond loopback without ``ALLOW_IPS``;
    ``could``: what a client that reaches it could then do."""
    if is_loopback_address(host) or env_list(env, "ALLOW_IPS"):
        return
    raise ConfigError(
        "ALLOW_IPS",
        f"must be set when {what} listens on {host} (beyond loopback): {could}; list the "
        "client addresses or CIDRs allowed to, or set ALLOW_IPS=0.0.0.0 to allow every client "
        "that can reach it",
    )


def _has_tokens(tokens_file: Path) -> bool:
    try:
        return TokenStore(tokens_file).enabled()
    except TokenError:
        return True  # a damaged file: every route answers 503 until it is mended


def require_allow_ips_or_tokens(
    what: str, host: str, env: Mapping[str, str], could: str, tokens_file: Path
) -> None:
    """Refuse ``what`` when clients from beyond loopback can reach it (it listens there, or
    ``TRUSTED_PROXIES`` says a proxy forwards them) while neither ``ALLOW_IPS`` nor a token
    says who they may be."""
    proxies = env_list(env, "TRUSTED_PROXIES")
    if (is_loopback_address(host) and not proxies) or env_list(env, "ALLOW_IPS"):
        return
    if _has_tokens(tokens_file):
        return
    where = (
        f"listens on {host} (beyond loopback)"
        if not is_loopback_address(host)
        else f"takes clients forwarded by TRUSTED_PROXIES ({', '.join(proxies)})"
    )
    raise ConfigError(
        "ALLOW_IPS",
        f"must be set when {what} {where} and this cairn has no tokens: {could}; list the "
        "client addresses or CIDRs allowed to, or make tokens (cairn token create NAME --role "
        "admin), or set ALLOW_IPS=0.0.0.0 to allow every client that can reach it",
    )
