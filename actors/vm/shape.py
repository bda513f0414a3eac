"""A guest shaped by the caller: the optional install fields beyond the spec's (a first-boot
script, packages, the NIC's bridge, VLAN and MTU, DNS, extra disks, tags and notes), checked.

Every value here ends up in a Proxmox property string (`net0`, `scsiN`), a `qm` option or a
shell on the guest, so each is held to a strict shape: nothing can carry a `,`, `=`, `;`,
newline or option dash where Proxmox or a shell would read it as structure. Omitted fields
leave the install exactly as it was. The messages start with the field's name, like the
spec's fields' (actors/vm/requests.py), and are listed in docs/vm.md.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

import attrs

from actors.vm.ownership import MARK_PREFIX
from actors.vm.pve import Bridge, NewDisk

SHAPE_FIELDS = ("script", "script_failure", "packages", "bridge", "vlan", "mtu", "nameserver",
                "searchdomain", "disks", "tags", "description")  # fmt: skip

SCRIPT_MAX = 65536  # bytes: a first-boot script, not a payload
SCRIPT_FAILURES = ("remove", "keep")
PACKAGES_MAX = 64
DISKS_MAX = 4  # scsi1..scsi4
DISK_MAX_GB = 65536  # without VM_MAX_DISK
TAGS_MAX = 16
TAG_MAX = 64
DESCRIPTION_MAX = 4096
NAMESERVERS_MAX = 3  # what resolv.conf honours
SEARCHDOMAINS_MAX = 6
VLAN_RANGE = (1, 4094)
MTU_RANGE = (576, 65520)  # IPv4's minimum, Proxmox's maximum

# Debian's and RPM's package names, without a leading dash (it would be an option).
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+._-]{0,99}$")
# A Linux interface name (at most 15 characters), as Proxmox's bridge pattern takes it.
_BRIDGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
# Proxmox's tag syntax (PVE::JSONSchema pve-tag).
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_+.-]*$")
# A Proxmox storage id.
_STORAGE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_DOMAIN = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_ADDRESS = re.compile(r"^[0-9A-Fa-f.:]{2,45}$")
_SIZE = re.compile(r"^([0-9]{1,6})G$")


class ShapeError(ValueError):
    """A field breaks its rule; `str()` is the client's message (400)."""


@attrs.frozen
class GuestShape:
    # The script's text lives only as long as the install: never in an event, never stored.
    script: str | None = attrs.field(default=None, repr=False)
    keep_on_script_failure: bool = False
    packages: tuple[str, ...] = ()
    bridge: str | None = None  # None: VM_BRIDGE
    vlan: int | None = None
    mtu: int | None = None
    nameserver: str | None = None  # space-separated, as Proxmox stores it
    searchdomain: str | None = None
    disks: tuple[NewDisk, ...] = ()
    tags: tuple[str, ...] = ()
    description: str | None = None

    @property
    def network(self) -> bool:
        return (self.bridge, self.vlan, self.mtu) != (None, None, None)


def _int(data: Mapping[str, Any], field: str, low: int, high: int) -> int | None:
    value = data.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ShapeError(f"{field}: must be a whole number between {low} and {high}")
    return value


def _text(data: Mapping[str, Any], field: str) -> str | None:
    value = data.get(field)
    if value is not None and not isinstance(value, str):
        raise ShapeError(f"{field}: must be a string")
    return value


def _list(data: Mapping[str, Any], field: str, what: str) -> list[Any]:
    value = data.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ShapeError(f"{field}: must be a list of {what}")
    return value


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def parse_script(data: Mapping[str, Any]) -> tuple[str | None, bool]:
    script = _text(data, "script")
    if script is not None:
        if not script.strip():
            raise ShapeError("script: must not be empty")
        if len(script.encode()) > SCRIPT_MAX:
            raise ShapeError(f"script: at most {SCRIPT_MAX} bytes")
        if "\0" in script:
            raise ShapeError("script: must not contain NUL characters")
    failure = _text(data, "script_failure")
    if failure is not None:
        if failure not in SCRIPT_FAILURES:
            raise ShapeError("script_failure: must be remove or keep")
        if script is None:
            raise ShapeError("script_failure: only with a script")
    return script, failure == "keep"


