"""The three-node recipe of ops/deploy/cluster/ (docs/cluster.md): the shipped nats-server
configuration, filled in for three members on loopback with the files `cairn cluster init`
made, is valid and forms one JetStream cluster whose replicated stream takes and serves
messages after one member is killed; it is closed (a client without a key, and a server
without a certificate of the cluster's CA, are refused); the units parse as systemd reads
them; the env example is what cairn accepts."""

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
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import attrs
import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext

from actors.platform import lease_settings, stream_settings
from events.access import NatsAccess
from events.bus import flush_all
from events.cluster_kit import ClusterKit
from events.cluster_kit import Member as KitMember
from events.nats_server import _TIED_TO_PARENT, end_server, find_binary
from events.permissions import Role
from tests.conftest import wait_for
from tests.faults.conftest import stray_processes
from tests.ops.test_systemd import unit_section
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
CAIRN = str(Path(sys.executable).parent / "cairn")
CLUSTER = ROOT / "ops" / "deploy" / "cluster"
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
        return f"tls://127.0.0.1:{self.port}"

    @property
    def etc(self) -> Path:
        """Where this member's files are, as /etc/cairn-nats on a node."""
        return self.config_path.parent


def render(template: str, member: Member, members: list[Member]) -> str:
    """The shipped configuration with this member's values in place of its placeholders
    (loopback and free ports in place of the node addresses and the standard ports)."""
    swaps = {
        '"<this-node-name>"': f'"{member.name}"',
        '"<this-node-address>:4222"': f'"127.0.0.1:{member.port}"',
        '"<this-node-address>:6222"': f'"127.0.0.1:{member.route_port}"',
        '"127.0.0.1:8222"': f'"127.0.0.1:{member.monitor_port}"',
        '"/var/lib/cairn-nats"': f'"{member.store_dir}"',
        '"/etc/cairn-nats/': f'"{member.etc}/',
    }
    for i, other in enumerate(members, start=1):
        swaps[f'"nats-route://<address-{i}>:6222"'] = f'"nats-route://127.0.0.1:{other.route_port}"'
    for old, new in swaps.items():
        # A shipped file that no longer reads like this must fail here, not run on 4222.
        assert old in template, f"{CONFIG.name} no longer has {old}"
        template = template.replace(old, new)
    assert 'include "auth.conf"' in template and "verify: true" in template
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
    # The kit as the operator makes it, with the shipped command.
    kit = root / "kit"
    done = subprocess.run(
        [CAIRN, "cluster", "init", str(kit), *(f"--member={m.name}=127.0.0.1" for m in members)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "/etc/cairn-nats/auth.conf" in done.stdout
    template = CONFIG.read_text()
    for member in members:
        member.store_dir.mkdir(parents=True)
        # The files its placement says go to /etc/cairn-nats on that node.
        shutil.copy(kit / "auth.conf", member.etc / "auth.conf")
        shutil.copy(kit / "tls" / "ca.pem", member.etc / "ca.pem")
        shutil.copy(kit / "tls" / f"{member.name}.pem", member.etc / "server.pem")
        shutil.copy(kit / "tls" / f"{member.name}-key.pem", member.etc / "server-key.pem")
        member.config_path.write_text(render(template, member, members))
    return members


def host_access(root: Path, servers: list[str]) -> NatsAccess:
    """How a cairn host reaches the recipe's cluster: NATS_KEYS and NATS_CA of the kit."""
    kit = ClusterKit(root / "kit")
    return NatsAccess(",".join(servers), kit.keyring, kit.ca_file)


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
                    sys.executable,
                    "-S",
                    "-c",
                    _TIED_TO_PARENT,
                    str(os.getpid()),
                    str(find_binary()),
                    "-c",
                    str(member.config_path),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                )
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


async def connect(root: Path, servers: list[str], *, dont_randomize: bool = False) -> Client:
    """A client as a cairn host is one (TLS checked against the kit's CA, the host key)."""
    return await nats.connect(
        servers=servers,
        connect_timeout=1,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        dont_randomize=dont_randomize,
        **host_access(root, servers).client_options(Role.HOST),
    )


def connected_port(nc: Client) -> int | None:
    return nc.connected_url.port if nc.connected_url is not None else None


async def publish(js: JetStreamContext, payload: bytes) -> int | None:
    """The stream sequence the message got, or None while the cluster cannot take it. The
    message id makes a retry of a publish whose answer was lost store it once."""
    try:
        ack = await js.publish(
            "cairn.evt.recipe", payload, timeout=1, headers={"Nats-Msg-Id": payload.decode()}
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

        nc = await connect(tmp_path, [m.url for m in members])
        try:
            js = nc.jetstream(timeout=2)
            config = StreamConfig(
                name=STREAM, subjects=["cairn.evt.recipe"], num_replicas=3, storage=StorageType.FILE
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
        urls = [doomed.url] + [m.url for m in survivors]
        nc = await connect(tmp_path, urls, dont_randomize=True)
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
    cairn_unit = (ROOT / "ops" / "deploy" / "systemd" / "cairn.service").read_text()
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


async def routez(session: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    async with session.get(f"http://127.0.0.1:{port}/routez") as resp:
        body: dict[str, Any] = await resp.json()
        return body


def rogue_config(root: Path, members: list[Member], with_cert: bool) -> tuple[Path, int, int]:
    """A fifth server that knows the cluster's name and route ports (both in the shipped
    example), with a certificate of a CA of its own making or none at all."""
    client_port, route_port, monitor_port = free_ports(3)
    routes = ", ".join(f'"nats-route://127.0.0.1:{m.route_port}"' for m in members)
    tls = ""
    if with_cert:
        own = ClusterKit.create(root / "rogue-kit", [KitMember("rogue", ("127.0.0.1",))])
        tls = (
            f'  tls {{ cert_file: "{own.cert_file("rogue")}", key_file: "{own.key_file("rogue")}",'
            f' ca_file: "{own.ca_file}", timeout: 2 }}\n'
        )
    path = root / "rogue.conf"
    path.write_text(
        f'server_name: rogue\nlisten: "127.0.0.1:{client_port}"\n'
        f'http: "127.0.0.1:{monitor_port}"\n'
        f'cluster {{\n  name: "cairn"\n  listen: "127.0.0.1:{route_port}"\n{tls}'
        f"  routes: [{routes}]\n}}\n"
    )
    return path, client_port, monitor_port


@pytest.mark.parametrize("with_cert", [False, True], ids=["no-cert", "cert-of-another-ca"])
async def test_a_server_without_the_clusters_certificate_cannot_join(
    tmp_path: Path, with_cert: bool
) -> None:
    members = members_under(tmp_path)
    config, rogue_port, rogue_monitor = rogue_config(tmp_path, members, with_cert)
    rogue = Member("rogue", rogue_port, 0, rogue_monitor, config, tmp_path / "rogue")
    async with running([*members, rogue], tmp_path), aiohttp.ClientSession() as session:

        async def formed() -> bool:
            return [await meta_cluster_size(session, m) for m in members] == [3, 3, 3]

        await wait_for(formed, timeout=15, what="one JetStream cluster of three")

        def refused_by_members() -> bool:
            # Each member dials the rogue too (it is no route of theirs, but the rogue dials
            # them): the TLS handshake fails on their side, and they log it.
            logs = [(m.etc / "nats-server.log").read_text(errors="replace") for m in members]
            return any("TLS route handshake error" in log for log in logs)

        await wait_for(refused_by_members, timeout=20, what="the members refusing the rogue")
        assert (await routez(session, rogue_monitor))["num_routes"] == 0
        for member in members:
            remote = {
                r.get("remote_name")
                for r in (await routez(session, member.monitor_port)).get("routes", [])
            }
            assert "rogue" not in remote, remote

        # What a rogue was for: reading the events. A subscriber on it hears nothing, while
        # a host's publishes are taken by the cluster.
        eavesdropper = await nats.connect(f"nats://127.0.0.1:{rogue_port}")
        heard: list[bytes] = []

        async def on_msg(msg: Msg) -> None:
            heard.append(msg.data)

        await eavesdropper.subscribe("cairn.evt.>", cb=on_msg)
        await flush_all(eavesdropper)  # it is listening before the publishes below
        nc = await connect(tmp_path, [m.url for m in members])
        try:
            for i in range(20):
                await nc.publish("cairn.evt.vm.100", f'{{"passwd": "{i}"}}'.encode())
            await nc.flush()
        finally:
            await nc.close()
        await eavesdropper.flush()
        await eavesdropper.close()
        assert heard == []


async def test_a_client_without_a_key_cannot_connect(tmp_path: Path) -> None:
    members = members_under(tmp_path)
    kit = ClusterKit(tmp_path / "kit")
    async with running(members, tmp_path):
        context = NatsAccess(members[0].url, None, kit.ca_file).tls_context()

        async def anonymous() -> str:
            try:
                nc = await nats.connect(
                    members[0].url,
                    tls=context,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    connect_timeout=2,
                )
            except Exception as exc:
                return str(exc)
            await nc.close()
            return "connected"

        found = await wait_for(anonymous, what="the server to answer")  # refused, once it is up
        assert "authorization violation" in found.lower(), found
