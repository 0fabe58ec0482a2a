"""How the ``postgres_changelog`` source reads, on the executors and in a batch: a range of
the log (``LogRange``, peeked from the slot, so the slot stays where it is) or of the
table's pages (``CopyRange``, in the first copy's exported snapshot), and the batch reader,
which reads the slot's transactions within the range options."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.errors import error, internal_errors
from spark_cdc.server_plugin.postgres.catalog import (
    TableInfo,
    check_privileges,
    ensure_slot,
    quote_ident,
    quote_literal,
    slot_state,
    table_info,
)
from spark_cdc.server_plugin.postgres.changes import changelog, served
from spark_cdc.server_plugin.postgres.connection import Session, session
from spark_cdc.server_plugin.postgres.feed import in_feed, table_schema
from spark_cdc.server_plugin.postgres.options import PostgresOptions
from spark_cdc.server_plugin.postgres.pgoutput import decode
from spark_cdc.server_plugin.postgres.types import from_copy
from spark_cdc.server_plugin.postgres.visibility import seen_by_copy
from spark_cdc.server_plugin.vocabulary import COMMIT_VERSION, INSERT

FAMILY = "POSTGRES_CHANGELOG"


@dataclass(frozen=True)
class LogRange(InputPartition):
    """The transactions committed after ``after`` and up to ``upto``; with ``seen``, only
    those that snapshot saw (a restart's, ``_resumed``)."""

    after: int
    upto: int
    previous_us: int | None
    copied: str | None  # the first copy's Visibility; None: there was none
    read_to: int | None = None  # where the slot's read stops (the last commit's end)
    seen: str | None = None


@dataclass(frozen=True)
class CopyRange(InputPartition):
    """Pages ``first`` to ``last`` (None: the table's end) of the ``table``-th table, read
    in the exported snapshot."""

    table: int
    snapshot: str
    first: int
    last: int | None
    version: int
    timestamp_us: int


class TableReader:
    """What the batch and stream readers share: the tables, the feed's schema, and a
    partition read on an executor."""

    def __init__(self, options: PostgresOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        copies = options.initial_copy and isinstance(self, DataSourceStreamReader)
        with session(options.connection) as s:
            self.infos: list[TableInfo] = [table_info(s, *name) for name in options.tables]
            check_privileges(s, self.infos, copies)
            ensure_slot(s, options.slot, options.publication, self.infos, options.create_slot)

    def _own(self, info: TableInfo, output: pa.Schema) -> pa.Schema:
        """The rows ``info``'s table gives, before ``in_feed`` (the feed's for one table)."""
        return output if len(self.infos) == 1 else arrow_schema(table_schema(info))

    def errors_named(self, version: object = "unknown") -> Any:
        return internal_errors(self.options.qualified, version, "none", family=FAMILY)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        output = arrow_schema(self.schema)
        if isinstance(partition, CopyRange):
            with self.errors_named(partition.version):
                yield from self._copy(partition, output)
        elif isinstance(partition, LogRange):
            with self.errors_named(f"{partition.after} to {partition.upto}"):
                yield from self._log(partition, output).to_batches()

    def _log(self, part: LogRange, output: pa.Schema) -> pa.Table:
        with session(self.options.connection) as s:
            found = peek(s, self.options, part.read_to or part.upto)
        decoded = decode(found.column("data"))
        skip = seen_by_copy(part.copied, decoded.xid)
        if part.seen is not None:
            skip |= ~seen_by_copy(part.seen, decoded.xid)
        chosen = served(decoded, part.after, part.upto, skip, part.previous_us)
        truncates = self.options.include_truncates
        parts = [
            in_feed(
                changelog(decoded, info, chosen, self._own(info, output), truncates), info, output
            )
            for info in self.infos
        ]
        if len(parts) == 1:
            return parts[0]
        return pa.concat_tables(parts).sort_by(COMMIT_VERSION)  # stable: each table's order

    def _copy(self, part: CopyRange, output: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The pages' rows as inserts, batch by batch as the database sends them."""
        info = self.infos[part.table]
        own = self._own(info, output)
        columns = ", ".join(
            quote_ident(f.name) + ("" if exact else "::text")
            for f, exact in zip(info.schema, info.binary_exact, strict=True)
        )
        bounds = [f"ctid >= '({part.first},0)'::tid"]
        if part.last is not None:
            bounds.append(f"ctid < '({part.last},0)'::tid")
        with session(self.options.connection) as s:
            s.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin the copy")
            try:
                s.execute(f"SET TRANSACTION SNAPSHOT {quote_literal(part.snapshot)}", "import")
            except Exception:
                raise error(
                    "POSTGRES_CHANGELOG.COPY_SNAPSHOT_LOST",
                    table=info.qualified,
                    slot=self.options.slot,
                ) from None
            query = f"SELECT {columns} FROM {info.quoted} WHERE {' AND '.join(bounds)}"
            for rows in s.batches(query, f"copy {info.qualified}"):
                arrays = [
                    from_copy(rows.column(i), f.dataType, f.name, info.qualified)
                    for i, f in enumerate(info.schema)
                ]
                count = rows.num_rows
                arrays += [
                    pa.repeat(pa.scalar(INSERT), count),
                    pa.repeat(pa.scalar(part.version, pa.int64()), count),
                    pa.repeat(pa.scalar(part.timestamp_us, pa.timestamp("us", tz="UTC")), count),
                ]
                batch = pa.RecordBatch.from_arrays(arrays, schema=own)
                yield from in_feed(batch, info, output).to_batches()
            s.execute("COMMIT", "end the copy")


def messages(options: PostgresOptions, upto: int | None, count: int | None = None) -> str:
    """The slot's messages of whole transactions (a ``FROM`` item), up to the WAL position
    ``upto`` (a transaction is read when its commit record ends there or before) or about
    ``count`` changes; reading them does not move the slot."""
    limit = "NULL" if upto is None else f"'{lsn_text(upto)}'::pg_lsn"
    return (
        "pg_logical_slot_peek_binary_changes("
        f"{quote_literal(options.slot)}, {limit}, {'NULL' if count is None else int(count)}, "
        f"'proto_version', '1', 'publication_names', {quote_literal(options.publication)})"
    )


def peek(s: Session, options: PostgresOptions, upto: int | None) -> pa.Table:
    return s.arrow(f"SELECT data FROM {messages(options, upto)}", f"read slot {options.slot}")


def flushed(s: Session, lsn: int, seconds: float = 30.0) -> None:
    """Wait until the WAL is flushed up to ``lsn`` (a commit made with ``synchronous_commit
    = off`` is visible before it is flushed, and logical decoding reads flushed WAL only)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done = s.rows(
            "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS done",
            "read the WAL's flush position",
            (lsn_text(lsn),),
        )
        if done[0]["done"]:
            return
        time.sleep(0.05)
    raise error("POSTGRES_CHANGELOG.WAL_NOT_FLUSHED", lsn=lsn_text(lsn), seconds=seconds)


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def after_start(options: PostgresOptions, position: int) -> int:
    """The commit LSN a read goes on after: the slot's ``position``, or later where
    ``startingVersion`` says (inclusive unless ``startingBoundInclusive=false``)."""
    common = options.common
    if common.starting_version is None:
        return position
    return max(position, common.starting_version - (1 if common.starting_inclusive else 0))


class PostgresBatchReader(TableReader, DataSourceReader):
    """The slot's transactions within the range options (a peek: the slot stays)."""

    def partitions(self) -> list[InputPartition]:
        common = self.options.common
        with self.errors_named(), session(self.options.connection) as s:
            state = slot_state(s, self.options.slot)
        if state is None:
            raise error("POSTGRES_CHANGELOG.SLOT_NOT_FOUND", slot=self.options.slot)
        upto = state.current
        if common.ending_version is not None:
            upto = min(upto, common.ending_version - (0 if common.ending_inclusive else 1))
        return [LogRange(after_start(self.options, state.confirmed - 1), upto, None, None)]
