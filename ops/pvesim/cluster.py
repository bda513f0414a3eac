"""SimCluster: a three-node Proxmox VE cluster on loopback (see docs/simulator.md).

The main node runs its commands as local subprocesses through shims on PATH; the other nodes are
asyncssh servers on 127.0.0.2/127.0.0.3; each running VM is a guest SSH server on its cloud-init
address. Fake commands tell the cluster about power changes over a unix socket and wait for it to
act, so with zero delays a guest is listening by the time `qm start` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncssh
import attrs

from .access import DEFAULT_VERSION, VERSIONS, api_settings, cairn_acl, new_token
from .context import DURATIONS, take_failure
from .guest import GuestRun
from .qm import add_gui_vm, merged, restart_after_reboot
from .sshd import Guest, NodeSSH
from .state import (
    DEFAULT_DELAY_SCALE,
    Store,
    default_cluster,
    images_storage,
    installer_storages,
    storage_info,
)

log = logging.getLogger("pvesim")

DEFAULT_NODES = {"pve1": "127.0.0.1", "pve2": "127.0.0.2", "pve3": "127.0.0.3"}
PROGRAMS = ("qm", "pvesh", "pvesm")
SIM_TOKEN = "cairn@pve!sim"
CONTROL_TIMEOUT = 30.0  # below the fake commands' 60 s socket time-out


@attrs.frozen
class VmView:
    vmid: int
    node: str
    status: str
    config: dict[str, Any]
    lock: str | None


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(hosts: list[str]) -> int:
    """A port free on every given loopback address."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((hosts[0], 0))
            port = int(s.getsockname()[1])
        if all(_port_free(h, port) for h in hosts[1:]):
            return port
    raise RuntimeError("no port free on all simulator addresses")


def _load_or_make_key(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.parent.mkdir(parents=True, exist_ok=True)
    key.write_private_key(str(path))
    os.chmod(path, 0o600)
    key.write_public_key(str(path) + ".pub")
    return key


# The fake commands need only the standard library, so the shim skips `site` (-S): site-packages
# and editable-install finders cost more than the command itself.
PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def shim_text(python: str, root: Path, node: str, program: str) -> str:
    return (
        "#!/bin/sh\n"
        f"# pvesim: fake `{program}` of node {node}\n"
        f"PVESIM_ROOT={shlex.quote(str(root))} PVESIM_NODE={shlex.quote(node)} "
        f"PYTHONPATH={shlex.quote(str(PACKAGE_PARENT))} "
        f'exec {shlex.quote(python)} -S -m pvesim.cli {program} "$@"\n'
    )


def known_hosts_line(host: str, port: int, key: asyncssh.SSHKey) -> str:
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {key.export_public_key().decode().split()[0]} " + (
        key.export_public_key().decode().split()[1] + "\n"
    )


