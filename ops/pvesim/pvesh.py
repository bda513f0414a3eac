"""The fake `pvesh get` for the API paths the VM service reads."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from . import resources as res
from . import snapshots, workers
from .args import BOOL_OPT, CliError, CommandSpec, Opt, param_error, parse
from .context import Ctx, raise_injected, take_failure
from .formats import format_json, format_json_pretty, format_text_table
from .state import Txn

USAGE = "pvesh get <api_path> [OPTIONS] [FORMAT_OPTIONS]"
FORMAT_OPTIONS: dict[str, Opt] = {
    "output-format": Opt(enum=("json", "json-pretty", "text", "yaml")),
    "noborder": BOOL_OPT,
    "noheader": BOOL_OPT,
    "human-readable": BOOL_OPT,
}
PATH_OPTIONS: dict[str, dict[str, Opt]] = {
    "/cluster/resources": {"type": Opt(enum=("vm", "storage", "node", "sdn"))},
    "/cluster/nextid": {"vmid": Opt("int", minimum=100, maximum=999999999)},
}


_TASKS = re.compile(r"/nodes/[^/]+/tasks")
_STORAGES = re.compile(r"/nodes/[^/]+/storage")
STORAGE_OPTIONS = {
    "content": Opt(),
    "enabled": BOOL_OPT,
    "storage": Opt(),
    "target": Opt(),
    "format": BOOL_OPT,
}
_NETWORK = re.compile(r"/nodes/[^/]+/network")
NETWORK_OPTIONS = {"type": Opt(enum=res.NETWORK_TYPES)}
TASK_OPTIONS = {
    "source": Opt(enum=("archive", "active", "all")),
    "vmid": Opt("int", minimum=100, maximum=999999999),
    "typefilter": Opt(),
}


def _normalise(path: str) -> str:
    path = "/" + path.strip("/")
    return re.sub(r"/+", "/", path)


def _vms_by_node(txn: Txn) -> dict[str, list[dict[str, Any]]]:
    by_node: dict[str, list[dict[str, Any]]] = {n: [] for n in txn.nodes}
    for node, rec in txn.all_vms():
        by_node.setdefault(node, []).append(rec)
    return by_node


def statd_lag(txn: Txn, scale: float) -> float:
    lag = txn.setting("statd_lag")
    return float(lag) if lag is not None else 10.0 * scale


def get(ctx: Ctx, path: str, options: dict[str, Any]) -> Any:
    now = ctx.now()
    scale = ctx.store.delay_scale()
    with ctx.store.locked() as txn:
        raise_injected(txn, "pvesh get", ctx.node, None)
        nodes = txn.nodes
        vms = _vms_by_node(txn)
        if path == "/cluster/resources":
            kind = options.get("type")
            out: list[dict[str, Any]] = []
            if kind in (None, "vm"):
                lag = statd_lag(txn, scale)
                entries = [
                    res.vm_resource(n, r, int(nodes[n]["maxcpu"]), now, lag)
                    if nodes[n].get("online", True)
                    # no fresh RRD data from an offline node: its guests are "unknown"
                    else res.vm_resource(n, r, 0, now, float("inf"))
                    for n, recs in vms.items()
                    for r in recs
                ]
                entries += [res.ct_resource(int(k), ct, now) for k, ct in txn.containers.items()]
                out += sorted(entries, key=lambda e: str(e["vmid"]))
            if kind in (None, "node"):
                out += [res.node_resource(n, nodes[n], vms.get(n, []), now) for n in nodes]
            if kind in (None, "storage"):
                for n in nodes:
                    volumes = txn.volumes(n)
                    out += [
                        res.storage_resource(n, s, info, volumes.get(s, {}))
                        for s, info in sorted(txn.storages.items())
                    ]
            return out
        if path == "/nodes":
            return res.nodes_index(nodes, vms, now)
        m = re.fullmatch(r"/nodes/([^/]+)/status", path)
        if m:
            name = m.group(1)
            if name not in nodes:
                raise CliError(
                    f"hostname lookup '{name}' failed - failed to get address info for: "
                    f"{name}: Name or service not known"
                )
            return res.node_status(name, nodes[name], vms.get(name, []), now)
        m = re.fullmatch(r"/nodes/([^/]+)/network", path)
        if m:
            if m.group(1) not in nodes:
                raise CliError(
                    f"hostname lookup '{m.group(1)}' failed - failed to get address info for: "
                    f"{m.group(1)}: Name or service not known"
                )
            return res.node_network(nodes[m.group(1)], options.get("type"))
        m = re.fullmatch(r"/nodes/([^/]+)/tasks", path)
        if m and m.group(1) in nodes:
            vmid = options.get("vmid")
            running = workers.active(txn, m.group(1), int(vmid) if vmid is not None else None)
            return running if options.get("source", "archive") != "archive" else []
        m = re.fullmatch(r"/nodes/([^/]+)/qemu", path)
        if m and m.group(1) in nodes:
            return [
                {
                    k: v
                    for k, v in res.vm_resource(m.group(1), r, 64, now, 0).items()
                    if k not in ("id", "node", "type")
                }
                for r in vms.get(m.group(1), [])
            ]
        m = re.fullmatch(r"/nodes/([^/]+)/qemu/(\d+)/snapshot", path)
        if m and m.group(1) in nodes:
            rec = txn.vm_on(m.group(1), int(m.group(2)))
            if rec is None:
                raise CliError(
                    f"Configuration file 'nodes/{m.group(1)}/qemu-server/{m.group(2)}.conf' "
                    "does not exist"
                )
            return snapshots.listing(rec)
        m = re.fullmatch(r"/nodes/([^/]+)/storage(?:/([^/]+)/status)?", path)
        if m:
            return _storages(ctx, txn, m.group(1), m.group(2), options)
        if path == "/cluster/nextid":
            taken = {int(r["vmid"]) for recs in vms.values() for r in recs}
            taken |= {int(k) for k in txn.containers}
            wanted = options.get("vmid")
            if wanted is not None:
                if wanted in taken:
                    raise param_error({"vmid": f"VM {wanted} already exists"}, USAGE)
                return str(wanted)  # the parameter itself, a string (PM8 Cluster.pm nextid)
            for vmid in range(100, 1000000):
                if vmid not in taken:
                    return vmid
            raise CliError("unable to get any free VMID in range [100, 1000000]")
    raise CliError(f"No 'get' handler defined for '{path}'")


def _storages(ctx: Ctx, txn: Txn, node: str, storage: str | None, options: dict[str, Any]) -> Any:
    """`/nodes/{node}/storage` (`content`, `enabled` filter it) or, with `storage`, its
    `status`: the API's objects, from the same storage information `pvesm status` prints, with
    the `shared` flag it leaves out."""
    if node not in txn.nodes:
        raise CliError(
            f"hostname lookup '{node}' failed - failed to get address info for: "
            f"{node}: Name or service not known"
        )
    # An injected `pvesm status` failure stands for the storage layer failing, as in pveproxy.
    failure = take_failure(txn, "pvesm status", node, None)
    if failure is not None:
        raise CliError(failure.message, failure.exit_code)
    storages, volumes = txn.storages, txn.volumes(node)
    if storage is not None:
        info = storages.get(storage)
        if info is None:
            raise param_error({"storage": "No such storage."}, USAGE)
        _warn_offline(ctx, storage, info)
        entry = res.storage_entry(storage, info, volumes.get(storage, {}))
        del entry["storage"]
        entry.pop("used_fraction", None)  # the list's alone (ST Status.pm index)
        return entry
    out = []
    content = options.get("content")
    for name, info in sorted(storages.items()):
        if content and content not in str(info["content"]).split(","):
            continue
        if options.get("enabled") and info.get("disable"):
            continue
        _warn_offline(ctx, name, info)
        out.append(res.storage_entry(name, info, volumes.get(name, {})))
    return out


def _warn_offline(ctx: Ctx, name: str, info: dict[str, Any]) -> None:
    if info.get("state") == "inactive" and not info.get("disable"):
        ctx.err(f"storage '{name}' is not online\n")


def run(ctx: Ctx, argv: Sequence[str]) -> int:
    try:
        if not argv:
            raise CliError("ERROR: no command specified\nUSAGE: pvesh <COMMAND> [ARGS] [OPTIONS]")
        if argv[0] != "get":
            if argv[0] in ("ls", "set", "create", "delete", "usage", "help"):
                raise CliError(f"pvesim: 'pvesh {argv[0]}' is not simulated")
            raise CliError(
                f"ERROR: unknown command 'pvesh {argv[0]}'\nUSAGE: pvesh <COMMAND> [ARGS] [OPTIONS]"
            )
        rest = list(argv[1:])
        path_arg = next((a for a in rest if not a.startswith("-")), None)
        path = _normalise(path_arg) if path_arg else ""
        extra = PATH_OPTIONS.get(path, TASK_OPTIONS if _TASKS.fullmatch(path) else {})
        if _NETWORK.fullmatch(path):
            extra = NETWORK_OPTIONS
        if _STORAGES.fullmatch(path):
            extra = STORAGE_OPTIONS
        spec = CommandSpec(USAGE, (("api_path", Opt()),), {**FORMAT_OPTIONS, **extra})
        parsed = parse(spec, rest)
        options = dict(parsed.options)
        fmt = options.pop("output-format", "text")
        for key in ("noborder", "noheader", "human-readable"):
            options.pop(key, None)
        ctx.delay("query")
        value = get(ctx, _normalise(parsed.args["api_path"]), options)
        if fmt == "json":
            ctx.out(format_json(value))
        elif fmt == "json-pretty":
            ctx.out(format_json_pretty(value))
        else:
            ctx.out(format_text_table(value))
        return 0
    except CliError as exc:
        ctx.err(exc.text)
        return exc.code
