"""The VM service's configuration, read once from the environment (spec: Configuration)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import TypeVar

import attrs

from actors.config import is_ip

VMID_MIN = 100
VMID_MAX = 254
DEFAULT_PORT = 8100
DEFAULT_BRIDGE = "vmbr0"
DEFAULT_PREFIX = 24
# Templates' ids: a range of their own, far from the VMs' (whose ids are address parts).
TEMPLATE_ID_START = 9000
TEMPLATE_ID_END = 9099
PVE_VMID_MAX = 999999999
# A Linux bridge or SDN VNet name as Proxmox takes it in `net0: ...,bridge=<name>` (its
# pve-bridge-id format is [-_.\w\d]+); Linux keeps interface names to 15 characters.
_BRIDGE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_NODE_PREFIX = "NODE_"
# Proxmox node names are DNS labels; anything else in a NODE_ variable is a typo we refuse early.
_NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


class SettingsError(ValueError):
    """A configuration variable is missing or breaks its rule; the message names it."""


@attrs.frozen
class ApiSettings:
    """The API driver's connection (PVE_API_*): pveproxy's URL, the token, how to trust it."""

    url: str
    token: str = attrs.field(repr=False)  # USER@REALM!TOKENID=SECRET
    fingerprint: str | None = None  # SHA-256 of pveproxy's certificate, pinned
    ca_file: str | None = None  # or the cluster's CA (/etc/pve/pve-root-ca.pem)
    # Where cloud images are downloaded to on the target node (needs the `import` content).
    import_storage: str = "local"
    # Create VMs in this resource pool (the token's VM privileges may then be on the pool only).
    pool: str | None = None
    timeout: float = 60.0  # one HTTP request; tasks have command_timeout


@attrs.frozen
class VmSettings:
    gateway: str
    main_node: str
    nodes: Mapping[str, str]  # node name -> address, the main node included
    storage: str
    # The bridge every VM's NIC is plugged into, and the prefix length of the VMs' network
    # (the mask cloud-init gives them with their address: VM_BRIDGE, VM_NETMASK).
    bridge: str = DEFAULT_BRIDGE
    prefix_len: int = DEFAULT_PREFIX
    ip_start: int = VMID_MIN
    ip_end: int = VMID_MAX
    allow_ips: tuple[str, ...] = ("0.0.0.0",)
    trusted_proxies: tuple[str, ...] = ()
    max_cpu: int | None = None
    max_ram: int | None = None
    max_disk: int | None = None
    balloon_min: int | None = None
    root_password: str = ""
    image_base_url: str | None = None
    vm_ssh_port: int = 22
    node_ssh_port: int = 22
    known_hosts: str | None = None
    node_ssh_key: str | None = None
    node_ssh_user: str = "root"
    # Reach the main node over SSH like the others instead of running qm locally: cairn then
    # runs beside the cluster, or on the node under a hardened unit whose restrictions qm's
    # VMs would otherwise inherit.
    main_over_ssh: bool = False
    ssh_wait_timeout: float = 300.0
    ssh_poll_interval: float = 2.0
    # How long after a task the cluster's word on power state is not trusted (pvestatd lags).
    observe_grace: float = 12.0
    # Longest a single qm/pvesh/pvesm may run (a 16 GiB migration over 1 GbE takes ~150 s).
    command_timeout: float = 900.0
    # At most one progress record per this many seconds during a long step (a download).
    progress_interval: float = 1.0
    # Driving the simulated cluster (ops/pvesim), not a real one: said by /status and the list.
    simulated: bool = False
    # How cairn reaches Proxmox: `cli` runs qm/pvesh/pvesm (locally on the main node, over SSH
    # on the others); `api` speaks pveproxy's REST API with a token (docs/vm.md).
    driver: str = "cli"
    api: ApiSettings | None = None
    # Installs clone a template per image and node (VM_TEMPLATES, TEMPLATE_ID_START/_END);
    # VM_TEMPLATES=0 imports the image for every install instead, as does an install whose API
    # token lacks what templates need (template_access.py).
    templates: bool = True
    template_start: int = TEMPLATE_ID_START
    template_end: int = TEMPLATE_ID_END

    @property
    def ip_prefix(self) -> str:
        return self.gateway.rsplit(".", 1)[0]

    def ip_for(self, vmid: int) -> str:
        return f"{self.ip_prefix}.{vmid}"

    @property
    def id_range(self) -> range:
        return range(self.ip_start, self.ip_end + 1)

    @property
    def template_range(self) -> range:
        return range(self.template_start, self.template_end + 1)

    @property
    def pool(self) -> str | None:
        """The resource pool the API driver's VMs go in (PVE_API_POOL), or None."""
        return self.api.pool if self.api is not None else None


