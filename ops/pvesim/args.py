"""Command-line parsing as the real Proxmox CLI does it (pure).

PVE parses options with Getopt::Long (prefix `--` or `-`, `--opt=value`, unique abbreviations,
booleans with an optional value, options and positionals in any order), then checks every value
against the JSON schema and reports all bad parameters at once in a `400 Parameter verification
failed.` block (PC JSONSchema.pm, RESTHandler.pm).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .formats import format_param_error

Check = Callable[[str], "str | None"]


class CliError(Exception):
    """A failed command: `text` goes to stderr as is, `code` is the exit status."""

    def __init__(self, text: str, code: int = 255) -> None:
        super().__init__(text)
        self.text = text if text.endswith("\n") else text + "\n"
        self.code = code


def param_error(errors: Mapping[str, str], usage: str) -> CliError:
    return CliError(format_param_error(errors, usage), 255)


# NamedTuples, not attrs: every fake command imports this module, and start-up time is the
# cost of each simulated `qm` call.
class Opt(NamedTuple):
    kind: str = "str"  # str | int | bool | number
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[str, ...] | None = None
    check: Check | None = None


class CommandSpec(NamedTuple):
    usage: str
    positionals: tuple[tuple[str, Opt], ...] = ()
    options: Mapping[str, Opt] = {}


class Parsed(NamedTuple):
    args: dict[str, Any]
    options: dict[str, Any]


BOOL_OPT = Opt("bool")
_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}


def _looks_like_option(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1 and not re.fullmatch(r"-\d+(\.\d+)?", arg)


def _resolve(name: str, options: Mapping[str, Opt]) -> str:
    if name in options:
        return name
    matches = sorted(o for o in options if o.startswith(name))
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise CliError(
            f"Option {name} is ambiguous ({', '.join(matches)})\n400 unable to parse option\n"
        )
    raise CliError(f"Unknown option: {name}\n400 unable to parse option\n")


def check_value(opt: Opt, value: str) -> tuple[Any, str | None]:
    """Convert and validate one value; returns (value, error message or None)."""
    if opt.kind == "bool":
        low = value.lower()
        if low in _BOOL_TRUE:
            return 1, None
        if low in _BOOL_FALSE:
            return 0, None
        return value, f"type check ('boolean') failed - got '{value}'"
    converted: Any = value
    if opt.kind == "int":
        if not re.fullmatch(r"[+-]?\d+", value):
            return value, f"type check ('integer') failed - got '{value}'"
        converted = int(value)
    elif opt.kind == "number":
        if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", value):
            return value, f"type check ('number') failed - got '{value}'"
        converted = float(value)
    if opt.minimum is not None and converted < opt.minimum:
        return converted, f"value must have a minimum value of {opt.minimum}"
    if opt.maximum is not None and converted > opt.maximum:
        return converted, f"value must have a maximum value of {opt.maximum}"
    if opt.enum is not None and value not in opt.enum:
        return value, (
            f"value '{value}' does not have a value in the enumeration '{', '.join(opt.enum)}'"
        )
    if opt.check is not None:
        err = opt.check(value)
        if err:
            return value, err
    return converted, None


def parse(spec: CommandSpec, argv: Sequence[str]) -> Parsed:
    positional: list[str] = []
    raw: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            positional.extend(argv[i + 1 :])
            break
        if not _looks_like_option(arg):
            positional.append(arg)
            i += 1
            continue
        name = arg[2:] if arg.startswith("--") else arg[1:]
        value: str | None = None
        if "=" in name:
            name, value = name.split("=", 1)
        try:
            name = _resolve(name, spec.options)
        except CliError as exc:  # every 400 carries the usage line (RESTHandler, Exception.pm)
            raise CliError(exc.text + spec.usage + "\n") from None
        opt = spec.options[name]
        if value is None:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if opt.kind == "bool":
                # Getopt `:s`: the next word is the value unless it looks like an option.
                if nxt is not None and not _looks_like_option(nxt):
                    value = nxt
                    i += 1
                else:
                    value = "1"
            else:
                if nxt is None:
                    raise CliError(
                        f"Option {name} requires an argument\n400 unable to parse option\n"
                        f"{spec.usage}\n"
                    )
                value = nxt
                i += 1
        raw[name] = value
        i += 1
    if len(positional) < len(spec.positionals):
        raise CliError(f"400 not enough arguments\n{spec.usage}\n")
    if len(positional) > len(spec.positionals):
        raise CliError(f"400 too many arguments\n{spec.usage}\n")
    errors: dict[str, str] = {}
    args: dict[str, Any] = {}
    for (pname, popt), pvalue in zip(spec.positionals, positional, strict=True):
        converted, err = check_value(popt, pvalue)
        if err:
            errors[pname] = err
        args[pname] = converted
    options: dict[str, Any] = {}
    for oname, ovalue in raw.items():
        converted, err = check_value(spec.options[oname], ovalue)
        if err:
            errors[oname] = err
        options[oname] = converted
    if errors:
        raise param_error(errors, spec.usage)
    return Parsed(args, options)


# --- value checks (PC JSONSchema.pm formats) ---------------------------------------------------

_DNS_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?"


def parse_vm(spec: CommandSpec, argv: Sequence[str]) -> tuple[Parsed, int]:
    """Parse a command whose first argument is the VM it acts on (most of qm's)."""
    p = parse(spec, argv)
    return p, int(p.args["vmid"])


def check_dns_name(value: str) -> str | None:
    if re.fullmatch(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*", value):
        return None
    return "value does not look like a valid DNS name"


# qemu-server 8.3.13 CPUConfig.pm: the vendor list plus the x86-64-v* builtin models.
CPU_MODELS = (  # noqa: SIM905
    "486 pentium pentium2 pentium3 coreduo core2duo Conroe Penryn Nehalem Nehalem-IBRS "
    "Westmere Westmere-IBRS SandyBridge SandyBridge-IBRS IvyBridge IvyBridge-IBRS Haswell "
    "Haswell-IBRS Haswell-noTSX Haswell-noTSX-IBRS Broadwell Broadwell-IBRS Broadwell-noTSX "
    "Broadwell-noTSX-IBRS Skylake-Client Skylake-Client-IBRS Skylake-Client-noTSX-IBRS "
    "Skylake-Client-v4 Skylake-Server Skylake-Server-IBRS Skylake-Server-noTSX-IBRS "
    "Skylake-Server-v4 Skylake-Server-v5 Cascadelake-Server Cascadelake-Server-v2 "
    "Cascadelake-Server-noTSX Cascadelake-Server-v4 Cascadelake-Server-v5 Cooperlake "
    "Cooperlake-v2 KnightsMill Icelake-Client Icelake-Client-noTSX Icelake-Server "
    "Icelake-Server-noTSX Icelake-Server-v3 Icelake-Server-v4 Icelake-Server-v5 "
    "Icelake-Server-v6 SapphireRapids SapphireRapids-v2 GraniteRapids athlon phenom "
    "Opteron_G1 Opteron_G2 Opteron_G3 Opteron_G4 Opteron_G5 EPYC EPYC-IBPB EPYC-v3 EPYC-v4 "
    "EPYC-Rome EPYC-Rome-v2 EPYC-Rome-v3 EPYC-Rome-v4 EPYC-Milan EPYC-Milan-v2 EPYC-Genoa "
    "host kvm32 kvm64 qemu32 qemu64 max x86-64-v2 x86-64-v2-AES x86-64-v3 x86-64-v4"
).split()


def cpu_model_error(value: str) -> str | None:
    """Checked when the config is written (QS CPUConfig.pm), so the message is a plain die."""
    first = value.split(",", 1)[0]
    model = first.split("=", 1)[1] if first.startswith("cputype=") else first
    if model.startswith("custom-") or model in CPU_MODELS:
        return None
    return f"Built-in cputype '{model}' is not defined (missing 'custom-' prefix?)"


def property_string(value: str, default_key: str | None = None) -> dict[str, str] | None:
    """`k=v,k=v` (the first item may omit `default_key=`); None if malformed."""
    out: dict[str, str] = {}
    for i, part in enumerate(value.split(",")):
        if not part:
            continue
        if "=" in part:
            key, val = part.split("=", 1)
        elif i == 0 and default_key is not None:
            key, val = default_key, part
        else:
            return None
        if key in out:
            return None
        out[key] = val
    return out


def _format_errors(key: str, sub_errors: Mapping[str, str]) -> str | None:
    # PVE nests property-string errors: "format error" on the parameter, one line per sub-key.
    if not sub_errors:
        return None
    lines = ["invalid format - format error"]
    lines += [f"{key}.{k}: invalid format - {v}" for k, v in sorted(sub_errors.items())]
    return "\n".join(lines)


NOT_IN_SCHEMA = (
    "property is not defined in schema and the schema does not allow additional properties"
)


def make_ipconfig_check(key: str) -> Check:
    def check(value: str) -> str | None:
        import ipaddress

        props = property_string(value)
        if props is None:
            return "invalid format - format error"
        errors: dict[str, str] = {}
        for k in props:
            if k not in ("ip", "gw", "ip6", "gw6"):
                errors[k] = NOT_IN_SCHEMA
        ip = props.get("ip")
        if ip is not None and ip not in ("dhcp", "manual"):
            try:
                if "/" not in ip:
                    raise ValueError(ip)
                # pve-ipv4-config: a prefix of 8 to 32 (PC JSONSchema pve_verify_ipv4_config)
                if not 8 <= ipaddress.IPv4Interface(ip).network.prefixlen <= 32:
                    raise ValueError(ip)
            except ValueError:
                errors["ip"] = "value does not look like a valid ipv4 network configuration"
        gw = props.get("gw")
        if gw is not None:
            try:
                ipaddress.IPv4Address(gw)
            except ValueError:
                errors["gw"] = "value does not look like a valid IPv4 address"
            if ip is None:
                errors["gw"] = "property 'gw' requires property 'ip'"
        return _format_errors(key, errors)

    return check


NET_MODELS = (  # qemu-server 8.3.13 QemuServer.pm $nic_model_list
    "virtio",
    "e1000",
    "e1000-82540em",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "rtl8139",
    "vmxnet3",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
)
# netN's integer properties (QS QemuServer.pm $net_fmt): VLAN tag and MTU.
_NET_RANGES = {"tag": (1, 4094), "mtu": (1, 65520)}
_MAC_RE = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


def make_net_check(key: str) -> Check:
    def check(value: str) -> str | None:
        parts = [p for p in value.split(",") if p]
        errors: dict[str, str] = {}
        model = None
        for part in parts:
            k, _, v = part.partition("=")
            if k in NET_MODELS:
                model = k
                if v and not _MAC_RE.fullmatch(v):
                    errors["macaddr"] = "value does not look like a valid MAC address"
            elif k == "model":
                model = v
            elif k == "bridge":
                if not re.fullmatch(r"[-_.\w\d]+", v):
                    errors["bridge"] = "value does not match the regex pattern"
            elif k in _NET_RANGES:
                low, high = _NET_RANGES[k]
                if not re.fullmatch(r"\d+", v):
                    errors[k] = f"type check ('integer') failed - got '{v}'"
                elif int(v) < low:
                    errors[k] = f"value must have a minimum value of {low}"
                elif int(v) > high:
                    errors[k] = f"value must have a maximum value of {high}"
            elif k not in (
                "firewall",
                "link_down",
                "tag",
                "trunks",
                "rate",
                "queues",
                "mtu",
                "macaddr",
            ):
                errors[k] = NOT_IN_SCHEMA
        if model is None:
            errors["model"] = "property is missing and it is not optional"
        return _format_errors(key, errors)

    return check


def check_tags(value: str) -> str | None:
    for tag in re.split(r"[;, ]+", value.strip()):
        if tag and not re.fullmatch(r"[a-z0-9_][a-z0-9_\-+.]*", tag, re.IGNORECASE):
            return f"invalid format - invalid characters in tag '{tag}'"
    return None


def check_bus_id(value: str) -> str | None:
    if re.fullmatch(r"(ide|sata|scsi|virtio|efidisk|tpmstate)\d+", value):
        return None
    return "invalid format - value does not look like a valid disk/bus id"


def check_drive(value: str) -> str | None:
    # Full drive syntax checks happen when the drive is applied; here only the property shape.
    if property_string(value, "file") is None:
        return "invalid format - format error"
    return None


def check_nameserver(value: str) -> str | None:
    import ipaddress

    for addr in re.split(r"[,; ]+", value.strip()):
        try:
            ipaddress.ip_address(addr)
        except ValueError:
            return "invalid format - value does not look like a valid address list"
    return None