def parse_packages(data: Mapping[str, Any]) -> tuple[str, ...]:
    names = _list(data, "packages", "package names")
    if len(names) > PACKAGES_MAX:
        raise ShapeError(f"packages: at most {PACKAGES_MAX}")
    for name in names:
        if not isinstance(name, str) or not _PACKAGE.match(name):
            raise ShapeError(
                f"packages: invalid package name {_shown(name)}: letters, digits, '+', '.', "
                "'_' and '-', starting with a letter or digit"
            )
    return tuple(dict.fromkeys(names))


def parse_bridge(data: Mapping[str, Any]) -> str | None:
    bridge = _text(data, "bridge")
    if bridge is not None and not _BRIDGE.match(bridge):
        raise ShapeError(
            "bridge: must be a bridge name (up to 15 letters, digits, '.', '_' or '-')"
        )
    return bridge


def _spaced(data: Mapping[str, Any], field: str, most: int, what: str) -> list[str] | None:
    """The words of a field Proxmox takes as one space-separated string: 1 to ``most``."""
    text = _text(data, field)
    if text is None:
        return None
    words = text.split(" ")
    if not 1 <= len(words) <= most:
        raise ShapeError(f"{field}: 1 to {most} {what} separated by spaces")
    return words


def parse_nameserver(data: Mapping[str, Any]) -> str | None:
    words = _spaced(data, "nameserver", NAMESERVERS_MAX, "IP addresses")
    if words is None:
        return None
    for word in words:
        try:
            # Plain addresses only: no IPv6 zone (`%eth0`), which resolv.conf does not take.
            if not _ADDRESS.match(word):
                raise ValueError(word)
            ipaddress.ip_address(word)
        except ValueError:
            raise ShapeError(
                f"nameserver: {_shown(word)} is not an IP address (give 1 to "
                f"{NAMESERVERS_MAX} separated by spaces)"
            ) from None
    return " ".join(words)


def parse_searchdomain(data: Mapping[str, Any]) -> str | None:
    words = _spaced(data, "searchdomain", SEARCHDOMAINS_MAX, "DNS domains")
    if words is None:
        return None
    if not all(_DOMAIN.match(w) for w in words):
        raise ShapeError(f"searchdomain: 1 to {SEARCHDOMAINS_MAX} DNS domains separated by spaces")
    return " ".join(words)


def parse_disks(data: Mapping[str, Any], storage: str, max_disk: int | None) -> tuple[NewDisk, ...]:
    disks = _list(data, "disks", 'disks like {"size": "32G", "storage": "local-lvm"}')
    if len(disks) > DISKS_MAX:
        raise ShapeError(f"disks: at most {DISKS_MAX} extra disks")
    limit = max_disk or DISK_MAX_GB
    out = []
    for i, disk in enumerate(disks):
        at = f"disks[{i}]"
        if not isinstance(disk, dict):
            raise ShapeError(f'{at}: must be an object like {{"size": "32G", "storage": "..."}}')
        unknown = sorted(set(disk) - {"size", "storage"})
        if unknown:
            raise ShapeError(
                f"{at}: unknown field {_shown(unknown[0])}; a disk takes size, storage"
            )
        size = disk.get("size")
        found = _SIZE.match(size) if isinstance(size, str) else None
        if not found:
            raise ShapeError(f"{at}.size: must be a whole number followed by G, like 32G")
        gb = int(found.group(1))
        if not 1 <= gb <= limit:
            raise ShapeError(f"{at}.size: must be between 1G and {limit}G")
        where = disk.get("storage", storage)
        if not isinstance(where, str) or not _STORAGE.match(where):
            raise ShapeError(f"{at}.storage: must be a storage name")
        out.append(NewDisk(where, gb))
    return tuple(out)


def parse_tags(value: Any, field: str = "tags") -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ShapeError(f"{field}: must be a list of tags")
    if len(value) > TAGS_MAX:
        raise ShapeError(f"{field}: at most {TAGS_MAX}")
    for tag in value:
        if not isinstance(tag, str) or len(tag) > TAG_MAX or not _TAG.match(tag):
            raise ShapeError(
                f"{field}: invalid tag {_shown(tag)}: up to {TAG_MAX} letters, digits, '_', "
                "'+', '.' and '-', not starting with '+', '.' or '-'"
            )
    return tuple(dict.fromkeys(value))


def parse_description(value: Any, field: str = "description") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ShapeError(f"{field}: must be a string")
    if len(value) > DESCRIPTION_MAX:
        raise ShapeError(f"{field}: at most {DESCRIPTION_MAX} characters")
    if any(c in value for c in "\0\r"):
        raise ShapeError(f"{field}: must not contain NUL or carriage return characters")
    # The notes sit above cairn's mark in the same text: a line that looks like a mark would
    # make the VM pass for another install's.
    if any(line.strip().startswith(MARK_PREFIX) for line in value.split("\n")):
        raise ShapeError(f"{field}: must not contain cairn's mark ('{MARK_PREFIX}...')")
    return value


