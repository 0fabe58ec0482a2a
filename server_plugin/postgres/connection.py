"""Connections to PostgreSQL through ADBC's driver, whose results arrive as Arrow (a
``COPY ... TO STDOUT (FORMAT binary)`` under the hood): no Python object per row.

The connection string is built here, on the server, from the source's options and libpq's
``PG*`` environment variables; the password only ever comes from ``PGPASSWORD`` or a
password file, so it is in no option, plan or log. Every session reads values in one text
form (``SESSION_SETTINGS``), which ``types.from_text`` expects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pyarrow as pa
from spark_cdc.server_plugin.errors import error

# The text form every session reads values in, set when it connects (libpq's ``options``:
# no round trip of its own).
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO,YMD",
    "IntervalStyle": "iso_8601",
    "extra_float_digits": "3",
    "bytea_output": "hex",
}


def uri(connection: Mapping[str, str]) -> str:
    """A libpq URI of the options' keywords (host, port, dbname, user, passfile, sslmode)
    and ``SESSION_SETTINGS``; what is missing libpq takes from its ``PG*`` variables, as
    ``psql`` does."""
    host = connection.get("host", "")
    port = f":{connection['port']}" if connection.get("port") else ""
    user = f"{quote(connection['user'], safe='')}@" if connection.get("user") else ""
    database = quote(connection.get("dbname", ""), safe="")
    query = {key: connection[key] for key in ("passfile", "sslmode") if connection.get(key)}
    query["options"] = " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS.items())
    query["application_name"] = "spark-cdc-connect"
    pairs = "&".join(f"{key}={quote(value, safe='/')}" for key, value in query.items())
    return f"postgresql://{user}{quote(host, safe='')}{port}/{database}?{pairs}"


def address(connection: Mapping[str, str]) -> str:
    """Where the source connects, as errors name it (never a password: none is here)."""
    host = connection.get("host") or "the PGHOST/socket default"
    return f"{host}:{connection.get('port') or 5432}/{connection.get('dbname') or '(default)'}"


class Session:
    """One connection, autocommit unless a transaction is begun explicitly."""

    def __init__(self, connection: Mapping[str, str]) -> None:
        import adbc_driver_postgresql.dbapi as dbapi

        try:
            self._conn = dbapi.connect(uri(connection), autocommit=True)
        except Exception as problem:  # the driver's own classes: named for the user
            raise error(
                "POSTGRES_CHANGELOG.CONNECTION_FAILED",
                address=address(connection),
                problem=_first_line(problem),
            ) from None
        self._cursor = self._conn.cursor()

    def execute(self, sql: str, what: str, parameters: tuple[Any, ...] | None = None) -> None:
        with _refused(what):
            self._cursor.execute(sql, parameters)

    def arrow(self, sql: str, what: str, parameters: tuple[Any, ...] | None = None) -> pa.Table:
        with _refused(what):
            self._cursor.execute(sql, parameters)
            return self._cursor.fetch_arrow_table()

    def batches(
        self, sql: str, what: str, parameters: tuple[Any, ...] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """A large result as it arrives, batch by batch: never whole in memory."""
        with _refused(what):
            self._cursor.execute(sql, parameters)
            reader = self._cursor.fetch_record_batch()
        while True:
            with _refused(what):
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    return
            yield batch

    def rows(
        self, sql: str, what: str, parameters: tuple[Any, ...] | None = None
    ) -> list[dict[str, Any]]:
        """A small result (catalog rows) as dictionaries."""
        return self.arrow(sql, what, parameters).to_pylist()

    def close(self) -> None:
        try:
            self._cursor.close()
            self._conn.close()
        except Exception:  # closing a connection the server already dropped
            pass


@contextmanager
def _refused(what: str) -> Iterator[None]:
    """The database's refusal while doing ``what`` (the driver's own exception classes) as
    ``QUERY_FAILED``, naming it."""
    try:
        yield
    except Exception as problem:
        raise error(
            "POSTGRES_CHANGELOG.QUERY_FAILED", what=what, problem=_first_line(problem)
        ) from None


def _first_line(problem: BaseException) -> str:
    text = str(problem).strip()
    return (text.splitlines() or [type(problem).__name__])[0]


@contextmanager
def session(connection: Mapping[str, str]) -> Iterator[Session]:
    opened = Session(connection)
    try:
        yield opened
    finally:
        opened.close()
