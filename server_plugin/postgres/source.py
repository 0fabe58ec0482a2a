"""``postgres_changelog``: a PostgreSQL table's changes from its logical replication slot
(the built-in ``pgoutput`` plugin, read over plain SQL), batch and streaming, in Spark's
changelog shape; a stream starts with a first copy of the table consistent with the log.

- **Versions are commit LSNs.** ``_commit_version`` is a transaction's commit LSN as a
  number, ``_commit_timestamp`` its commit time (strictly increasing, ``changes``).
- **Exactly once.** A stream's offsets are commit LSNs; a micro-batch holds the whole
  transactions committed after its start and up to its end, and the slot is advanced to the
  end only in ``commit``, after Spark recorded the batch as done. So a stop anywhere (a
  SIGKILL of the server) reads the batch again from the slot, which still holds it.
- **The first copy.** The stream's first micro-batch pins the slot's position ``C`` and a
  database snapshot exported by a transaction this reader holds open until that batch is
  committed: the copy's tasks import it (``SET TRANSACTION SNAPSHOT``) and read page ranges
  of the table in parallel, all seeing one state. That snapshot's visibility (its xmin,
  xmax and in-progress xids) goes into every later offset, and a logged transaction the copy
  already saw is skipped: nothing is lost or doubled at the seam. Copied rows are inserts at
  version ``C``. A restart before that first batch was committed cannot read the same
  snapshot again and is refused by name (``COPY_SNAPSHOT_LOST``).
- **A batch read** reads what the slot holds between the range options' LSNs (peeking: the
  slot does not move).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.changefeed.changelog_schema import changelog_schema
from spark_cdc.server_plugin.changefeed.partitions import default_parallelism
from spark_cdc.server_plugin.dependencies import ADBC_POSTGRESQL, require
from spark_cdc.server_plugin.errors import error, internal_errors
from spark_cdc.server_plugin.postgres.catalog import (
    TableInfo,
    ensure_slot,
    quote_ident,
    quote_literal,
    slot_state,
    table_info,
)
from spark_cdc.server_plugin.postgres.changes import changelog, served
from spark_cdc.server_plugin.postgres.connection import Session, session
from spark_cdc.server_plugin.postgres.options import (
    SOURCE,
    PostgresOptions,
    parse_postgres_options,
)
from spark_cdc.server_plugin.postgres.pgoutput import Decoded, decode
from spark_cdc.server_plugin.postgres.types import from_copy
from spark_cdc.server_plugin.postgres.visibility import seen_by_copy
from spark_cdc.server_plugin.vocabulary import INSERT

SOURCE_NAME, OFFSET_VERSION, FAMILY = SOURCE, 1, "POSTGRES_CHANGELOG"


class PostgresChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        require(ADBC_POSTGRESQL, SOURCE_NAME)
        options = parse_postgres_options(self.options)
        with internal_errors(options.qualified, family=FAMILY), session(options.connection) as s:
            return changelog_schema(table_info(s, options.schema, options.table).schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        require(ADBC_POSTGRESQL, SOURCE_NAME)
        options = parse_postgres_options(self.options)
        with internal_errors(options.qualified, family=FAMILY):
            return PostgresBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require(ADBC_POSTGRESQL, SOURCE_NAME)
        options = parse_postgres_options(self.options, True)
        with internal_errors(options.qualified, family=FAMILY):
            return PostgresStreamReader(options, schema)


@dataclass(frozen=True)
class LogRange(InputPartition):
    """The transactions committed after ``after`` and up to ``upto``."""

    after: int
    upto: int
    previous_us: int | None
    copied: str | None  # the first copy's Visibility; None: there was none
    read_to: int | None = None  # where the slot's read stops (the last commit's end)


@dataclass(frozen=True)
class CopyRange(InputPartition):
    """Pages ``first`` to ``last`` (None: the table's end) of the table, read in the
    exported snapshot."""

    snapshot: str
    first: int
    last: int | None
    version: int
    timestamp_us: int


class _Reader:
    """What the batch and stream readers share: the table, its schema, and a partition read
    on an executor."""

    def __init__(self, options: PostgresOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        with session(options.connection) as s:
            self.info: TableInfo = table_info(s, options.schema, options.table)
            ensure_slot(s, options.slot, options.publication, self.info, options.create_slot)

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
        chosen = served(decoded, part.after, part.upto, skip, part.previous_us)
        return changelog(decoded, self.info, chosen, output, self.options.include_truncates)

    def _copy(self, part: CopyRange, output: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The pages' rows as inserts, batch by batch as the database sends them."""
        info = self.info
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
                yield pa.RecordBatch.from_arrays(arrays, schema=output)
            s.execute("COMMIT", "end the copy")


def messages(options: PostgresOptions, upto: int | None, count: int | None = None) -> str:
    """The slot's messages of whole transactions (a ``FROM`` item), up to the WAL position
    ``upto`` (a transaction is read when its commit record ends there or before) or about
    ``count`` changes; reading them does not move the slot."""
    limit = "NULL" if upto is None else f"'{_lsn_text(upto)}'::pg_lsn"
    return (
        "pg_logical_slot_peek_binary_changes("
        f"{quote_literal(options.slot)}, {limit}, {'NULL' if count is None else int(count)}, "
        f"'proto_version', '1', 'publication_names', {quote_literal(options.publication)})"
    )


def peek(s: Session, options: PostgresOptions, upto: int | None) -> pa.Table:
    return s.arrow(f"SELECT data FROM {messages(options, upto)}", f"read slot {options.slot}")


def _lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _after_start(options: PostgresOptions, position: int) -> int:
    """The commit LSN a read goes on after: the slot's ``position``, or later where
    ``startingVersion`` says (inclusive unless ``startingBoundInclusive=false``)."""
    common = options.common
    if common.starting_version is None:
        return position
    return max(position, common.starting_version - (1 if common.starting_inclusive else 0))


class PostgresBatchReader(_Reader, DataSourceReader):
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
        return [LogRange(_after_start(self.options, state.confirmed - 1), upto, None, None)]


class PostgresStreamReader(_Reader, DataSourceStreamReader):
    """Offsets: ``{"sourceVersion", "slot", "lsn": the last commit LSN served (None until
    the first micro-batch pins it), "previousUs": its commit time as served, "copied": the
    first copy's visibility, "snapshot": the exported snapshot (the first batch's end
    only)}``; a log batch's end also names what it reads: ``after`` and ``afterUs`` (its
    start's ``lsn`` and ``previousUs``) and ``readTo`` (where its last commit record ends)."""

    def __init__(self, options: PostgresOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.position: dict[str, Any] | None = None  # 4.0/4.1 call latestOffset() bare
        self._holder: Session | None = None  # keeps the copy's snapshot exported

    def _offset(
        self, lsn: int | None, previous_us: int | None, copied: str | None, **more: Any
    ) -> dict[str, Any]:
        return {
            "sourceVersion": OFFSET_VERSION,
            "slot": self.options.slot,
            "lsn": lsn,
            "previousUs": previous_us,
            "copied": copied,
            **more,
        }

    def _checked(self, offset: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(offset, dict) or offset.get("sourceVersion") != OFFSET_VERSION:
            raise error(
                "POSTGRES_CHANGELOG.INVALID_OFFSET",
                offset=json.dumps(offset, sort_keys=True),
                sourceVersion=OFFSET_VERSION,
            )
        if offset.get("slot") != self.options.slot:
            raise error(
                "POSTGRES_CHANGELOG.OFFSET_FROM_ANOTHER_SLOT",
                checkpointSlot=offset.get("slot"),
                slot=self.options.slot,
            )
        return offset

    def initialOffset(self) -> dict[str, Any]:  # pinned by the first micro-batch's end
        return self._offset(None, None, None)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        with self.errors_named():
            begin = self._checked(start) if start is not None else self.position
            end = self._advance(begin or self.initialOffset())
            self.position = end
            return end

    def _advance(self, start: dict[str, Any]) -> dict[str, Any]:
        """The next micro-batch's end: the whole transactions after ``start`` within
        ``maxChangesPerTrigger``, listed by their Begin and Commit messages."""
        with session(self.options.connection) as s:
            state = slot_state(s, self.options.slot)
            if state is None:
                raise error("POSTGRES_CHANGELOG.SLOT_NOT_FOUND", slot=self.options.slot)
            if start["lsn"] is None:
                return self._pinned(state.confirmed)
            if state.confirmed > start["lsn"]:
                raise error(
                    "POSTGRES_CHANGELOG.CHANGES_LOST",
                    slot=self.options.slot,
                    lsn=start["lsn"],
                    confirmed=state.confirmed,
                )
            txns = self._transactions(s)
        later = np.flatnonzero(txns.commit_lsn > start["lsn"])
        if len(later) == 0:
            return start
        copied = start["copied"]
        chosen = served(
            txns, start["lsn"], None, seen_by_copy(copied, txns.xid), start["previousUs"]
        )
        times = chosen.commit_us[chosen.keep]
        previous = int(times[-1]) if len(times) else start["previousUs"]
        last = int(later[-1])
        return self._offset(
            int(txns.commit_lsn[last]),
            previous,
            copied,
            readTo=int(txns.end_lsn[last]),
            after=start["lsn"],  # the batch's own start: an end says what it reads
            afterUs=start["previousUs"],
        )

    def _transactions(self, s: Session) -> Decoded:
        """The slot's next transactions (about ``maxChangesPerTrigger`` changes), from
        their Begin and Commit messages alone."""
        marks = s.arrow(
            f"SELECT data FROM {messages(self.options, None, self.options.max_changes)} "
            "WHERE get_byte(data, 0) IN (66, 67)",  # Begin, Commit
            f"read slot {self.options.slot}",
        )
        return decode(marks.column("data"))

    def _pinned(self, confirmed: int) -> dict[str, Any]:
        """The first micro-batch's end: the slot's position, and with a first copy the
        snapshot it is read in, held open here until the batch is committed."""
        if not self.options.initial_copy:
            return self._offset(_after_start(self.options, confirmed), None, None)
        if self._holder is not None:
            self._holder.close()
        holder = Session(self.options.connection)
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin the copy")
        row = holder.rows(
            "SELECT pg_export_snapshot()::text AS name, pg_current_snapshot()::text AS seen, "
            "(extract(epoch from transaction_timestamp()) * 1000000)::bigint AS at",
            "export a snapshot",
        )[0]
        self._holder = holder
        return self._offset(confirmed, int(row["at"]), row["seen"], snapshot=row["name"])

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        with self.errors_named():
            start, end = self._checked(start), self._checked(end)
            if end["lsn"] is None or end["lsn"] == start["lsn"]:
                return []
            if start["lsn"] is None:
                if "snapshot" not in end:
                    return []
                return self._copy_ranges(end)
            if "snapshot" in end:
                return self._resumed(start, end)
            return [
                LogRange(end["after"], end["lsn"], end["afterUs"], end["copied"], end["readTo"])
            ]

    def _resumed(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Spark 4.0/4.1 ask a stream started again from its checkpoint for its latest
        offset without saying where it was, so it pinned a first copy again: no copy is
        read, and the stream goes on from the checkpoint's position (``start``; each later
        end names the position it reads after). The slot is there or behind it (Spark
        commits a batch's end to the source when the next batch starts); ahead, changes
        are gone."""
        if self._holder is not None:
            self._holder.close()
            self._holder = None
        if end["lsn"] > start["lsn"]:
            raise error(
                "POSTGRES_CHANGELOG.CHANGES_LOST",
                slot=self.options.slot,
                lsn=start["lsn"],
                confirmed=end["lsn"],
            )
        self.position = start
        return []

    def _copy_ranges(self, end: dict[str, Any]) -> list[InputPartition]:
        with session(self.options.connection) as s:
            pages = int(
                s.rows(
                    "SELECT (pg_relation_size($1::regclass) / current_setting('block_size')::int)"
                    "::bigint AS pages",
                    f"size {self.info.qualified}",
                    (self.info.quoted,),
                )[0]["pages"]
            )
        count = max(1, min(self.options.common.parallelism or default_parallelism(), pages))
        step = -(-max(pages, 1) // count)
        bounds = [i * step for i in range(count)]
        return [
            CopyRange(
                end["snapshot"],
                first,
                bounds[i + 1] if i + 1 < count else None,
                end["lsn"],
                end["previousUs"],
            )
            for i, first in enumerate(bounds)
        ]

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The database's newest LSN and the WAL the slot keeps on its disk (Spark 4.2+
        shows it as the source's ``latestOffset`` in the progress)."""
        try:
            with session(self.options.connection) as s:
                state = slot_state(s, self.options.slot)
        except Exception:
            return None
        return None if state is None else {"lsn": state.current, "retainedWalBytes": state.retained}

    def commit(self, end: dict[str, Any]) -> None:
        with self.errors_named():
            end = self._checked(end)
            if "snapshot" in end and self._holder is not None:
                self._holder.close()  # the copy is committed: its snapshot may go
                self._holder = None
            if end["lsn"] is None:
                return
            with session(self.options.connection) as s:
                state = slot_state(s, self.options.slot)
                if state is not None and state.confirmed < end["lsn"]:
                    s.rows(
                        "SELECT (pg_replication_slot_advance($1, $2::pg_lsn)).slot_name::text AS s",
                        f"advance replication slot {self.options.slot}",
                        (self.options.slot, _lsn_text(end["lsn"])),
                    )

    def stop(self) -> None:
        if self._holder is not None:
            self._holder.close()