def parse_shape(data: Mapping[str, Any], *, storage: str, max_disk: int | None) -> GuestShape:
    """The optional fields of an install body (already an object); ShapeError on the first
    that breaks its rule."""
    script, keep = parse_script(data)
    return GuestShape(
        script=script,
        keep_on_script_failure=keep,
        packages=parse_packages(data),
        bridge=parse_bridge(data),
        vlan=_int(data, "vlan", *VLAN_RANGE),
        mtu=_int(data, "mtu", *MTU_RANGE),
        nameserver=parse_nameserver(data),
        searchdomain=parse_searchdomain(data),
        disks=parse_disks(data, storage, max_disk),
        tags=parse_tags(data.get("tags")),
        description=parse_description(data.get("description")),
    )


def notes(description: str | None, mark: str) -> str:
    """The VM's notes: the caller's text, then cairn's mark on its own line."""
    return f"{description.rstrip()}\n{mark}" if description and description.strip() else mark


def bridge_refusal(node: str, bridge: str, mtu: int | None, bridges: list[Bridge]) -> str | None:
    """Why a NIC on `bridge` with `mtu` cannot work on `node`, or None."""
    found = next((b for b in bridges if b.name == bridge), None)
    if found is None:
        names = ", ".join(b.name for b in bridges) or "none"
        return f"bridge: node {node} has no bridge {bridge!r}; its bridges: {names}"
    limit = found.mtu or 1500
    if mtu is not None and mtu > limit:
        return f"mtu: {mtu} is larger than the MTU of bridge {bridge} on node {node} ({limit})"
    return None


# -- changing an existing VM (`POST /api/vm/<id>/set/tags|description|network`) -------------


def _only(body: Any, fields: tuple[str, ...], route: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ShapeError("body: must be a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise ShapeError(f"{_shown(unknown[0])}: unknown field; {route} takes {', '.join(fields)}")
    return body


def parse_set_tags(body: Any) -> tuple[str, ...]:
    """`{"tags": [...]}`: the VM's tags beside its OS's (an empty list leaves only that)."""
    data = _only(body, ("tags",), "set/tags")
    if data.get("tags") is None:
        raise ShapeError("tags: is required")
    return parse_tags(data["tags"])


def parse_set_description(body: Any) -> str:
    """`{"description": "..."}`: the VM's notes ("" clears them; cairn's mark stays)."""
    data = _only(body, ("description",), "set/description")
    if data.get("description") is None:
        raise ShapeError("description: is required")
    return parse_description(data["description"]) or ""


def parse_set_network(body: Any) -> dict[str, Any]:
    """`{"bridge"?, "vlan"?, "mtu"?}`: what to change of the NIC; `null` removes the VLAN tag
    or the MTU. At least one field."""
    data = _only(body, ("bridge", "vlan", "mtu"), "set/network")
    if not data:
        raise ShapeError("body: give at least one of bridge, vlan, mtu")
    out: dict[str, Any] = {}
    if "bridge" in data:
        if data["bridge"] is None:
            raise ShapeError("bridge: must be a bridge name (a NIC needs one)")
        out["bridge"] = parse_bridge(data)
    if "vlan" in data:
        out["vlan"] = _int(data, "vlan", *VLAN_RANGE)
    if "mtu" in data:
        out["mtu"] = _int(data, "mtu", *MTU_RANGE)
    return out


def net0_with(current: str, change: Mapping[str, Any]) -> str:
    """The VM's `net0` with `change` (bridge, vlan, mtu; None removes) applied, its model,
    MAC and other properties kept."""
    parts = [p for p in current.split(",") if p]
    head, props = parts[:1], dict(p.partition("=")[::2] for p in parts[1:])
    for field, key in (("bridge", "bridge"), ("vlan", "tag"), ("mtu", "mtu")):
        if field not in change:
            continue
        if change[field] is None:
            props.pop(key, None)
        else:
            props[key] = str(change[field])
    return ",".join(head + [f"{k}={v}" for k, v in props.items()])


def bridge_of(net0: str) -> str | None:
    for part in net0.split(","):
        key, _, value = part.partition("=")
        if key == "bridge":
            return value
    return None
