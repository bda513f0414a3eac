"""A runner host in a process of its own, as on another machine: `python -m
tests.functions.runner_process DATA_DIR` with `NATS_URL`, `NATS_KEYS` and the run settings in its
environment; prints `runner ready` once it takes runs."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from actors.functions.runner_host import RunnerHost
from actors.functions.settings import FunctionsSettings
from events.access import NatsAccess
from events.credentials import Keyring
from events.permissions import Role


async def main(data_dir: Path) -> None:
    keyring = Keyring(Path(os.environ["NATS_KEYS"]))
    nc = await NatsAccess(os.environ["NATS_URL"], keyring).connect(Role.RUNNER)
    host = RunnerHost(nc, FunctionsSettings.from_env(dict(os.environ)), data_dir)
    await host.start()
    print("runner ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
