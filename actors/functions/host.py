"""The actor-host side of the service: the registry (actor + NATS commands) and, unless
``FUNCTIONS_RUNNER=0``, a runner host in this process."""

from __future__ import annotations

import contextlib

from nats.aio.subscription import Subscription

from actors.functions.codestore import CodeStore
from actors.functions.commands import serve_registry
from actors.functions.registry import FunctionRegistry
from actors.functions.runner_host import RunnerHost
from actors.functions.settings import FunctionsSettings
from actors.platform import Runtime


class FunctionsHost:
    def __init__(self, runtime: Runtime, subs: list[Subscription], runner: RunnerHost | None):
        self.runtime = runtime
        self.subs = subs
        self.runner = runner

    @classmethod
    async def start(cls, runtime: Runtime, settings: FunctionsSettings) -> FunctionsHost:
        code = CodeStore(runtime.data_dir / "functions" / "code")
        _, subs = await serve_registry(runtime.nc, runtime.actors, code)
        runner = None
        if settings.runner:
            runner = RunnerHost(runtime.nc, settings, runtime.data_dir)
            await runner.start()
        return cls(runtime, subs, runner)

    async def stop(self) -> None:
        for sub in self.subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if self.runner is not None:
            await self.runner.stop()
        await self.runtime.actors.stop(FunctionRegistry, "registry")