class SimCluster:
    def __init__(
        self,
        root: Path | str,
        *,
        nodes: dict[str, str] | None = None,
        main: str = "pve1",
        delay_scale: float = DEFAULT_DELAY_SCALE,
        statd_lag: float | None = None,
        node_ssh_port: int | None = None,
        vm_ssh_port: int | None = None,
        python: str = sys.executable,
        storage_layout: str = "lvm",
        api: bool = True,
        api_port: int | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.api = api
        self.api_port = api_port
        self.pveproxy: Any = None  # pveproxy.PveProxy when `api` (imported on start: aiohttp)
        installer_storages(storage_layout)  # refuses an unknown layout at once
        self.storage_layout = storage_layout
        self.nodes = dict(nodes or DEFAULT_NODES)
        self.main_node = main
        self.delay_scale = delay_scale
        self.statd_lag = statd_lag
        self.node_ssh_port = node_ssh_port
        self.vm_ssh_port = vm_ssh_port
        self.python = python
        self.store = Store(self.root)
        self.bin_root = self.root / "bin"
        self.ssh_dir = self.root / "ssh"
        self.known_hosts = self.ssh_dir / "known_hosts"
        self.node_key = self.ssh_dir / "id_ed25519"
        self._executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="pvesim")
        self._node_servers: list[NodeSSH] = []
        self._guests: dict[int, Guest] = {}
        self._guest_tasks: dict[int, asyncio.Task[None]] = {}
        self._guest_changed = asyncio.Condition()
        self._runs: dict[int, list[GuestRun]] = {}
        self._history: dict[int, list[str]] = {}
        self._control: asyncio.AbstractServer | None = None
        self._sock_dir: str | None = None
        self._started = False

    # --- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.store.init(
            default_cluster(
                self.nodes, self.main_node, self.delay_scale, self.statd_lag, self.storage_layout
            )
        )
        # Every node answers SSH, the main one too (cairn may reach it that way: PVE_SSH_MAIN).
        addresses = list(self.nodes.values())
        with self.store.locked() as txn:
            previous = dict(txn.cluster["settings"])
        # Reuse the ports of the last run when they are still free, so a restarted `cairn sim`
        # keeps the environment a VM service was started with.
        if self.node_ssh_port is None:
            old = previous.get("node_ssh_port")
            if old and all(_port_free(h, int(old)) for h in addresses):
                self.node_ssh_port = int(old)
            else:
                self.node_ssh_port = pick_port(addresses)
        if self.vm_ssh_port is None:
            old = previous.get("vm_ssh_port")
            if old and _port_free("127.0.0.1", int(old)):
                self.vm_ssh_port = int(old)
            else:
                self.vm_ssh_port = pick_port(["127.0.0.1", "127.0.0.100"])
        # A unix socket path must stay under ~108 bytes, which a pytest tmp_path can exceed.
        self._sock_dir = tempfile.mkdtemp(prefix="pvesim-")
        sock_path = os.path.join(self._sock_dir, "control.sock")
        with self.store.locked() as txn:
            settings = txn.cluster["settings"]
            settings.update(
                delay_scale=self.delay_scale,
                statd_lag=self.statd_lag,
                control_socket=sock_path,
                node_ssh_port=self.node_ssh_port,
                vm_ssh_port=self.vm_ssh_port,
            )
            txn.save_cluster()
        (self.root / "guests").mkdir(exist_ok=True)
        client_key = _load_or_make_key(self.node_key)
        self._write_shims()
        self._control = await asyncio.start_unix_server(self._on_control, path=sock_path)
        lines = []
        for name, ip in self.nodes.items():
            host_key = _load_or_make_key(self.ssh_dir / f"ssh_host_ed25519_key.{name}")
            server = NodeSSH(self.store, name, ip, self.node_ssh_port, host_key, [client_key],
                             self._executor)  # fmt: skip
            await server.start()
            self._node_servers.append(server)
            lines.append(known_hosts_line(ip, self.node_ssh_port, host_key))
        self.known_hosts.write_text("".join(lines))
        if self.api:
            await self._start_api(previous)
        self._started = True
        for vm in self.vms().values():
            if vm.status == "running":
                await self._bring_up(vm.vmid, 0.0)

    async def _start_api(self, previous: dict[str, Any]) -> None:
        from .pveproxy import PveProxy

        host = self.nodes[self.main_node]
        if self.api_port is None:
            old = previous.get("api_port")
            self.api_port = int(old) if old and _port_free(host, int(old)) else pick_port([host])
        images = self.images_storage()
        with self.store.locked() as txn:
            api = api_settings(txn.cluster["settings"])
            api.setdefault("version", DEFAULT_VERSION)
            tokens = api.setdefault("tokens", {})
            if SIM_TOKEN not in tokens:
                # What an admin who followed `cairn pve bootstrap` has made.
                tokens[SIM_TOKEN] = new_token(cairn_acl(api["version"], images))
            api.setdefault("pools", {})
            txn.cluster["settings"]["api"] = api
            txn.cluster["settings"]["api_port"] = self.api_port
            txn.save_cluster()
        self.pveproxy = PveProxy(self.store, self._executor, host=host)
        await self.pveproxy.start(self.api_port, self.main_node, host)

    async def stop(self) -> None:
        if self.pveproxy is not None:
            await self.pveproxy.stop()
            self.pveproxy = None
        for task in self._guest_tasks.values():
            task.cancel()
        for task in list(self._guest_tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._guest_tasks.clear()
        for guest in list(self._guests.values()):
            await guest.stop()
        self._guests.clear()
        for server in self._node_servers:
            await server.stop()
        self._node_servers.clear()
        if self._control is not None:
            self._control.close()
            await self._control.wait_closed()
            self._control = None
        with contextlib.suppress(FileNotFoundError), self.store.locked() as txn:
            txn.cluster["settings"]["control_socket"] = None
            txn.save_cluster()
        if self._sock_dir:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            self._sock_dir = None
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._started = False

    def _write_shims(self) -> None:
        for node in self.nodes:
            folder = self.bin_root / node
            folder.mkdir(parents=True, exist_ok=True)
            for program in PROGRAMS:
                path = folder / program
                path.write_text(shim_text(self.python, self.root, node, program))
                path.chmod(0o755)

    # --- what the VM service needs ------------------------------------------------------------

    def images_storage(self) -> str:
        """The storage for VM disks of this cluster's layout (`local-lvm`, or `local-zfs`); a
        cluster restarted on an existing root keeps the layout it was made with."""
        with self.store.locked() as txn:
            storages = txn.storages
        return images_storage("zfs" if "local-zfs" in storages else "lvm")

    def bin_dir(self, node: str | None = None) -> Path:
        return self.bin_root / (node or self.main_node)

    def api_env(self, tokenid: str = "") -> dict[str, str]:
        """PVE_API_URL, PVE_API_TOKEN and PVE_API_FINGERPRINT of the simulated pveproxy (its
        default token has exactly the privileges `cairn pve bootstrap` grants)."""
        if self.pveproxy is None:
            return {}
        tokenid = tokenid or SIM_TOKEN
        with self.store.locked() as txn:
            secret = api_settings(txn.cluster["settings"])["tokens"][tokenid]["secret"]
        return {
            "PVE_API_URL": self.pveproxy.url,
            "PVE_API_TOKEN": f"{tokenid}={secret}",
            "PVE_API_FINGERPRINT": self.pveproxy.fingerprint,
        }

    def set_api_version(self, release: str) -> None:
        """The PVE release pveproxy imitates: 7.4, 8.2, 8.4 (default) or 9.1."""
        if release not in VERSIONS:
            raise ValueError(f"unknown PVE release {release!r}; known: {', '.join(VERSIONS)}")
        self._update_api(lambda api: api.update(version=release))

    def add_api_token(self, tokenid: str, acl: dict[str, list[str]]) -> str:
        """Another token (`user@realm!name`) with these ACL entries; returns its secret."""
        token = new_token(acl)
        self._update_api(lambda api: api.setdefault("tokens", {}).__setitem__(tokenid, token))
        return str(token["secret"])

    def grant_api(self, path: str, privs: list[str], tokenid: str = SIM_TOKEN) -> None:
        """Add privileges on an ACL path to a token (`pveum acl modify PATH --tokens ...`)."""

        def change(api: dict[str, Any]) -> None:
            acl = api["tokens"][tokenid]["acl"]
            acl[path] = sorted(set(acl.get(path, [])) | set(privs))

        self._update_api(change)

    def revoke_api(self, path: str, privs: list[str], tokenid: str = SIM_TOKEN) -> None:
        def change(api: dict[str, Any]) -> None:
            acl = api["tokens"][tokenid]["acl"]
            acl[path] = sorted(set(acl.get(path, [])) - set(privs))

        self._update_api(change)

    def cairn_acl(self, pool: str | None = None) -> dict[str, list[str]]:
        images = self.images_storage()
        with self.store.locked() as txn:
            release = str(api_settings(txn.cluster["settings"]).get("version", DEFAULT_VERSION))
        return cairn_acl(release, images, pool)

    def add_pool(self, pool: str, members: tuple[int, ...] = ()) -> None:
        self._update_api(
            lambda api: api.setdefault("pools", {}).setdefault(pool, []).extend(members)
        )

    def pool_members(self, pool: str) -> list[int]:
        with self.store.locked() as txn:
            return list(api_settings(txn.cluster["settings"]).get("pools", {}).get(pool, []))

    def _update_api(self, change: Any) -> None:
        with self.store.locked() as txn:
            api = api_settings(txn.cluster["settings"])
            change(api)
            txn.cluster["settings"]["api"] = api
            txn.save_cluster()

    def env(self, include_path: bool = True) -> dict[str, str]:
        env = {"MAIN_NODE": self.main_node}
        for name, ip in self.nodes.items():
            env[f"NODE_{name}"] = ip
        env.update(
            GATEWAY="127.0.0.1",
            ASSIGN_STORAGE=self.images_storage(),
            PVE_SSH_PORT=str(self.node_ssh_port),
            PVE_SSH_USER="root",
            PVE_SSH_KEY=str(self.node_key),
            PVE_KNOWN_HOSTS=str(self.known_hosts),
            VM_SSH_PORT=str(self.vm_ssh_port),
            PVESIM_ROOT=str(self.root),
        )
        # Both drivers' settings: cairn's VM service keeps the CLI driver against the simulator
        # unless PVE_DRIVER=api asks for the API one.
        env.update(self.api_env())
        if include_path:
            env["PATH"] = f"{self.bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}"
        return env

    # --- settings and failure injection --------------------------------------------------------

    def set_delay_scale(self, scale: float) -> None:
        self.delay_scale = scale
        self.store.update_settings(delay_scale=scale)

    async def set_node_online(self, node: str, online: bool) -> None:
        """Take a non-main node off the network (its SSH server stops) or bring it back."""
        with self.store.locked() as txn:
            txn.cluster["nodes"][node]["online"] = online
            txn.save_cluster()
        server = next(s for s in self._node_servers if s.node == node)
        if online:
            await server.start()
        else:
            await server.stop()

    def add_container(
        self, vmid: int, node: str, name: str | None = None, running: bool = True
    ) -> None:
        """An LXC guest: listed in /cluster/resources and holding its id, nothing more."""
        with self.store.locked() as txn:
            cts = txn.cluster.setdefault("containers", {})
            cts[str(vmid)] = {"node": node, "name": name or f"CT{vmid}",
                              "status": "running" if running else "stopped"}  # fmt: skip
            txn.save_cluster()

    def set_storage_state(self, storage: str, state: str) -> None:
        """`active`, `inactive` (not online: warning in pvesm, allocations fail) or `disabled`."""
        if state not in ("active", "inactive", "disabled"):
            raise ValueError(f"unknown storage state {state!r}")
        with self.store.locked() as txn:
            info = txn.cluster["storages"][storage]
            info["disable"] = state == "disabled"
            info["state"] = "inactive" if state == "inactive" else "active"
            txn.save_cluster()

    def add_storage(
        self,
        name: str,
        type_: str,
        *,
        content: str = "images,rootdir",
        shared: bool = False,
        total_kib: int = 832888832,
    ) -> None:
        """Another storage on every node: `dir` or `nfs` (files under <path>/images/<vmid>/),
        `lvmthin` or `zfspool` (block volumes). `shared` storages (nfs) hold one copy of each
        volume for all nodes, so a migration moves the config only."""
        self.store.add_storage(
            name, storage_info(name, type_, content=content, shared=shared, total_kib=total_kib)
        )

    def add_bridge(
        self, name: str, nodes: tuple[str, ...] | None = None, *, mtu: int | None = None
    ) -> None:
        """A Linux bridge (or SDN VNet) `name` on the given nodes, all by default, with its own
        MTU if given: a VM whose NIC names a bridge its node lacks fails at `qm start`
        (qm.start_refusal); `GET /nodes/{node}/network` lists it."""
        with self.store.locked() as txn:
            for node, info in txn.cluster["nodes"].items():
                if nodes is None or node in nodes:
                    info["bridges"] = sorted({*info.get("bridges", ["vmbr0"]), name})
                    if mtu is not None:
                        info.setdefault("bridge_mtu", {})[name] = mtu
            txn.save_cluster()

    def add_gui_vm(
        self, vmid: int, node: str, *, running: bool = False, name: str | None = None
    ) -> VmView:
        """A VM someone made in the web GUI ("Create VM"): a 32 GiB disk, no cairn mark."""
        with self.store.locked() as txn:
            add_gui_vm(txn, node, vmid, time.time(), running=running, name=name)
        view = self.vm(vmid)
        assert view is not None
        return view

    def inject_id_race(self, vmid: int, *, node: str, running: bool = True) -> None:
        """Just before the next `qm create <vmid>` or `qm clone <template> <vmid>` runs (by
        either driver), someone else creates VM `vmid` on `node` (a GUI "Create VM" in the gap
        between a client's choice of id and its create: `/cluster/nextid` knows nothing of
        that client's reservations)."""
        with self.store.locked() as txn:
            failures = txn.failures()
            failures.append({"command": "id race", "vmid": vmid, "node": None, "times": 1,
                             "after": 0, "target": node, "running": running})  # fmt: skip
            txn.save_failures(failures)

    def set_pvesm_kib_header(self, kib: bool) -> None:
        """True: `Total (KiB)` headers (libpve-storage-perl >= 9.0.14); False: the older ones."""
        self.store.update_settings(pvesm_kib_header=kib)

    def set_statd_lag(self, seconds: float | None) -> None:
        self.statd_lag = seconds
        self.store.update_settings(statd_lag=seconds)

    def inject_failure(
        self, command: str, *, message: str | None = None, exit_code: int | None = None,
        vmid: int | None = None, node: str | None = None, times: int = 1, after: int = 0,
    ) -> None:  # fmt: skip
        """The next `times` matching runs of `command` fail, once `after` of them have passed."""
        with self.store.locked() as txn:
            failures = txn.failures()
            failures.append({"command": command, "message": message, "exit_code": exit_code,
                             "vmid": vmid, "node": node, "times": times,
                             "after": after})  # fmt: skip
            txn.save_failures(failures)

    def clear_failures(self) -> None:
        with self.store.locked() as txn:
            txn.save_failures([])

    def pending_failures(self) -> list[dict[str, Any]]:
        with self.store.locked() as txn:
            return txn.failures()

    # --- inspection ---------------------------------------------------------------------------

    def vms(self) -> dict[int, VmView]:
        with self.store.locked() as txn:
            found = txn.all_vms()
        return {
            int(rec["vmid"]): VmView(
                int(rec["vmid"]), node, rec["status"], merged(rec), rec["config"].get("lock")
            )
            for node, rec in found
        }

    def kill_tasks(self, vmid: int) -> list[str]:
        """Kill VM `vmid`'s running API workers mid-work, as a pvedaemon restart or a node
        crash does (a create leaves its placeholder locked); their UPIDs."""
        return self.pveproxy.kill_tasks(vmid) if self.pveproxy is not None else []

    def vm(self, vmid: int) -> VmView | None:
        return self.vms().get(vmid)

    def volumes(self, node: str) -> dict[str, int]:
        with self.store.locked() as txn:
            vols = txn.volumes(node)
        return {f"{s}:{n}": int(v["size"]) for s, pool in vols.items() for n, v in pool.items()}

    def commands(self) -> list[str]:
        path = self.root / "commands.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            out.append(" ".join([entry["node"], *entry["argv"]]))
        return out

    def guest_runs(self, vmid: int) -> list[GuestRun]:
        return list(self._runs.get(vmid, []))

    def guest_files(self, vmid: int) -> dict[str, str]:
        """The files scripts wrote on VM `vmid`'s guest (guestfs.py): path -> text."""
        with self.store.locked() as txn:
            found = txn.find_vm(vmid)
        return dict(found[1].get("guest_files", {})) if found else {}

    def history(self, vmid: int) -> list[str]:
        """Guest power transitions seen by the cluster: "up", "down", "restart"."""
        return list(self._history.get(vmid, []))

    def guest_up(self, vmid: int) -> bool:
        return vmid in self._guests

    async def wait_guest(self, vmid: int, up: bool = True, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self._guest_changed:
            await self._guest_changed.wait_for(lambda: (vmid in self._guests) == up)

    # --- guests -------------------------------------------------------------------------------

    async def _notify_changed(self) -> None:
        async with self._guest_changed:
            self._guest_changed.notify_all()

    def _scaled(self, kind: str) -> float:
        scale = self.store.delay_scale()
        return DURATIONS[kind] * scale

    async def _bring_up(self, vmid: int, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        loop = asyncio.get_running_loop()

        def read() -> tuple[dict[str, Any] | None, Any, Any]:
            with self.store.locked() as txn:
                found = txn.find_vm(vmid)
                if found is None or found[1]["status"] != "running":
                    return None, None, None
                failure = take_failure(txn, "guest boot", found[0], vmid)
                rekey = take_failure(txn, "guest rekey", found[0], vmid)
                return found[1], failure, rekey

        rec, failure, rekey = await loop.run_in_executor(self._executor, read)
        if rec is None or failure is not None:
            return
        key_path = self.root / "guests" / f"{vmid}.host_key"
        if rekey is not None:
            # Another machine answering at this address (or the guest reinstalled itself).
            key_path.unlink(missing_ok=True)
        boot = rec.get("boot") or {}
        if not boot.get("bootable") or not boot.get("ip") or not boot.get("user"):
            return  # PXE forever, no static address, or no user to log in as: never reachable
        if boot.get("pxe_first") and self._scaled("pxe_timeout") > 0:
            await asyncio.sleep(self._scaled("pxe_timeout"))
        await self._take_down(vmid)
        host_key = await loop.run_in_executor(self._executor, _load_or_make_key, key_path)
        guest = Guest(self.store, vmid, boot, host_key, int(self.vm_ssh_port or 22),
                      self.root / "guests" / f"{vmid}.log", self._executor)  # fmt: skip
        guest.runs = self._runs.setdefault(vmid, [])
        try:
            await guest.start()
        except OSError as exc:
            log.warning("pvesim: guest %s cannot listen on %s: %s", vmid, boot.get("ip"), exc)
            return
        self._guests[vmid] = guest
        self._history.setdefault(vmid, []).append("up")
        await self._notify_changed()

    async def _take_down(self, vmid: int) -> None:
        guest = self._guests.pop(vmid, None)
        if guest is not None:
            await guest.stop()
            self._history.setdefault(vmid, []).append("down")
            await self._notify_changed()

    def _schedule(self, vmid: int, coro: Any) -> None:
        old = self._guest_tasks.pop(vmid, None)
        if old is not None:
            old.cancel()
        task = asyncio.create_task(coro)
        self._guest_tasks[vmid] = task
        task.add_done_callback(lambda t: self._guest_tasks.pop(vmid, None)
                               if self._guest_tasks.get(vmid) is t else None)  # fmt: skip

    async def _reboot(self, vmid: int, node: str, inline: bool) -> None:
        loop = asyncio.get_running_loop()
        if not inline:
            await asyncio.sleep(self._scaled("restart"))
        restarted = await loop.run_in_executor(
            self._executor, restart_after_reboot, self.store, node, vmid, time.time()
        )
        if restarted:
            self._history.setdefault(vmid, []).append("restart")
            await self._bring_up(vmid, 0.0 if inline else self._scaled("boot") * 0.8)

    async def _on_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode().split()
            if len(line) >= 2:
                # The fake command waits for this answer; it must come even if bringing a guest
                # up or down stalls, or a `qm stop` would hang with its caller.
                async with asyncio.timeout(CONTROL_TIMEOUT):
                    await self._act(line[0], int(line[1]))
            writer.write(b"ok\n")
            await writer.drain()
        except Exception:
            log.exception("pvesim: control message failed")
            writer.write(b"error\n")
        finally:
            writer.close()

    async def _act(self, what: str, vmid: int) -> None:
        instant = self._scaled("boot") == 0
        old = self._guest_tasks.pop(vmid, None)
        if old is not None:
            old.cancel()
        if what == "start":
            if instant:
                await self._bring_up(vmid, 0.0)
            else:
                self._schedule(vmid, self._bring_up(vmid, self._scaled("boot")))
        elif what in ("stop", "destroy"):
            await self._take_down(vmid)
            if what == "destroy":
                # A new VM with this id is a new machine with its own SSH host key.
                (self.root / "guests" / f"{vmid}.host_key").unlink(missing_ok=True)
                (self.root / "guests" / f"{vmid}.host_key.pub").unlink(missing_ok=True)
        elif what == "migrate":
            vm = self.vm(vmid)
            if vm is None or vm.status != "running":
                await self._take_down(vmid)
        elif what == "reboot":
            await self._take_down(vmid)
            vm = self.vm(vmid)
            node = vm.node if vm else self.main_node
            if instant and self._scaled("restart") == 0:
                await self._reboot(vmid, node, inline=True)
            else:
                self._schedule(vmid, self._reboot(vmid, node, inline=False))
