"""A real PostgreSQL server for tests: ``initdb`` in a folder of the caller's, logical
decoding on (``wal_level=logical``), a free port, listening on 127.0.0.1 (and on addresses
the caller names, such as a Docker bridge's, for a Spark server in a container), stopped
afterwards. Debian's ``postgresql`` package provides it (``apt-get install postgresql``).

    with start_postgres() as pg:
        pg.sql("CREATE TABLE orders (id int PRIMARY KEY, amount numeric(10,2))")
        feed = spark_cdc.read(spark).format("postgres").options(**pg.options()).load(
            "public.orders")

PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` system user.
Clients connect without a password from the addresses it listens on (``trust``): a test
server, never a database of value.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from spark_cdc.server_plugin.conditions import ConditionError
from spark_cdc.testing.local_server import free_port


class PostgresUnavailable(ConditionError, RuntimeError):
    """No PostgreSQL server binaries here, or the server did not start."""


def server_binaries() -> Path | None:
    """The folder with ``initdb`` and ``pg_ctl``: Debian's newest, else the PATH's."""
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3])
    )
    if debian:
        return debian[-1].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@dataclass(frozen=True)
class PostgresServer:
    folder: Path
    port: int
    binaries: Path
    user: str = "postgres"
    database: str = "postgres"
    reached_at: str = "127.0.0.1"  # this machine's address as the Spark server reaches it

    def options(self, host: str | None = None) -> dict[str, str]:
        """The ``postgres`` source's connection options; ``host`` (default ``reached_at``)
        as the Spark server reaches this machine."""
        return {
            "host": host or self.reached_at,
            "port": str(self.port),
            "user": self.user,
            "database": self.database,
        }

    def sql(self, statements: str) -> str:
        """Run SQL with ``psql`` (each statement in its own transaction), its output."""
        psql = self.binaries / "psql"
        done = subprocess.run(
            [
                str(psql),
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                self.user,
                "-d",
                self.database,
            ],
            input=statements,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}")
        return done.stdout


def _as_owner(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


@contextmanager
def start_postgres(reached_at: str = "127.0.0.1") -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 and on ``reached_at`` (where the Spark server
    reaches this machine: a container's gateway), in a new temporary folder (owned by the
    ``postgres`` user when this runs as root: a test's own folders are root's alone), until
    the block ends; the folder goes with it."""
    binaries = server_binaries()
    if binaries is None:
        raise PostgresUnavailable("SPARK_CDC_POSTGRES.NOT_INSTALLED")
    folder = Path(tempfile.mkdtemp(prefix="spark-cdc-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data = folder / "data"
    port = free_port()
    try:
        initdb = [str(binaries / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(data)]
        subprocess.run(_as_owner(initdb), capture_output=True, check=True)
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write("host all all samenet trust\n")
        addresses = ",".join(dict.fromkeys(["127.0.0.1", reached_at]))
        settings = (
            f"-p {port} -c listen_addresses={addresses} -c wal_level=logical "
            f"-c max_replication_slots=20 -c max_wal_senders=20 -k {folder} "
            "-c fsync=off -c full_page_writes=off"
        )
        pg_ctl = [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log")]
        started = subprocess.run(
            _as_owner([*pg_ctl, "-w", "-o", settings, "start"]),
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode != 0:
            log = folder / "server.log"
            text = started.stderr + (log.read_text() if log.exists() else "")
            raise PostgresUnavailable("SPARK_CDC_POSTGRES.START_FAILED", log=text[-2000:])
        try:
            yield PostgresServer(folder, port, binaries, reached_at=reached_at)
        finally:
            subprocess.run(_as_owner([*pg_ctl, "-m", "immediate", "stop"]), capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
