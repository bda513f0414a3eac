"""Runner hosts as a NATS queue group: two hosts share the work, and runs go on when one
stops between runs."""

from nats.aio.client import Client

from actors.functions.runner_host import RunnerHost
from actors.functions.settings import FunctionsSettings
from actors.platform import Runtime
from events.bus import connect
from tests.functions.conftest import SERVICE_ENV, start_service


async def test_two_runner_hosts_share_runs_and_survive_one_stopping(runtime: Runtime) -> None:
    settings = FunctionsSettings.from_env(SERVICE_ENV)
    # A second host with its own NATS connection and data dir, as on another machine.
    other_nc: Client = await connect(runtime.nats_url)
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
