"""The body of a safe change (`POST /api/vm/<id>/change`), parsed and bounded.

    {"steps": [{"set": {"cpu": 4, "memory": 8192, "disk": "8G"}},
               {"run": "apt-get -y upgrade", "timeout": 600},
               {"reboot": true}],
     "verify": [{"run": "systemctl is-active nginx", "timeout": 60},
                {"function": "checks/http", "input": {"url": "http://10.0.0.5/"}}],
     "keep_snapshot": false,
     "accept": ["disk-grow"]}

What comes out is the same shape, normalised (sizes clamped as `set/*` clamps them, time-outs
filled in), so the host that runs the change parses it again by the same rules when it crosses
NATS (actors/vm/messages.py). Every refusal names the field, as the other VM bodies do.
"""

from __future__ import annotations

import json
import re
from typing import Any

from actors.vm.requests import BadRequest, parse_set_cpu, parse_set_disk, parse_set_memory
from actors.vm.settings import VmSettings

# The limits (docs/vm.md, "Changing a VM safely"): a change is a handful of steps an admin
# would type, not a deployment tool; each script travels in one NATS message and its output
# goes into the VM's event stream.
MAX_STEPS = 16
MAX_VERIFY = 4
MAX_SCRIPT = 16384  # bytes of one `run` script (UTF-8)
DEFAULT_TIMEOUT = 300  # seconds a `run` step or check may take
MAX_TIMEOUT = 3600
FIELDS = ("steps", "verify", "keep_snapshot", "accept")
ACCEPTABLE = ("disk-grow",)
SET_FIELDS = ("cpu", "memory", "disk")
_STEP_KINDS = '{"set": {...}}, {"run": "<shell>"} or {"reboot": true}'
_CHECK_KINDS = '{"ssh": true}, {"run": "<shell>"} or {"function": "<stored function path>"}'
# A function check's input, as the JSON text the run is given: one NATS message carries the
# change, and the functions service's own inputs are of this order.
MAX_INPUT = 65536
MAX_PATH = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def parse_change(body: Any, settings: VmSettings) -> dict[str, Any]:
    """The change `body` asks for, normalised; BadRequest (400) with the field's name."""
    if not isinstance(body, dict):
        raise BadRequest("body: must be a JSON object")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; known: {', '.join(FIELDS)}")
    steps = body.get("steps")
    if steps is None:
        raise BadRequest("steps: is required")
    if not isinstance(steps, list):
        raise BadRequest("steps: must be a list of steps")
    if not steps:
        raise BadRequest("steps: must have at least one step")
    if len(steps) > MAX_STEPS:
        raise BadRequest(f"steps: at most {MAX_STEPS} steps")
    keep = body.get("keep_snapshot", False)
    if not isinstance(keep, bool):
        raise BadRequest("keep_snapshot: must be true or false")
    accept = _accept(body.get("accept", []))
    parsed = [_step(f"steps[{i}]", step, settings) for i, step in enumerate(steps)]
    for i, step in enumerate(parsed):
        if "disk" in step.get("set", {}) and "disk-grow" not in accept:
            raise BadRequest(
                f"steps[{i}].set.disk: a grown disk cannot be rolled back in full (the "
                'storage keeps the new size); send "accept": ["disk-grow"] to change it anyway'
            )
    return {
        "steps": parsed,
        "verify": _verify(body.get("verify")),
        "keep_snapshot": keep,
        "accept": accept,
    }


