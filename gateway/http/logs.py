"""What a cairn process writes to its log, and how.

One line per HTTP request (``cairn.access``), one line per meaningful change (``cairn.journal``,
see ``actors/journal.py``), warnings and errors; nothing else unless ``LOG_LEVEL=debug`` asks
for it. Third-party libraries speak at WARNING and above: asyncssh alone logs every channel at
INFO, which buried everything else.

``LOG_FORMAT=json`` writes one JSON object per line (for journald, Loki and friends) with the
structured fields of the line (an access line's ``service``, ``method``, ``path`` ...).

A fault that repeats (no file descriptors left, a store that refuses writes, a peer that keeps
failing) must not grow the log by megabytes a second and bury the first line that explains it:
the same warning or error template from the same logger passes ``burst`` times per ``window``
seconds; the rest are counted, and the next one that passes says how many were held back.
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from pythonjsonlogger.json import JsonFormatter

from actors.config import env_choice

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("text", "json")
# Loggers of libraries that are chatty at INFO; at LOG_LEVEL=debug they speak as freely as ours.
THIRD_PARTY = (
    "aiohttp",
    "asyncio",
    "asyncssh",
    "httpx",
    "mcp",
    "nats",
    "PIL",
    "pykka",
    "sqlalchemy",
    "watchfiles",
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RepeatFilter(logging.Filter):
    def __init__(
        self,
        burst: int = 5,
        window: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        min_level: int = logging.WARNING,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self.min_level = min_level
        # key -> (window start, passed in this window, held back since the last that passed)
        self._seen: dict[tuple[str, int, str], tuple[float, int, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level:
            return True
        # The template's first line: asyncio puts the socket or task (which vary) after it.
        key = (record.name, record.levelno, str(record.msg).split("\n", 1)[0])
        now = self.clock()
        start, passed, held = self._seen.get(key, (now, 0, 0))
        if now - start >= self.window:
            start, passed = now, 0
        if passed >= self.burst:
            self._seen[key] = (start, passed, held + 1)
            return False
        if held:
            record.msg = f"{record.msg} [{held} more like this held back]"
        if len(self._seen) >= 10_000:
            self._seen.clear()
        self._seen[key] = (start, passed + 1, 0)
        return True


class MalformedRequestFilter(logging.Filter):
    """aiohttp logs a request it cannot parse (a header holding a NUL, a broken request line)
    at ERROR with a traceback, as if cairn had failed. The client gets its 400 and the access
    log its line; here the record becomes one INFO line saying what was wrong. The same
    message with any other exception (a handler that crashed) stays an ERROR with its
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            what = " ".join(line.strip() for line in exc.message.splitlines() if line.strip())
            client = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "malformed request from %s: %d %s", (client, exc.code, what)
            record.exc_info, record.exc_text = None, None
        return True


MALFORMED_REQUESTS = MalformedRequestFilter()


class TlsEofNoise(logging.Filter):
    """asyncio warns "returning true from eof_received() has no effect when using ssl" each
    time a TLS connection whose protocol keeps the transport open ends (nats-py's, on a
    cluster's TLS port, at every close and reconnect): nothing is wrong, and the line would
    bury what is."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("returning true from eof_received()")


TLS_EOF_NOISE = TlsEofNoise()


class QuantizerNoise(logging.Filter):
    """ONNX Runtime's quantizer, which builds the search model's int8 file at a first start,
    logs through the root logger: a WARNING advising pre-processing ("Please consider to run
    pre-processing before quantization") and an INFO line per tensor it leaves in float32,
    both by design of that model (actors/search/embed/minilm_onnx.py) and of no use to an admin.
    Those records alone are dropped; an error of the quantizer still shows."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "root" or record.levelno >= logging.ERROR:
            return True
        return "onnxruntime" not in record.pathname or "quantization" not in record.pathname


QUANTIZER_NOISE = QuantizerNoise()


def install_filters() -> None:
    """The filters that belong to a logger, not to a handler (idempotent)."""
    logging.getLogger("aiohttp.server").addFilter(MALFORMED_REQUESTS)
    logging.getLogger("asyncio").addFilter(TLS_EOF_NOISE)
    logging.getLogger().addFilter(QUANTIZER_NOISE)


def quiet_third_party_warnings() -> None:
    """asyncssh still names the DSA key classes cryptography deprecated, and each name warns
    once at import: ten lines of CryptographyDeprecationWarning before anything of cairn's,
    none of which an admin can act on (cairn neither makes nor accepts DSA keys). Only that
    warning, raised from asyncssh's own modules, is dropped; any other warning, cairn's own
    above all, shows as before."""
    from cryptography.utils import CryptographyDeprecationWarning

    warnings.filterwarnings(
        "ignore",
        message="DSA is deprecated",
        category=CryptographyDeprecationWarning,
        module=r"asyncssh(\.|$)",
    )


def configure(env: Mapping[str, str], *, verbose: bool = False) -> None:
    """Set the root logger from ``LOG_LEVEL`` (default info; ``-v`` means debug) and
    ``LOG_FORMAT`` (text or json), writing to standard error."""
    level_name = env_choice(env, "LOG_LEVEL", tuple(LEVELS), "debug" if verbose else "info")
    form = env_choice(env, "LOG_FORMAT", FORMATS, "text")
    level = LEVELS[level_name]
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",  # ISO 8601, UTC
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else logging.WARNING)
    install_filters()


class AccessLogger(AbstractAccessLogger):
    """``<service> <METHOD> <path> <status> <ms>ms <client>`` once a response is finished.

    The path is logged without its query string: queries carry what users search for. A 5xx
    is a WARNING (something of ours failed); every other answer, 4xx included, is INFO: a
    refused request is the service doing its job."""

    service = "?"

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        ms = time * 1000.0
        status = response.status
        fields: dict[str, Any] = {
            "service": self.service,
            "method": request.method,
            "path": request.path,
            "status": status,
            "ms": round(ms, 2),
            "client": request.remote or "-",
        }
        level = logging.WARNING if status >= 500 else logging.INFO
        self.logger.log(
            level,
            "%s %s %s %d %.1fms %s",
            self.service,
            request.method,
            request.path,
            status,
            ms,
            fields["client"],
            extra=fields,
        )

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)


def access_logger_for(service: str) -> type[AccessLogger]:
    """An access logger class that names ``service`` (aiohttp takes a class, not an object)."""
    return type(f"AccessLogger_{service}", (AccessLogger,), {"service": service})


ACCESS_LOG = logging.getLogger("cairn.access")
