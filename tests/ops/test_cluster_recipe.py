"""The three-node recipe of ops/cluster/ (docs/cluster.md): the shipped nats-server
configuration, filled in for three members on loopback, is valid and forms one JetStream
cluster whose replicated stream takes and serves messages after one member is killed; the
units parse as systemd reads them; the env example is what cairn accepts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import attrs
import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from actors.platform import lease_settings, stream_settings
from events.nats_server import _TIED_TO_PARENT, end_server, find_binary, free_ports
from tests.conftest import wait_for
from tests.faults.conftest import stray_processes
from tests.ops.test_systemd import unit_section

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "ops" / "cluster"
CONFIG = CLUSTER / "nats-server.conf.example"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
STREAM = "RECIPE"


@attrs.define
class Member:
    name: str
    port: int
    route_port: int
    monitor_port: int
    config_path: Path
    store_dir: Path
    proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


def render(template: str, member: Member, members: list[Member]) -> str:
    """The shipped configuration with this member's values in place of its placeholders
    (loopback and free ports in place of the node addresses and the standard ports)."""
    swaps = {
        '"<this-node-name>"': f'"{member.name}"',
        '"<this-node-address>:4222"': f'"127.0.0.1:{member.port}"',
        '"<this-node-address>:6222"': f'"127.0.0.1:{member.route_port}"',
        '"127.0.0.1:8222"': f'"127.0.0.1:{member.monitor_port}"',
        '"/var/lib/cairn-nats"': f'"{member.store_dir}"',
    }
    for i, other in enumerate(members, start=1):
        swaps[f'"nats-route://<address-{i}>:6222"'] = f'"nats-route://127.0.0.1:{other.route_port}"'
    for old, new in swaps.items():
        # A shipped file that no longer reads like this must fail here, not run on 4222.
        assert old in template, f"{CONFIG.name} no longer has {old}"
        template = template.replace(old, new)
    settings = [line for line in template.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in settings if "<" in line], "a placeholder is left"
    return template


def members_under(root: Path) -> list[Member]:
    ports = iter(free_ports(9))  # all different
    members = [
        Member(
            name=f"node{i}",
            port=next(ports),
            route_port=next(ports),
            monitor_port=next(ports),
            config_path=root / f"node{i}" / "nats-server.conf",
            store_dir=root / f"node{i}" / "store",
        )
        for i in (1, 2, 3)
    ]
    template = CONFIG.read_text()
    for member in members:
        member.store_dir.mkdir(parents=True)
        member.config_path.write_text(render(template, member, members))
    return members


def test_the_filled_in_configuration_is_valid(tmp_path: Path) -> None:
    for member in members_under(tmp_path):
        done = subprocess.run(
            [find_binary(), "-t", "-c", member.config_path], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "is valid" in done.stdout + done.stderr


@contextlib.asynccontextmanager
async def running(members: list[Member], root: Path) -> AsyncIterator[None]:
    """Every member as a nats-server process (tied to this one, so a killed test leaves none);
    all of them ended afterwards, and none left over."""
    try:
        for member in members:
            log = member.config_path.parent / "nats-server.log"
            with log.open("ab") as out:
                member.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-S", "-c", _TIED_TO_PARENT, str(os.getpid()),
                    str(find_binary()), "-c", str(member.config_path),
                    stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out,
                    start_new_session=True,
                )  # fmt: skip
        yield
    finally:
        for member in members:
            proc, member.proc = member.proc, None
            if proc is not None:
                await end_server(proc)
    assert not stray_processes(str(root))


async def meta_cluster_size(session: aiohttp.ClientSession, member: Member) -> int:
    """What the member's monitoring port says of its JetStream cluster (0: not yet formed)."""
    try:
        async with session.get(f"http://127.0.0.1:{member.monitor_port}/jsz") as resp:
            body = await resp.json()
    except aiohttp.ClientError:
        return 0
    meta = body.get("meta_cluster") or {}
    return int(meta.get("cluster_size", 0)) if meta.get("leader") else 0


async def connect(servers: list[str], *, dont_randomize: bool = False) -> Client:
    return await nats.connect(
        servers=servers, connect_timeout=1, reconnect_time_wait=0.1,
        max_reconnect_attempts=-1, dont_randomize=dont_randomize,
    )  # fmt: skip


def connected_port(nc: Client) -> int | None:
    return nc.connected_url.port if nc.connected_url is not None else None


async def publish(js: JetStreamContext, payload: bytes) -> int | None:
    """The stream sequence the message got, or None while the cluster cannot take it. The
    message id makes a retry of a publish whose answer was lost store it once."""
    try:
        ack = await js.publish(
            "recipe.events", payload, timeout=1, headers={"Nats-Msg-Id": payload.decode()}
        )
    except (nats.errors.Error, TimeoutError):
        return None
    return ack.seq


