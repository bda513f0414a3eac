"""A throwaway PostgreSQL for tests: Debian's server binaries, a cluster in a temporary
directory on a free loopback port, and a fresh database per test.

The server never runs as root (initdb refuses it): when the tests do, the cluster belongs to
the `postgres` system user Debian's package creates. Set `CAIRN_TEST_NO_POSTGRES=1` to skip
the PostgreSQL cases on a machine without the package; CI installs it, so there they run.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs

from tests.ports import free_port

SKIP_ENV = "CAIRN_TEST_NO_POSTGRES"


def server_binaries() -> Path:
    """The newest installed server's bin directory (`postgresql-<version>`)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if not found:
        raise RuntimeError(
            "PostgreSQL's server is not installed (Debian package postgresql; ops/setup --dev "
            f"installs it); set {SKIP_ENV}=1 to skip its tests"
        )
    return found[-1].parent


@attrs.frozen
class PostgresServer:
    port: int
    directory: Path
    bin_dir: Path
    owner: pwd.struct_passwd | None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` as the superuser; returns what psql printed (unaligned, tuples only)."""
        done = subprocess.run(
            [str(self.bin_dir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
             "-c", sql],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        return done.stdout.strip()

    def new_database(self) -> str:
        name = f"cairn_{secrets.token_hex(6)}"
        self.psql(f"CREATE DATABASE {name}")
        return name

    def start(self) -> None:
        options = (
            # No fsync: a stop of the server loses nothing the kernel has (only a crash of
            # the machine would), and tests need no more.
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off"
        )
        _run(_as_owner([str(self.bin_dir / "pg_ctl"), "-D", str(self.directory / "data"),
                        "-l", str(self.directory / "log"), "-o", options, "-w", "start"],
                       self.owner))  # fmt: skip

    def stop(self) -> None:
        """An immediate stop: what a crash of the server looks like to its clients."""
        _run(_as_owner([str(self.bin_dir / "pg_ctl"), "-D", str(self.directory / "data"),
                        "-m", "immediate", "-w", "stop"], self.owner))  # fmt: skip


def _as_owner(argv: list[str], owner: pwd.struct_passwd | None) -> list[str]:
    if owner is None:
        return argv
    return ["setpriv", f"--reuid={owner.pw_uid}", f"--regid={owner.pw_gid}", "--init-groups",
            "--", *argv]  # fmt: skip


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL cluster of its own, trust auth on loopback only; stopped and removed
    afterwards."""
    bin_dir = server_binaries()
    owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    directory = Path(tempfile.mkdtemp(prefix="cairn-pg-"))
    if owner is not None:
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    _run(_as_owner([str(bin_dir / "initdb"), "-D", str(directory / "data"), "-U", "postgres",
                    "--auth=trust", "-E", "UTF8", "--no-sync"], owner))  # fmt: skip
    server = PostgresServer(free_port(), directory, bin_dir, owner)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(RuntimeError):
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
