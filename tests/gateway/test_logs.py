"""What a cairn process logs: a line per request, quiet libraries, LOG_LEVEL and LOG_FORMAT,
and repeated lines held back (the next one that passes says how many)."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from actors.config import ConfigError
from gateway.http.logs import (
    ACCESS_LOG,
    RepeatFilter,
    access_logger_for,
    configure,
    quiet_third_party_warnings,
)
from tests.nats_cluster import NatsCluster


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in ("asyncssh", "nats")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=ACCESS_LOG, access_log_class=access_logger_for("demo"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_one_access_line_per_request_without_the_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def refused(_: web.Request) -> web.Response:
        return web.Response(status=403, text="no")

    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="oops")

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_post("/refused", refused)
    app.router.add_get("/broken", broken)
    runner, url = await _serve(app)
    caplog.set_level(logging.INFO, logger="cairn.access")
    try:
        async with aiohttp.ClientSession() as session:
            for method, path in (
                ("GET", "/ok?q=private+words"),
                ("POST", "/refused"),
                ("GET", "/broken"),
                ("GET", "/missing"),
            ):
                async with session.request(method, url + path) as resp:
                    await resp.read()
    finally:
        await runner.cleanup()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "cairn.access"]
    shapes = [(level, " ".join(message.split()[:4])) for level, message in lines]
    assert shapes == [
        ("INFO", "demo GET /ok 200"),
        ("INFO", "demo POST /refused 403"),  # a refusal is the service doing its job
        ("WARNING", "demo GET /broken 500"),
        ("INFO", "demo GET /missing 404"),
    ]
    assert all(message.endswith("ms 127.0.0.1") for _, message in lines)
    assert not any("private" in message for _, message in lines)


def test_json_lines_carry_the_fields_and_libraries_stay_quiet(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure({"LOG_FORMAT": "json"})
    logging.getLogger("asyncssh").info("channel opened")  # asyncssh's INFO chatter
    logging.getLogger("cairn.access").info("line", extra={"service": "vm", "status": 200})
    out = [json.loads(line) for line in io.StringIO(capsys.readouterr().err)]
    assert len(out) == 1
    assert out[0]["logger"] == "cairn.access"
    assert out[0]["level"] == "INFO"
    assert (out[0]["service"], out[0]["status"]) == ("vm", 200)
    assert out[0]["time"].endswith("+00:00")


def test_the_quantizers_chatter_is_dropped_and_its_errors_kept(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnxruntime.quantization import onnx_quantizer

    configure({})
    # Logged from the quantizer's own file through the root logger, as it does.
    quantizer = compile(
        "import logging\n"
        "logging.warning('Please consider to run pre-processing before quantization.')\n"
        "logging.info('Quantization parameters for tensor:\"LN_6\" not specified')\n"
        "logging.error('the quantizer failed')\n",
        onnx_quantizer.__file__,
        "exec",
    )
    exec(quantizer, {})
    logging.warning("a root warning of anyone else")
    err = capsys.readouterr().err
    assert "pre-processing" not in err and "Quantization parameters" not in err
    assert "ERROR root: the quantizer failed" in err
    assert "WARNING root: a root warning of anyone else" in err


def test_only_asyncssh_dsa_deprecation_is_silenced() -> None:
    from cryptography.utils import CryptographyDeprecationWarning

    dsa = "DSA is deprecated and support will be removed in a future release."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_third_party_warnings()
        for module, message, category in (
            ("asyncssh.crypto.misc", dsa, CryptographyDeprecationWarning),  # silenced
            ("asyncssh.crypto.dsa", dsa, CryptographyDeprecationWarning),  # silenced
            ("gateway.apps.vm", dsa, CryptographyDeprecationWarning),
            ("asyncssh.connection", "something else is deprecated", DeprecationWarning),
            ("gateway.main", "cairn's own", DeprecationWarning),
        ):
            warnings.warn_explicit(message, category, "x.py", 1, module=module)
    assert [str(w.message) for w in seen] == [dsa, "something else is deprecated", "cairn's own"]


def test_debug_lets_libraries_speak(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure({"LOG_LEVEL": "DEBUG"})
    logging.getLogger("asyncssh").info("channel opened")
    assert "channel opened" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "value"), [("LOG_LEVEL", "loud"), ("LOG_FORMAT", "xml")])
def test_a_bad_setting_names_the_variable(restore_logging: None, name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"^{name}: must be one of"):
        configure({name: value})


def record(msg: str, level: int = logging.ERROR, name: str = "asyncio") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_a_repeated_line_passes_a_burst_per_window_then_counts_what_it_held() -> None:
    now = [0.0]
    rf = RepeatFilter(burst=2, window=10, clock=lambda: now[0])
    accept = "socket.accept() out of system resource\nsocket: <fd=%d>"
    passed = [rf.filter(record(accept % fd)) for fd in range(100)]
    assert passed == [True, True] + [False] * 98  # the socket after the first line varies
    assert rf.filter(record("another problem"))  # other lines are not affected
    assert rf.filter(record("socket.accept() out of system resource", name="other"))
    now[0] = 10.5
    again = record(accept % 7)
    assert rf.filter(again)
    assert again.getMessage().endswith("[98 more like this held back]")
    assert rf.filter(record(accept % 8))  # the second of the new window
    assert not rf.filter(record(accept % 9))


def test_lines_below_warning_are_never_held() -> None:
    rf = RepeatFilter(burst=1, window=60, clock=lambda: 0.0)
    assert all(rf.filter(record("polled", logging.INFO)) for _ in range(50))


async def test_a_tls_bus_leaves_no_asyncio_noise(
    restore_logging: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cluster's TLS connections, opened and closed: asyncio's "eof_received()" warning,
    which says nothing is wrong, does not reach the log."""
    configure({})
    async with NatsCluster(tmp_path, 3) as cluster:
        for _ in range(3):
            nc = await cluster.connect()
            await nc.close()
    await cluster.stop()
    assert "eof_received" not in capsys.readouterr().err
