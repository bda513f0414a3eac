"""Runner hosts as a NATS queue group: two hosts share the work, runs go on when one stops
between runs, and a host killed in the middle of a run fails that run within seconds."""

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from actors.functions import protocol
from actors.functions.runner_host import RunnerHost
from actors.functions.settings import FunctionsSettings
from actors.platform import Runtime
from events.bus import flush_all
from events.permissions import Role
from tests.conftest import wait_for
from tests.functions.conftest import SERVICE_ENV, start_service
from tests.functions.test_hardening import MARKED, processes_named


async def test_two_runner_hosts_share_runs_and_survive_one_stopping(runtime: Runtime) -> None:
    settings = FunctionsSettings.from_env(SERVICE_ENV)
    # A second host with its own NATS connection and data dir, as on another machine.
    other_nc: Client = await runtime.bus.connect(Role.RUNNER)
    other = RunnerHost(other_nc, settings, runtime.data_dir / "other-host")
    await other.start()
    try:
        async with start_service(runtime) as service:
            local = service.host.runner
            assert local is not None
            for attempt in range(60):
                reply = await service.run_now("python", f"return {attempt}")
                assert reply.json() == {"data": attempt, "type": "number"}
                if local.taken and other.taken:
                    break
            assert local.taken > 0 and other.taken > 0, (local.taken, other.taken)

            await local.stop()  # between runs: nothing in flight
            before = other.taken
            for attempt in range(3):
                reply = await service.run_now("javascript", f"return {attempt} * 2")
                assert reply.json() == {"data": attempt * 2, "type": "number"}
            assert other.taken == before + 3
    finally:
        await other.stop()
        await other_nc.close()


async def test_no_runner_host_at_all_is_503(runtime: Runtime) -> None:
    async with start_service(runtime, FUNCTIONS_RUNNER="0") as service:
        assert service.host.runner is None
        reply = await service.run_now("python", "return 1")
        assert (reply.status, reply.content_type, reply.text) == (
            503,
            "text/plain",
            "no runner host is available",
        )


async def test_a_runner_host_killed_mid_run_fails_that_run_at_once_and_others_carry_on(
    runtime: Runtime, tmp_path: Path
) -> None:
    """kill -9 of the only runner host while it runs a 60 s function: the caller hears within
    seconds (the host's `alive` messages stop), not after the run's time limit, and nothing of
    the run is left running. Runs then go to the hosts that are left."""
    assert runtime.bus.keyring is not None
    env = {
        **os.environ,
        **SERVICE_ENV,
        "RUN_TIMEOUT": "60",
        "NATS_URL": runtime.nats_url,
        "NATS_KEYS": str(runtime.bus.keyring.path),
    }
    remote = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.functions.runner_process",
        str(tmp_path / "remote"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert remote.stdout is not None
    try:
        assert await asyncio.wait_for(remote.stdout.readline(), 60) == b"runner ready\n"
        async with start_service(runtime, FUNCTIONS_RUNNER="0", RUN_TIMEOUT="60") as service:
            code = MARKED["python"].format(mark="cairn-doomed")
            run = asyncio.create_task(service.run_now("python", code))
            await wait_for(lambda: processes_named("cairn-doomed"), what="the run to start")
            remote.send_signal(signal.SIGKILL)
            await remote.wait()
            reply = await run
            # Heard through the missing `alive` messages (the 60 s limit's end says "no
            # answer from the runner").
            assert (reply.status, reply.text) == (
                500,
                "failed to run: the runner host stopped answering"
                " (it stopped, or lost its connection to NATS)",
            )
            # The sandbox died with its host (bwrap --die-with-parent): nothing runs unseen.
            await wait_for(lambda: not processes_named("cairn-doomed"), what="the run to end")

            other_nc: Client = await runtime.bus.connect(Role.RUNNER)
            other = RunnerHost(other_nc, FunctionsSettings.from_env(SERVICE_ENV), tmp_path / "b")
            await other.start()
            try:
                for attempt in range(3):
                    reply = await service.run_now("python", f"return {attempt}")
                    assert reply.json() == {"data": attempt, "type": "number"}
                assert other.taken == 3
            finally:
                await other.stop()
                await other_nc.close()
    finally:
        if remote.returncode is None:
            remote.kill()
            await remote.wait()


async def test_a_second_run_with_a_held_runs_id_does_not_take_its_replies(
    runtime: Runtime,
) -> None:
    """A run's messages go to the reply subject it came with: a request naming the id of a run
    the host holds is refused, and the held run's result still reaches its own asker."""
    async with start_service(runtime) as service:
        assert service.host.runner is not None
        gateway = runtime.gateway_nc
        heard: dict[str, list[dict[str, Any]]] = {"first": [], "second": []}

        def hearing(name: str) -> Callable[[Msg], Awaitable[None]]:
            async def hear(msg: Msg) -> None:
                heard[name].append(protocol.decode(msg.data))

            return hear

        for name in heard:
            await gateway.subscribe(f"cairn.functions.reply.dup.{name}", cb=hearing(name))
        await flush_all(gateway)
        run = {"language": "python", "code": "return 7", "id": "same-id"}
        for name in heard:
            await gateway.publish(
                protocol.RUN_SUBJECT,
                protocol.encode(run),
                reply=f"cairn.functions.reply.dup.{name}",
            )
        await wait_for(
            lambda: any(m["t"] in protocol.FINAL for m in heard["first"]),
            what="the first run's result",
        )
    assert heard["second"] == [{"t": "error", "message": "duplicate run id"}]
    assert heard["first"][-1]["t"] == protocol.RESULT
