"""One fake command line (`qm ...`, `pvesh ...`, `pvesm ...`) run as a node: what the command
shims and the nodes' SSH servers both call."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from .context import Ctx

PROGRAMS = ("qm", "pvesh", "pvesm")


def execute(ctx: Ctx, argv: Sequence[str]) -> int:
    """Run one fake command line (argv[0] is the program) as ctx.node."""
    import importlib

    program = os.path.basename(argv[0]) if argv else ""
    runner: Callable[[Ctx, Sequence[str]], int] | None = None
    if program in PROGRAMS:
        # Import only the program asked for: each fake command is a fresh interpreter.
        runner = importlib.import_module(f"pvesim.{program}").run
    if runner is None:
        ctx.err(f"bash: line 1: {argv[0] if argv else ''}: command not found\n")
        return 127
    ctx.store.log_command(ctx.node, list(argv))
    ctx.delay("startup")
    return runner(ctx, list(argv[1:]))