def _accept(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest("accept: must be a list of strings")
    for item in value:
        if item not in ACCEPTABLE:
            raise BadRequest(f"accept: unknown item {item[:40]!r}; known: {', '.join(ACCEPTABLE)}")
    return sorted(set(value))


def _step(where: str, step: Any, settings: VmSettings) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise BadRequest(f"{where}: must be one of {_STEP_KINDS}")
    kinds = [k for k in ("set", "run", "reboot") if k in step]
    if len(kinds) != 1:
        raise BadRequest(f"{where}: must be one of {_STEP_KINDS}")
    kind = kinds[0]
    allowed = {"run", "timeout"} if kind == "run" else {kind}
    extra = sorted(set(step) - allowed)
    if extra:
        raise BadRequest(f"{where}.{extra[0]}: unknown field in a {kind!r} step")
    if kind == "run":
        return {
            "run": _script(f"{where}.run", step["run"]),
            "timeout": _timeout(f"{where}.timeout", step.get("timeout", DEFAULT_TIMEOUT)),
        }
    if kind == "reboot":
        if step["reboot"] is not True:
            raise BadRequest(f"{where}.reboot: must be true")
        return {"reboot": True}
    return {"set": _set(f"{where}.set", step["set"], settings)}


def _set(where: str, value: Any, settings: VmSettings) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        raise BadRequest(f"{where}: must be an object with cpu, memory or disk")
    unknown = sorted(set(value) - set(SET_FIELDS))
    if unknown:
        raise BadRequest(f"{where}.{unknown[0]}: unknown field; known: {', '.join(SET_FIELDS)}")
    out: dict[str, Any] = {}
    try:
        if "cpu" in value:
            out["cpu"] = parse_set_cpu({"cpu": value["cpu"]}, settings)
        if "memory" in value:
            out["memory"] = parse_set_memory({"memory": value["memory"]}, settings)
        if "disk" in value:
            disk = value["disk"]
            if isinstance(disk, str) and disk != disk.strip():
                raise BadRequest("disk: must be a whole number followed by G, like 16G")
            out["disk"] = f"{parse_set_disk({'disk': disk})}G"
    except BadRequest as exc:
        # "cpu: must be …" as set/cpu says it, under this step's name.
        raise BadRequest(f"{where}.{exc}") from None
    return out


def _script(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{where}: must be a non-empty string of shell")
    if len(value.encode()) > MAX_SCRIPT:
        raise BadRequest(f"{where}: at most {MAX_SCRIPT} bytes")
    if "\x00" in value:
        raise BadRequest(f"{where}: must not contain NUL characters")
    return value


def _timeout(where: str, value: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_TIMEOUT:
        raise BadRequest(f"{where}: must be a whole number of seconds from 1 to {MAX_TIMEOUT}")
    return value


def _verify(value: Any) -> list[dict[str, Any]]:
    if value is None:
        raise BadRequest(f"verify: is required: how to tell the VM still works, {_CHECK_KINDS}")
    checks = value if isinstance(value, list) else [value]
    if not checks:
        raise BadRequest("verify: must have at least one check")
    if len(checks) > MAX_VERIFY:
        raise BadRequest(f"verify: at most {MAX_VERIFY} checks")
    where = "verify" if isinstance(value, dict) else "verify[{}]"
    return [_check(where.format(i), check) for i, check in enumerate(checks)]


def _check(where: str, check: Any) -> dict[str, Any]:
    if not isinstance(check, dict):
        raise BadRequest(f"{where}: must be one of {_CHECK_KINDS}")
    if "function" in check:
        extra = sorted(set(check) - {"function", "input", "timeout"})
        if extra:
            raise BadRequest(f"{where}.{extra[0]}: unknown field in a 'function' check")
        return {
            "function": _function_path(f"{where}.function", check["function"]),
            "input": _input(f"{where}.input", check.get("input", {})),
            "timeout": _timeout(f"{where}.timeout", check.get("timeout", DEFAULT_TIMEOUT)),
        }
    if "ssh" in check:
        if set(check) != {"ssh"} or check["ssh"] is not True:
            raise BadRequest(f'{where}: {{"ssh": true}} takes nothing else')
        return {"ssh": True}
    if "run" in check:
        extra = sorted(set(check) - {"run", "timeout"})
        if extra:
            raise BadRequest(f"{where}.{extra[0]}: unknown field in a 'run' check")
        return {
            "run": _script(f"{where}.run", check["run"]),
            "timeout": _timeout(f"{where}.timeout", check.get("timeout", DEFAULT_TIMEOUT)),
        }
    raise BadRequest(f"{where}: must be one of {_CHECK_KINDS}")


def _function_path(where: str, value: Any) -> str:
    """A stored function's path as the functions service names it (no leading `/`); whether
    one is stored there is asked of it before the change starts."""
    path = value.lstrip("/") if isinstance(value, str) else ""
    if not path or len(path) > MAX_PATH or ".." in path or _CONTROL.search(path):
        raise BadRequest(f'{where}: must be the path of a stored function, like "checks/http"')
    return path


def _input(where: str, value: Any) -> str:
    """The function's input as JSON text: a string holding JSON, or the value itself (as a
    run's `input` is taken by the functions service)."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            raise BadRequest(
                f"{where}: a string must hold JSON (or give the value itself)"
            ) from None
        text = value
    else:
        try:
            text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except ValueError:
            raise BadRequest(f"{where}: must be JSON") from None
    if len(text.encode()) > MAX_INPUT:
        raise BadRequest(f"{where}: at most {MAX_INPUT} bytes as JSON")
    return text


def functions_of(args: dict[str, Any]) -> list[str]:
    """The stored functions the change's checks run, in order."""
    return [c["function"] for c in args["verify"] if "function" in c]


def sets(args: dict[str, Any]) -> dict[str, Any]:
    """What the change's `set` steps ask for, the last word of each (cpu, memory, disk)."""
    out: dict[str, Any] = {}
    for step in args["steps"]:
        out.update(step.get("set", {}))
    return out