_N = TypeVar("_N", int, float)


def _number(
    env: Mapping[str, str], name: str, convert: Callable[[str], _N], kind: str
) -> _N | None:
    """The variable read as a number, or None when unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return convert(raw)
    except ValueError:
        raise SettingsError(f"{name} must be {kind}, got {raw!r}") from None


def _int(env: Mapping[str, str], name: str, lo: int | None, hi: int | None) -> int | None:
    value = _number(env, name, int, "an integer")
    if value is None:
        return None
    if lo is not None and value < lo:
        raise SettingsError(f"{name} must be at least {lo}, got {value}")
    if hi is not None and value > hi:
        raise SettingsError(f"{name} must be at most {hi}, got {value}")
    return value


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, float, "a number")
    if value is None:
        return default
    if not value >= 0:
        raise SettingsError(f"{name} must not be negative, got {env[name].strip()!r}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be 1 or 0, got {raw!r}")


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _check_networks(name: str, entries: tuple[str, ...]) -> None:
    for entry in entries:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise SettingsError(f"{name}: {entry!r} is not an IP address or CIDR") from None


def _bridge(env: Mapping[str, str]) -> str:
    raw = env.get("VM_BRIDGE", "").strip()
    if not raw:
        return DEFAULT_BRIDGE
    if not _BRIDGE_NAME.match(raw):
        raise SettingsError(
            f"VM_BRIDGE must be a bridge name (up to 15 letters, digits, '-', '_' or '.', "
            f"e.g. vmbr0), got {raw!r}"
        )
    return raw


def _prefix_len(env: Mapping[str, str]) -> int:
    """VM_NETMASK as a prefix length: `24`, `/24` or `255.255.255.0`."""
    raw = env.get("VM_NETMASK", "").strip()
    if not raw:
        return DEFAULT_PREFIX
    text = raw.removeprefix("/")
    value = int(text) if text.isdigit() else _dotted_prefix(text)
    # Proxmox takes masks of 8 to 32 bits; a VM network needs room for hosts beside the gateway.
    if not 8 <= value <= 30:
        raise SettingsError(
            "VM_NETMASK must be a prefix length from 8 to 30 (e.g. 24) or a dotted mask "
            f"(e.g. 255.255.255.0), got {raw!r}"
        )
    return value


def _dotted_prefix(text: str) -> int:
    """The prefix length of a dotted netmask (255.255.255.0 -> 24); -1 if it is not one."""
    try:
        network = ipaddress.IPv4Network(f"0.0.0.0/{text}")
    except ValueError:
        return -1
    return network.prefixlen if str(network.netmask) == text else -1


def _check_vm_network(gateway: str, prefix_len: int, start: int, end: int) -> None:
    """Every VM address (the gateway's first three parts, then the VMID) must be a host of the
    gateway's network, and none may be the gateway itself."""
    network = ipaddress.IPv4Network(f"{gateway}/{prefix_len}", strict=False)
    base = gateway.rsplit(".", 1)[0]
    hosts = f"{network} (hosts {network.network_address + 1} to {network.broadcast_address - 1})"
    for name, vmid in (("ASSIGN_IP_START", start), ("ASSIGN_IP_END", end)):
        address = ipaddress.IPv4Address(f"{base}.{vmid}")
        if address not in network or address in (network.network_address,
                                                  network.broadcast_address):  # fmt: skip
            raise SettingsError(
                f"{name}={vmid} gives VMs the address {address}, outside the VM network "
                f"{hosts} that GATEWAY={gateway} and VM_NETMASK=/{prefix_len} make; change "
                "the range or the mask"
            )
    last = int(gateway.rsplit(".", 1)[1])
    if start <= last <= end:
        raise SettingsError(
            f"GATEWAY={gateway} lies in the VM range ASSIGN_IP_START..ASSIGN_IP_END "
            f"({start}..{end}): VM {last} would get the gateway's address; move the range"
        )


def _node_variables(env: Mapping[str, str]) -> dict[str, str]:
    """{NODE_<name> variable: address} for every variable that names a cluster node.

    NODE_ENV, NODE_OPTIONS, NODE_EXTRA_CA_CERTS ... belong to Node.js, not to us: a cluster
    node is a node name with an IP address.
    """
    found = {}
    for key, value in env.items():
        name = key[len(_NODE_PREFIX) :]
        if key.startswith(_NODE_PREFIX) and _NODE_NAME.match(name) and is_ip(value.strip()):
            found[key] = value.strip()
    return found


# Variables that only mean something for a real cluster.
_REAL_CLUSTER = (
    "GATEWAY", "ASSIGN_STORAGE", "PVE_SSH_KEY", "PVE_KNOWN_HOSTS", "PVE_API_URL",
    "PVE_API_TOKEN", "PVE_API_FINGERPRINT", "PVE_API_CA_FILE",
)  # fmt: skip


def real_cluster_variables(env: Mapping[str, str]) -> list[str]:
    """The real-cluster variables that are set (sorted), NODE_<name> ones included."""
    named = [n for n in _REAL_CLUSTER if env.get(n, "").strip()]
    return sorted(named + list(_node_variables(env)))


def _api_settings(env: Mapping[str, str]) -> tuple[str, ApiSettings | None]:
    """PVE_DRIVER (api|cli) and the PVE_API_* it needs. The default is `api` whenever an API
    is configured (PVE_API_URL), the simulator's pveproxy included; PVE_DRIVER=cli picks the
    command lines (qm locally and over SSH) all the same."""
    from actors.vm.pveapi.wire import api_base, normalize_fingerprint, parse_token

    url = env.get("PVE_API_URL", "").strip()
    raw = env.get("PVE_DRIVER", "").strip().lower()
    if raw not in ("", "api", "cli"):
        raise SettingsError(f"PVE_DRIVER must be api or cli, got {raw!r}")
    driver = raw or ("api" if url else "cli")
    if driver == "cli":
        return driver, None
    token = env.get("PVE_API_TOKEN", "").strip()
    missing = [n for n, v in (("PVE_API_URL", url), ("PVE_API_TOKEN", token)) if not v]
    if missing:
        raise SettingsError(f"PVE_DRIVER=api needs {' and '.join(missing)}")
    fingerprint = env.get("PVE_API_FINGERPRINT", "").strip() or None
    ca_file = env.get("PVE_API_CA_FILE", "").strip() or None
    try:
        api_base(url)
        parse_token(token)
        if fingerprint:
            normalize_fingerprint(fingerprint)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if fingerprint and ca_file:
        raise SettingsError("set PVE_API_FINGERPRINT or PVE_API_CA_FILE, not both")
    pool = env.get("PVE_API_POOL", "").strip() or None
    return driver, ApiSettings(
        url=url,
        token=token,
        fingerprint=fingerprint,
        ca_file=ca_file,
        import_storage=env.get("PVE_IMPORT_STORAGE", "").strip() or "local",
        pool=pool,
        timeout=_float(env, "PVE_API_TIMEOUT", 60.0),
    )


def load_settings(env: Mapping[str, str]) -> VmSettings:
    """Build settings from variables; every error names the variable and its rule."""
    missing = [n for n in ("GATEWAY", "MAIN_NODE", "ASSIGN_STORAGE") if not env.get(n, "").strip()]
    if missing:
        raise SettingsError(f"missing required variable: {', '.join(missing)}")
    gateway = env["GATEWAY"].strip()
    try:
        if ipaddress.ip_address(gateway).version != 4:
            raise ValueError
    except ValueError:
        raise SettingsError(f"GATEWAY must be an IPv4 address, got {gateway!r}") from None
    main = env["MAIN_NODE"].strip()
    nodes = {key[len(_NODE_PREFIX) :]: ip for key, ip in _node_variables(env).items()}
    main_over_ssh = _bool(env, "PVE_SSH_MAIN")
    if main not in nodes:
        if main_over_ssh:
            raise SettingsError(f"PVE_SSH_MAIN=1 needs the main node's address in NODE_{main}")
        # The main node runs qm locally and needs no address, but it is a cluster member.
        nodes[main] = "127.0.0.1"
    start = _int(env, "ASSIGN_IP_START", VMID_MIN, VMID_MAX) or VMID_MIN
    end = _int(env, "ASSIGN_IP_END", VMID_MIN, VMID_MAX) or VMID_MAX
    if start > end:
        raise SettingsError(f"ASSIGN_IP_START ({start}) must not exceed ASSIGN_IP_END ({end})")
    prefix_len = _prefix_len(env)
    _check_vm_network(gateway, prefix_len, start, end)
    allow = _csv(env.get("ALLOW_IPS", "")) or ("0.0.0.0",)
    _check_networks("ALLOW_IPS", allow)
    proxies = _csv(env.get("TRUSTED_PROXIES", ""))
    _check_networks("TRUSTED_PROXIES", proxies)
    base = env.get("IMAGE_BASE_URL", "").strip().rstrip("/") or None
    simulated = bool(env.get("PVESIM_ROOT", "").strip())
    driver, api = _api_settings(env)
    t_start, t_end = _template_range(env, start, end)
    return VmSettings(
        gateway=gateway,
        main_node=main,
        nodes=nodes,
        storage=env["ASSIGN_STORAGE"].strip(),
        bridge=_bridge(env),
        prefix_len=prefix_len,
        ip_start=start,
        ip_end=end,
        allow_ips=allow,
        trusted_proxies=proxies,
        max_cpu=_int(env, "VM_MAX_CPU", 1, 32),
        max_ram=_int(env, "VM_MAX_RAM", 512, None),
        max_disk=_int(env, "VM_MAX_DISK", 16, None),
        balloon_min=_int(env, "VM_BALLOON_MIN", 1, None),
        root_password=env.get("VM_ROOT_PASSWORD", ""),
        image_base_url=base,
        vm_ssh_port=_int(env, "VM_SSH_PORT", 1, 65535) or 22,
        node_ssh_port=_int(env, "PVE_SSH_PORT", 1, 65535) or 22,
        known_hosts=env.get("PVE_KNOWN_HOSTS", "").strip() or None,
        node_ssh_key=env.get("PVE_SSH_KEY", "").strip() or None,
        node_ssh_user=env.get("PVE_SSH_USER", "").strip() or "root",
        main_over_ssh=main_over_ssh,
        ssh_wait_timeout=_float(env, "VM_SSH_WAIT", 300.0),
        ssh_poll_interval=_float(env, "VM_SSH_POLL", 2.0),
        observe_grace=_float(env, "VM_OBSERVE_GRACE", 12.0),
        command_timeout=_float(env, "VM_COMMAND_TIMEOUT", 900.0),
        progress_interval=_float(env, "VM_PROGRESS_INTERVAL", 1.0),
        simulated=simulated,
        driver=driver,
        api=api,
        templates=_bool(env, "VM_TEMPLATES", default=True),
        template_start=t_start,
        template_end=t_end,
    )


def _template_range(env: Mapping[str, str], start: int, end: int) -> tuple[int, int]:
    """TEMPLATE_ID_START/_END: inside Proxmox's ids, and apart from the VMs' range, so a
    template never takes an id (and with it an address) an install could be given."""
    t_start = _int(env, "TEMPLATE_ID_START", VMID_MIN, PVE_VMID_MAX) or TEMPLATE_ID_START
    t_end = _int(env, "TEMPLATE_ID_END", VMID_MIN, PVE_VMID_MAX) or TEMPLATE_ID_END
    if t_start > t_end:
        raise SettingsError(
            f"TEMPLATE_ID_START ({t_start}) must not exceed TEMPLATE_ID_END ({t_end})"
        )
    if t_start <= end and start <= t_end:
        raise SettingsError(
            f"TEMPLATE_ID_START..TEMPLATE_ID_END ({t_start}..{t_end}) overlaps the VMs' ids "
            f"ASSIGN_IP_START..ASSIGN_IP_END ({start}..{end}); give templates a range of "
            "their own"
        )
    return t_start, t_end
