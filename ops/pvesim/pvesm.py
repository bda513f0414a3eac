"""The fake `pvesm status`."""

from __future__ import annotations

from collections.abc import Sequence

from . import resources as res
from .args import BOOL_OPT, CliError, CommandSpec, Opt, param_error, parse
from .context import Ctx, raise_injected
from .formats import format_pvesm_status

USAGE = "pvesm status  [OPTIONS]"
SPEC = CommandSpec(
    USAGE,
    (),
    {
        "storage": Opt(),
        "content": Opt(),
        "enabled": BOOL_OPT,
        "target": Opt(),
        "format": BOOL_OPT,
    },
)


def status(ctx: Ctx, argv: Sequence[str]) -> int:
    parsed = parse(SPEC, argv)
    wanted = parsed.options.get("storage")
    content = parsed.options.get("content")
    ctx.delay("query")
    with ctx.store.locked() as txn:
        raise_injected(txn, "pvesm status", ctx.node, None)
        storages = txn.storages
        volumes = txn.volumes(ctx.node)
        kib_header = txn.setting("pvesm_kib_header") is True  # PVE 8 unless asked
    if wanted is not None and wanted not in storages:
        raise param_error({"storage": "No such storage."}, USAGE)
    rows = []
    for name, info in storages.items():
        if wanted is not None and name != wanted:
            continue
        if content and content not in str(info.get("content", "")).split(","):
            continue
        if parsed.options.get("enabled") and info.get("disable"):
            continue
        if info.get("state") == "inactive" and not info.get("disable"):
            ctx.err(f"storage '{name}' is not online\n")
        rows.append(res.storage_row(name, info, volumes.get(name, {})))
    ctx.out(format_pvesm_status(rows, kib_header=kib_header))
    return 0


def run(ctx: Ctx, argv: Sequence[str]) -> int:
    try:
        if not argv:
            raise CliError("ERROR: no command specified\nUSAGE: pvesm <COMMAND> [ARGS] [OPTIONS]")
        if argv[0] != "status":
            raise CliError(
                f"ERROR: unknown command 'pvesm {argv[0]}'\nUSAGE: pvesm <COMMAND> [ARGS] [OPTIONS]"
            )
        return status(ctx, argv[1:])
    except CliError as exc:
        ctx.err(exc.text)
        return exc.code
