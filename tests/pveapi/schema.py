"""PVE's own API schema (pve-docs apidata.js, trimmed to cairn's endpoints), as a validator.

The files are read from the project's shared reference folder when it is there (they are
AGPL data of Proxmox, never copied into this repository); tests skip with a message otherwise.
The checks are PVE's JSONSchema::validate ones: required and unknown parameters, types as
form strings, pattern, length, range, enum. Named formats
(`pve-node`, ...) live in Perl code and are not checked here.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "shared" / "pve-reference" / "schema"
RELEASES = ("7.4", "8.2", "8.4", "9.1")


@cache
def load(release: str) -> dict[str, Any] | None:
    path = SCHEMA_DIR / f"pve-{release}.json"
    if not path.is_file():
        return None
    endpoints: dict[str, Any] = json.loads(path.read_text())["endpoints"]
    return endpoints


def schema_or_skip(release: str) -> dict[str, Any]:
    found = load(release)
    if found is None:
        pytest.skip(f"PVE {release} API schema not found in {SCHEMA_DIR} (the shared reference)")
    return found


def template_for(endpoints: dict[str, Any], path: str) -> tuple[str, dict[str, str]] | None:
    """The schema's path template a concrete path falls under, and the path's values."""
    for template in endpoints:
        names = re.findall(r"\{(\w+)\}", template)
        pattern = "^" + re.sub(r"\\\{\w+\\\}", "([^/]+)", re.escape(template)) + "$"
        found = re.match(pattern, path)
        if found:
            return template, dict(zip(names, found.groups(), strict=True))
    return None


_NUMBER = r"[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?"


def _prop(props: dict[str, Any], name: str) -> dict[str, Any] | None:
    found = props.get(name) or props.get(re.sub(r"\d+$", "[n]", name))
    return found if isinstance(found, dict) else None


def validate_request(method_schema: dict[str, Any], params: dict[str, str]) -> dict[str, str]:
    """{name: PVE's error} for the request's parameters (path values included); {} = valid."""
    props: dict[str, Any] = method_schema.get("parameters", {}).get("properties", {})
    errors = {
        k: "property is missing and it is not optional"
        for k, p in props.items()
        if not p.get("optional") and k not in params
    }
    for name, raw in params.items():
        p, v = _prop(props, name), str(raw)
        if p is None:
            errors[name] = "property is not defined in schema"
            continue
        t = p.get("type", "string")
        if (
            (t == "boolean" and v not in ("0", "1"))
            or (t == "integer" and not re.fullmatch(r"[+-]?\d+", v))
            or (t == "number" and not re.fullmatch(_NUMBER, v))
        ):
            errors[name] = f"type check ('{t}') failed - got '{v}'"
        elif p.get("pattern") and not re.match(
            "^(?:" + p["pattern"].replace("(?^:", "(?:") + ")$", v
        ):
            errors[name] = "value does not match the regex pattern"
        elif "maxLength" in p and len(v) > p["maxLength"]:
            errors[name] = f"value may only be {p['maxLength']} characters long"
        elif t in ("integer", "number") and "maximum" in p and float(v) > p["maximum"]:
            errors[name] = f"value must have a maximum value of {p['maximum']}"
        elif t in ("integer", "number") and "minimum" in p and float(v) < p["minimum"]:
            errors[name] = f"value must have a minimum value of {p['minimum']}"
        elif p.get("enum") and v not in p["enum"]:
            errors[name] = f"value '{v}' does not have a value in the enumeration"
        elif isinstance(p.get("format"), dict):
            bad = _property_string_errors(p["format"], v)
            if bad:
                errors[name] = bad
    return errors


def _property_string_errors(fmt: dict[str, Any], value: str) -> str | None:
    """A property string (`scsi0`, `net0`, ...): every key known, the default key allowed bare."""
    default = next(
        (k for k, d in fmt.items() if isinstance(d, dict) and d.get("default_key")), None
    )
    aliases = {k for d in fmt.values() if isinstance(d, dict) for k in [d.get("alias")] if k}
    key_aliases = {
        a for d in fmt.values() if isinstance(d, dict) for a in (d.get("keyAlias"),) if a
    }
    for part in (p for p in value.split(",") if p):
        key, eq, _ = part.partition("=")
        if not eq:
            if default is None:
                return f"invalid format - missing key in comma-separated list property: {part}"
            default = None  # only one bare value
            continue
        known = key in fmt or key in aliases or key in key_aliases
        # net[n]: `<model>=<mac>` names the model as the key (keyAlias `model`)
        a_model = any(isinstance(d, dict) and key in (d.get("enum") or []) for d in fmt.values())
        if not known and not a_model:
            return f"invalid format - invalid key in comma-separated list property: {key}"
    return None


def _type_ok(t: str, value: Any) -> bool:
    if t == "null":
        return value is None
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":  # `/cluster/nextid`'s integer comes as a string
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.isdigit()
        )
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return value in (0, 1, True, False)
    return True


def validate_return(returns: dict[str, Any], data: Any, where: str = "data") -> list[str]:
    """Where the answer's JSON types differ from what the schema documents."""
    t = returns.get("type")
    if t is None:
        return []
    if not _type_ok(str(t), data):
        if data is None and returns.get("optional"):
            return []
        return [f"{where}: expected {t}, got {type(data).__name__} {data!r:.60}"]
    out: list[str] = []
    if t == "object" and isinstance(returns.get("properties"), dict):
        for key, sub in returns["properties"].items():
            if key in data:
                out += validate_return(sub, data[key], f"{where}.{key}")
    if t == "array" and isinstance(returns.get("items"), dict):
        for i, item in enumerate(data):
            out += validate_return(returns["items"], item, f"{where}[{i}]")
    return out
