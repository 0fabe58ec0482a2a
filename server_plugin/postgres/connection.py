"""Connections to PostgreSQL through ADBC's driver, whose results arrive as Arrow (a
``COPY ... TO STDOUT (FORMAT binary)`` under the hood): no Python object per row.

ADBC's low-level API (``adbc_driver_manager.AdbcConnection``), not its DB-API layer: that
layer imports ``pyarrow.dataset`` and pandas, half a CPU second in every Python process that
connects, and a query Spark starts runs several (the schema's, the planner's, the stream
runner's, each task's); it also prepares each statement, a round trip more. Connections are
in autocommit, ADBC's default; a transaction is begun explicitly.

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

import numpy as np
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
        import adbc_driver_manager
        import adbc_driver_postgresql

        try:
            self._database = adbc_driver_postgresql.connect(uri(connection))
            self._conn = adbc_driver_manager.AdbcConnection(self._database)
        except Exception as problem:  # the driver's own classes: named for the user
            raise error(
                "POSTGRES_CHANGELOG.CONNECTION_FAILED",
                address=address(connection),
                problem=_first_line(problem),
            ) from None

    def _statement(self, sql: str, parameters: tuple[Any, ...] | None) -> Any:
        import adbc_driver_manager

        statement = adbc_driver_manager.AdbcStatement(self._conn)
        statement.set_sql_query(sql)
        if parameters:
            texts = [_one_text(str(value)) for value in parameters]
            names = [f"p{i}" for i in range(len(texts))]
            statement.bind(pa.RecordBatch.from_arrays(texts, names=names))
        return statement

    def execute(self, sql: str, what: str, parameters: tuple[Any, ...] | None = None) -> None:
        with _refused(what):
            statement = self._statement(sql, parameters)
            try:
                statement.execute_update()
            finally:
                statement.close()

    def arrow(self, sql: str, what: str, parameters: tuple[Any, ...] | None = None) -> pa.Table:
        with self._results(sql, what, parameters) as reader, _refused(what):
            return reader.read_all()

    def batches(
        self, sql: str, what: str, parameters: tuple[Any, ...] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """A large result as it arrives, batch by batch: never whole in memory."""
        with self._results(sql, what, parameters) as reader:
            while True:
                with _refused(what):
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        return
                yield batch

    @contextmanager
    def _results(
        self, sql: str, what: str, parameters: tuple[Any, ...] | None
    ) -> Iterator[pa.RecordBatchReader]:
        with _refused(what):
            statement = self._statement(sql, parameters)
            try:
                handle, _ = statement.execute_query()
            except BaseException:
                statement.close()
                raise
            reader = pa.RecordBatchReader._import_from_c(handle.address)
        try:
            yield reader
        finally:
            reader.close()
            statement.close()

    def rows(
        self, sql: str, what: str, parameters: tuple[Any, ...] | None = None
    ) -> list[dict[str, Any]]:
        """A small result (catalog rows) as dictionaries."""
        return self.arrow(sql, what, parameters).to_pylist()

    def close(self) -> None:
        try:
            self._conn.close()
            self._database.close()
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


def _one_text(value: str) -> pa.Array:
    """A one-value string array built from its buffers: ``pa.array`` of a Python object
    imports pandas (pyarrow looks for its types), a third of a CPU second in a process that
    only plans."""
    data = value.encode()
    offsets = pa.py_buffer(np.array([0, len(data)], np.int32).tobytes())
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)])


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
