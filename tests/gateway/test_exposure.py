"""The functions and image services started where clients from elsewhere reach them (beyond
loopback, or behind a proxy named in TRUSTED_PROXIES): refused until ALLOW_IPS or a token says
who may store, run and delete, as the VM service and the console refuse without ALLOW_IPS."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from actors.config import ConfigError
from actors.platform import Runtime
from gateway.http.tokens import Role, create
from tests.conftest import Serve
from tests.gateway.test_vm_exposure import refused

OPEN = {"functions": "stores, deletes and runs code", "images": "uploads and deletes files"}
NAMED = {
    "functions": "the functions service (FUNCTIONS_HOST)",
    "images": "the image service (IMAGES_HOST)",
}


@pytest.mark.parametrize("service", ["functions", "images"])
async def test_beyond_loopback_without_allow_ips_or_tokens_refuses_to_start(
    tmp_path: Path, service: str
) -> None:
    err = await refused(["serve", service], tmp_path, **{f"{service.upper()}_HOST": "0.0.0.0"})
    assert (
        f"cairn: configuration error: ALLOW_IPS: must be set when {NAMED[service]} listens on "
        "0.0.0.0 (beyond loopback) and this cairn has no tokens: whoever reaches it "
        f"{OPEN[service]}; list the client addresses or CIDRs allowed to, or make tokens (cairn "
        "token create NAME --role admin), or set ALLOW_IPS=0.0.0.0 to allow every client that "
        "can reach it"
    ) in err


@pytest.mark.parametrize("service", ["functions", "images"])
async def test_behind_a_trusted_proxy_too(serve: Serve, service: str) -> None:
    """On loopback, but a proxy forwards clients from anywhere: the same refusal, naming it."""
    with pytest.raises(ConfigError) as caught:
        await serve(service, TRUSTED_PROXIES="127.0.0.1")
    assert caught.value.name == "ALLOW_IPS"
    assert (
        f"must be set when {NAMED[service]} takes clients forwarded by TRUSTED_PROXIES "
        "(127.0.0.1) and this cairn has no tokens"
    ) in str(caught.value)


@pytest.mark.parametrize("service", ["functions", "images"])
async def test_allow_ips_or_a_token_lets_it_start(
    serve: Serve, runtime: Runtime, service: str
) -> None:
    listen = {service: ("0.0.0.0", 0)}
    await serve(service, listen=listen, ALLOW_IPS="127.0.0.1")
    await serve(service, TRUSTED_PROXIES="127.0.0.1", ALLOW_IPS="10.0.0.5")
    create(runtime.data_dir / "tokens.json", "ada", Role.ADMIN)
    base = await serve(service, listen=listen)
    async with aiohttp.ClientSession() as http, http.get(f"{base}/health") as resp:
        assert resp.status == 200
