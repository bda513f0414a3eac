"""The NoCloud data Proxmox generates for a VM's cloud-init drive at `qm start` (pure).

Follows qemu-server's PVE/QemuServer/Cloudinit.pm (cloudinit_userdata, nocloud_network,
nocloud_gen_metadata, dump_cloudinit_config): `qm cloudinit dump <vmid> user|network|meta` and
GET /nodes/<node>/qemu/<vmid>/cloudinit/dump show it, and a simulated guest takes what its
cloud-init would make of it (its login user and that user's password hash) from the user-data.
Only the NoCloud format (PVE's default for Linux) is simulated; a `cicustom` file is not.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from .args import NET_MODELS, property_string

TYPES = ("user", "network", "meta")
# The simulated nodes' /etc/resolv.conf, which PVE copies when a VM sets no nameserver or
# searchdomain (Cloudinit.pm get_dns_conf).
NODE_RESOLV: Mapping[str, tuple[str, ...]] = {"search": (), "nameservers": ("127.0.0.1",)}


def _hostname_fqdn(conf: Mapping[str, Any], vmid: int) -> tuple[str, str]:
    hostname = str(conf.get("name") or f"VM{vmid}")
    if "." in hostname:
        return hostname.split(".", 1)[0], hostname
    search = conf.get("searchdomain")
    return hostname, (f"{hostname}.{search}" if search else hostname)


def userdata(conf: Mapping[str, Any], vmid: int) -> str:
    hostname, fqdn = _hostname_fqdn(conf, vmid)
    out = f"#cloud-config\nhostname: {hostname}\nmanage_etc_hosts: true\nfqdn: {fqdn}\n"
    user = conf.get("ciuser")
    if user is not None:
        out += f"user: {user}\n"
        if user == "root":
            out += "disable_root: False\n"
    if conf.get("cipassword") is not None:
        out += f"password: {conf['cipassword']}\n"
    if conf.get("sshkeys") is not None:
        keys = [k.rstrip("\r") for k in unquote(str(conf["sshkeys"])).split("\n")]
        out += "ssh_authorized_keys:\n" + "".join(f"  - {k}\n" for k in keys if k.strip())
    out += "chpasswd:\n  expire: False\n"
    if user is None or user != "root":
        out += "users:\n  - default\n"
    if str(conf.get("ciupgrade", "1")) not in ("0", ""):
        out += "package_upgrade: true\n"
    return out


def _dns(conf: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    search = conf.get("searchdomain")
    servers = conf.get("nameserver")
    return (
        str(search).split() if search is not None else list(NODE_RESOLV["search"]),
        str(servers).split() if servers is not None else list(NODE_RESOLV["nameservers"]),
    )


def network(conf: Mapping[str, Any]) -> str:
    out = "version: 1\nconfig:\n"
    nets = sorted(k for k in conf if k.startswith("net") and k[3:].isdigit())
    for key in nets:  # Perl's string sort of the netN keys
        n = key[3:]
        if not conf.get(f"ipconfig{n}"):
            continue
        ipconfig = property_string(str(conf[f"ipconfig{n}"])) or {}
        net = property_string(str(conf[key])) or {}
        mac = net.get("macaddr") or next((v for k, v in net.items() if k in NET_MODELS), "")
        out += (
            f"    - type: physical\n      name: eth{n}\n      mac_address: '{mac.lower()}'\n"
            "      subnets:\n"
        )
        ip = ipconfig.get("ip")
        if ip == "dhcp":
            out += "      - type: dhcp4\n"
        elif ip:
            iface = ipaddress.IPv4Interface(ip)
            out += (
                f"      - type: static\n        address: '{iface.ip}'\n"
                f"        netmask: '{iface.netmask}'\n"
            )
            if "gw" in ipconfig:
                out += f"        gateway: '{ipconfig['gw']}'\n"
        ip6 = ipconfig.get("ip6")
        if ip6 == "dhcp":
            out += "      - type: dhcp6\n"
        elif ip6 == "auto":
            out += "      - type: ipv6_slaac\n"
        elif ip6:
            out += f"      - type: static6\n        address: '{ip6}'\n"
            if "gw6" in ipconfig:
                out += f"        gateway: '{ipconfig['gw6']}'\n"
    search, servers = _dns(conf)
    out += "    - type: nameserver\n"
    if servers:
        out += "      address:\n" + "".join(f"      - '{s}'\n" for s in servers)
    if search:
        out += "      search:\n" + "".join(f"      - '{s}'\n" for s in search)
    return out


def metadata(conf: Mapping[str, Any], vmid: int) -> str:
    both = (userdata(conf, vmid) + network(conf)).encode()
    return f"instance-id: {hashlib.sha1(both).hexdigest()}\n"  # SHA-1, as PVE


def dump(conf: Mapping[str, Any], vmid: int, kind: str) -> str:
    if kind == "user":
        return userdata(conf, vmid)
    if kind == "network":
        return network(conf)
    return metadata(conf, vmid)


def login(user_data: str) -> tuple[str | None, str | None]:
    """(user, password) as cloud-init reads them from PVE's user-data: the `user:` it names
    (None: the image's default user) and the `password:` it sets for that user."""
    found: dict[str, str] = {}
    for line in user_data.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("user", "password"):
            found[key] = value
    return found.get("user"), found.get("password")
