"""Entry points: one fake command (`python -m pvesim.cli qm ...`) and `cairn sim` (`run_sim`).

Kept free of asyncssh imports on the command path so each fake command starts fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .commands import PROGRAMS, execute
from .context import stdio_ctx
from .state import Store

if TYPE_CHECKING:
    import argparse
    import asyncio


def run_command(argv: Sequence[str]) -> int:
    root = os.environ.get("PVESIM_ROOT")
    if not root:
        sys.stderr.write("pvesim: PVESIM_ROOT is not set (start a cluster with `cairn sim`)\n")
        return 255
    store = Store(Path(root))
    if not store.exists():
        sys.stderr.write(f"pvesim: no simulated cluster in {root}\n")
        return 255
    node = os.environ.get("PVESIM_NODE")
    if not node:
        with store.locked() as txn:
            node = txn.main
    return execute(stdio_ctx(store, node), argv)


def sim_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="cairn sim", description="Run a simulated three-node Proxmox VE cluster on loopback."
    )
    data = os.environ.get("CAIRN_DATA", "data")
    parser.add_argument("--root", type=Path, default=Path(data) / "pvesim", help="state directory")
    parser.add_argument(
        "--delay-scale", type=float, default=None, help="0 = instant, 1 = realistic"
    )
    parser.add_argument(
        "--statd-lag", type=float, default=None, help="seconds /cluster/resources lags"
    )
    parser.add_argument(
        "--storage-layout",
        choices=("lvm", "zfs"),
        default="lvm",
        help="the installer's storage: local + local-lvm (lvm) or local + local-zfs (zfs)",
    )
    parser.add_argument("--node-ssh-port", type=int, default=None)
    parser.add_argument("--vm-ssh-port", type=int, default=None)
    return parser


async def read_printed_env(stdout: asyncio.StreamReader) -> dict[str, str]:
    """The environment `cairn sim` prints once its cluster runs, read from its standard
    output. Raises EOFError if the output ends first (the simulator did not start)."""
    # Imported here: the fake commands that import this module must not pay for asyncio.
    from events.printed_env import printed_env

    return await printed_env(stdout, "cairn sim")


def run_sim(args: Sequence[str] | None = None) -> int:
    """`cairn sim`: start the cluster, print its environment, run until SIGINT/SIGTERM."""
    import asyncio
    import logging
    import signal
    import warnings

    # asyncssh names the DSA key classes cryptography deprecated, each a warning at import that
    # nobody running the simulator can act on (it neither makes nor accepts DSA keys).
    warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")

    from .cluster import SimCluster
    from .state import DEFAULT_DELAY_SCALE

    argv = list(args) if args is not None else sys.argv[1:]
    if argv[:1] == ["--"]:  # `cairn sim -- --delay-scale 1` passes the separator along
        argv = argv[1:]
    opts = sim_parser().parse_args(argv)
    # One INFO line per SSH connection would drown the environment this command prints.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

    async def serve() -> None:
        sim = SimCluster(
            opts.root.resolve(),
            delay_scale=DEFAULT_DELAY_SCALE if opts.delay_scale is None else opts.delay_scale,
            statd_lag=opts.statd_lag,
            node_ssh_port=opts.node_ssh_port,
            vm_ssh_port=opts.vm_ssh_port,
            storage_layout=opts.storage_layout,
        )
        await sim.start()
        try:
            print(f"# simulated Proxmox VE cluster, state in {sim.root}")
            for key, value in sim.env(include_path=True).items():
                print(f"{key}={value}")
            sys.stdout.flush()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await sim.stop()

    asyncio.run(serve())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in PROGRAMS:
        return run_command(args)
    if args and args[0] == "sim":
        return run_sim(args[1:])
    sys.stderr.write("usage: python -m pvesim.cli {qm|pvesh|pvesm} ARGS... | sim [OPTIONS]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