async def test_three_members_form_one_cluster_that_survives_a_kill(tmp_path: Path) -> None:
    members = members_under(tmp_path)
    async with running(members, tmp_path), aiohttp.ClientSession() as session:

        async def formed() -> bool:
            sizes = [await meta_cluster_size(session, m) for m in members]
            return sizes == [3, 3, 3]

        await wait_for(formed, timeout=15, what="one JetStream cluster of three")

        nc = await connect([m.url for m in members])
        try:
            js = nc.jetstream(timeout=2)
            config = StreamConfig(
                name=STREAM, subjects=["recipe.>"], num_replicas=3, storage=StorageType.FILE
            )

            async def added() -> bool:
                # The meta leader may not have heard from every peer yet: ask again.
                try:
                    info = await js.add_stream(config)
                except (nats.errors.Error, TimeoutError):
                    return False
                return info.config.num_replicas == 3

            await wait_for(added, what="a stream on all three servers")
            first = await wait_for(lambda: publish(js, b"before"), what="a first publish")
            assert (await js.get_msg(STREAM, first)).data == b"before"
            leader = (await js.stream_info(STREAM)).cluster
            assert leader is not None and leader.leader is not None
            doomed = next(m for m in members if m.name == leader.leader)
        finally:
            await nc.close()

        # A client connected to the stream's leader, as cairn on that node would be: it has
        # to fail over, and the stream has to elect a leader among the two left.
        survivors = [m for m in members if m is not doomed]
        nc = await connect([doomed.url] + [m.url for m in survivors], dont_randomize=True)
        try:
            assert connected_port(nc) == doomed.port
            assert doomed.proc is not None
            doomed.proc.send_signal(signal.SIGKILL)
            await doomed.proc.wait()
            doomed.proc = None

            js = nc.jetstream(timeout=2)
            second = await wait_for(
                lambda: publish(js, b"after"), timeout=20, what="a publish after the kill"
            )
            assert connected_port(nc) in {m.port for m in survivors}
            read = [(await js.get_msg(STREAM, seq)).data for seq in (first, second)]
            assert read == [b"before", b"after"]
            state = (await js.stream_info(STREAM)).state
            assert state.messages == 2
        finally:
            await nc.close()


def test_the_units_parse_without_a_warning(tmp_path: Path) -> None:
    if SYSTEMD_ANALYZE is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart exists: point the units at this checkout's binaries.
    nats_unit = (CLUSTER / "cairn-nats.service").read_text()
    assert "/opt/cairn/.venv/bin/nats-server " in nats_unit
    nats_unit = nats_unit.replace("/opt/cairn/.venv/bin/nats-server", str(find_binary()))
    (tmp_path / "cairn-nats.service").write_text(nats_unit)
    cairn_unit = (ROOT / "ops" / "systemd" / "cairn.service").read_text()
    cairn_unit = cairn_unit.replace(
        "/opt/cairn/.venv/bin/cairn", str(Path(sys.executable).parent / "cairn")
    )
    cairn_unit = cairn_unit.replace("EnvironmentFile=/etc", "EnvironmentFile=-/etc")
    (tmp_path / "cairn.service").write_text(cairn_unit)
    shutil.copytree(CLUSTER / "cairn.service.d", tmp_path / "cairn.service.d")
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "cairn-nats.service", "cairn.service"],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"},
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_drop_in_starts_cairn_after_its_nats_server() -> None:
    unit = unit_section(CLUSTER / "cairn.service.d" / "cluster.conf", "Unit")
    assert "cairn-nats.service" in " ".join(unit["After"]).split()
    assert "cairn-nats.service" in " ".join(unit["Wants"]).split()


def test_the_nats_unit_stores_where_the_configuration_says() -> None:
    service = unit_section(CLUSTER / "cairn-nats.service", "Service")
    config = CONFIG.read_text()
    # StateDirectory=cairn-nats is /var/lib/cairn-nats, the one place the unit may write.
    assert service["StateDirectory"] == ["cairn-nats"]
    assert 'store_dir: "/var/lib/cairn-nats"' in config
    # The path the configuration's header says to install it at is the one the unit reads.
    assert service["ExecStart"][0].split()[1:] == ["-c", "/etc/cairn-nats/nats-server.conf"]
    assert "/etc/cairn-nats/nats-server.conf" in config
    assert service["Restart"] == ["on-failure"] and "LimitNOFILE" in service


def test_the_env_example_is_what_cairn_accepts() -> None:
    env: dict[str, str] = {}
    for line in (CLUSTER / "cairn.env.cluster.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep and key.isidentifier(), line
            env[key] = value
    assert env["CAIRN_CLUSTER"] == "1" and env["CAIRN_HOST_NAME"]
    assert env["CAIRN_EVENT_STORE"].startswith("postgresql+asyncpg://")
    assert stream_settings(env).replicas == 3
    assert lease_settings(env).replicas == 3
    # Three members, on the client port the member configuration listens on.
    urls = [urlsplit(u) for u in env["NATS_URL"].split(",")]
    assert len(urls) == 3 and {u.port for u in urls} == {4222}
