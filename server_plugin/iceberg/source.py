"""``iceberg_changelog``: an Iceberg table's change feed from its snapshots, under Spark's
changelog contract, batch and streaming, for any Spark Connect server from 4.0 on, with no
Iceberg jars: read with pyiceberg and pyarrow.

A branch's snapshots are its commits (``timeline``), each snapshot's changes its added,
removed and newly deleted rows (``changes``), read per data file (``file_reader``). The
planning, the row-level passes and the streams' admission control are the Delta source's
(``spark_cdc.server_plugin.changefeed.partitions``, ``resolving_reader``, ``admission``): a
micro-batch holds whole snapshots, never part of one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.changefeed.bounds import first_version, last_version
from spark_cdc.server_plugin.changefeed.changelog_schema import changelog_schema, row_id_paths
from spark_cdc.server_plugin.changefeed.commit_timestamps import next_timestamp
from spark_cdc.server_plugin.changefeed.offsets import ICEBERG, Offset
from spark_cdc.server_plugin.changefeed.pushdown import Check, planner_pushes
from spark_cdc.server_plugin.changefeed.reader import (
    END_BOUNDS,
    ChangelogFileReader,
    PushedFilters,
    declared,
    options_for_schema,
)
from spark_cdc.server_plugin.changefeed.stream_reader import Served, TimelineStreamReader
from spark_cdc.server_plugin.dependencies import PYICEBERG, require
from spark_cdc.server_plugin.errors import error, internal_errors
from spark_cdc.server_plugin.iceberg.changes import (
    IcebergTask,
    TableLayout,
    snapshot_tasks,
    table_tasks,
)
from spark_cdc.server_plugin.iceberg.file_reader import LINEAGE_FIELDS, ReadContext, read_task
from spark_cdc.server_plugin.iceberg.manifests import ManifestCache, snapshot_files
from spark_cdc.server_plugin.iceberg.options import (
    ENDING_SNAPSHOT,
    SOURCE,
    STARTING_SNAPSHOT,
    IcebergOptions,
    parse_iceberg_options,
)
from spark_cdc.server_plugin.iceberg.table import open_table
from spark_cdc.server_plugin.iceberg.table_schema import identifier_paths, spark_schema
from spark_cdc.server_plugin.iceberg.timeline import TimedSnapshot, Timeline, timeline
from spark_cdc.server_plugin.row_level.rules import RowLevelRules

SOURCE_NAME = SOURCE
log = logging.getLogger("iceberg_changelog")


class IcebergChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        require(PYICEBERG, SOURCE_NAME)
        options = options_for_schema(parse_iceberg_options, self.options, _END_BOUNDS)
        path = options.common.path
        with internal_errors(path, family=ICEBERG):
            table = _Table(options)
            bounded = options.common.has_end or options.ending_snapshot is not None
            last = table.batch_range()[1] if bounded else None
            return declared(changelog_schema(table.spark_schema(last)), options.common)

    def reader(self, schema: StructType) -> DataSourceReader:
        require(PYICEBERG, SOURCE_NAME)
        options = parse_iceberg_options(self.options)
        pushing = planner_pushes()
        with internal_errors(options.common.path, family=ICEBERG):
            if pushing:
                return IcebergChangelogPushingReader(options, schema)
            return IcebergChangelogReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require(PYICEBERG, SOURCE_NAME)
        options = parse_iceberg_options(self.options, True)
        with internal_errors(options.common.path, family=ICEBERG):
            return IcebergChangelogStreamReader(options, schema)


_END_BOUNDS = (*END_BOUNDS, ENDING_SNAPSHOT.lower())


class _Table:
    """The table as of now: its metadata, its branch's snapshots, the read's range."""

    def __init__(self, options: IcebergOptions) -> None:
        self.options = options
        self.path = options.common.path
        self.table = open_table(self.path, options.common.storage, options.catalog)
        self.metadata = self.table.metadata
        self.timeline: Timeline = timeline(self.metadata, options.branch, self.path)
        self.layout = TableLayout.of(self.metadata)
        self.manifests: ManifestCache = {}  # what snapshot_files read (never shipped)

    @property
    def snapshots(self) -> tuple[TimedSnapshot, ...]:
        return self.timeline.snapshots

    def iceberg_schema(self, version: int | None = None) -> Any:
        """The schema of the snapshot at ``version`` (None: the branch's head; an empty
        table's: the current one)."""
        chosen = [t for t in self.snapshots if version is None or t.version <= version]
        schema_id = chosen[-1].snapshot.schema_id if chosen else None
        if schema_id is None:
            return self.metadata.schema()
        return self.metadata.schema_by_id(schema_id) or self.metadata.schema()

    def spark_schema(self, version: int | None = None) -> StructType:
        return spark_schema(self.iceberg_schema(version), self.path)

    def version_of(self, snapshot_id: int, option: str) -> int:
        for timed in self.snapshots:
            if timed.snapshot.snapshot_id == snapshot_id:
                return timed.version
        raise error(
            "ICEBERG_CHANGELOG.SNAPSHOT_NOT_IN_BRANCH",
            snapshotId=snapshot_id,
            option=option,
            branch=self.options.branch,
            path=self.path,
        )

    def first_at_or_after(self, timestamp_ms: int) -> int | None:
        return next((t.version for t in self.snapshots if t.timestamp_ms >= timestamp_ms), None)

    def tasks(self, timed: TimedSnapshot) -> list[IcebergTask]:
        files = snapshot_files(timed.snapshot, self.table.io, self.manifests)
        return snapshot_tasks(timed, files, self.layout)

    @property
    def versions(self) -> list[int]:
        return [t.version for t in self.snapshots]

    def first_version(self, batch: bool, newest: int | None = None) -> int | None:
        """Where the starting options put a read's start (``bounds.first_version``)."""
        start = self.options.starting_snapshot
        return first_version(
            self.options.common,
            self.versions,
            self.first_at_or_after,
            batch=batch,
            newest=newest,
            from_bound=None if start is None else self.version_of(start, STARTING_SNAPSHOT),
        )

    def batch_range(self) -> tuple[int, int]:
        """The versions a batch read covers; an empty range is ``first > last``."""
        first = self.first_version(batch=True)
        assert first is not None  # a batch read always starts somewhere
        end = self.options.ending_snapshot
        last = last_version(
            self.options.common,
            self.versions[-1] if self.snapshots else 0,
            self._last_at_or_before,
            None if end is None else self.version_of(end, ENDING_SNAPSHOT),
        )
        return self.checked_first(first), last

    def _last_at_or_before(self, timestamp_ms: int) -> int | None:
        kept = [t.version for t in self.snapshots if t.timestamp_ms <= timestamp_ms]
        return kept[-1] if kept else None

    def checked_first(self, first: int) -> int:
        """``first``, or the oldest version still readable when the snapshots before it
        expired (``failOnDataLoss=false``; else ``DATA_LOSS``)."""
        if not self.timeline.expired_before or not self.snapshots:
            return first
        oldest = self.snapshots[0].version
        if first >= oldest:
            return first
        if self.options.common.fail_on_data_loss:
            raise error(
                "ICEBERG_CHANGELOG.DATA_LOSS",
                path=self.path,
                version=first,
                nextAvailableVersion=oldest,
            )
        log.warning(
            "The snapshots of '%s' before version %s expired; reading from there because "
            "failOnDataLoss=false.",
            self.path,
            oldest,
        )
        return oldest


class _IcebergReader(ChangelogFileReader):
    """How an Iceberg table's files are read, for the batch and the stream reader."""

    FAMILY = ICEBERG
    SHIPPED = (*ChangelogFileReader.SHIPPED, "iceberg", "context")

    def __init__(self, options: IcebergOptions, schema: StructType) -> None:
        super().__init__(options.common, schema)
        self.iceberg = options
        self.context: ReadContext | None = None

    def uri(self) -> str:
        return self.iceberg.common.path

    def read_task(self, target: Any, task: Any, checks: Sequence[Check] = ()) -> Iterator[Any]:
        assert self.context is not None  # pyiceberg reads the files: no row groups spared
        return read_task(self.context, target, task)

    def _use_schema_of(self, table: _Table, version: int | None) -> None:
        """Read every file into the schema of ``version`` (by field id), as ``schema()``
        declared it; resolve the row-level passes' row id against it."""
        iceberg = table.iceberg_schema(version)
        strict = spark_schema(iceberg, table.path)
        self._serve(changelog_schema(strict))
        self.context = ReadContext(
            table.path,
            table.table.io,
            table.metadata,
            iceberg,
            self.options.fail_on_data_loss,
        )
        common = self.options
        if common.resolves:
            paths = _row_id(common.row_id, iceberg, strict, common.compute_updates)
            self.rules = RowLevelRules(
                paths, common.drop_carryovers, common.compute_updates, _has_lineage(table)
            )


class IcebergChangelogReader(_IcebergReader, DataSourceReader):
    def __init__(self, options: IcebergOptions, schema: StructType) -> None:
        table = _Table(options)
        super().__init__(options, schema)
        self.table = table
        self.range = table.batch_range()
        has_end = options.common.has_end or options.ending_snapshot is not None
        self._use_schema_of(table, self.range[1] if has_end else None)

    def partitions(self) -> list[InputPartition]:
        with self.errors_named():
            first, last = self.range
            tasks: list[IcebergTask] = []
            for timed in self.table.snapshots:
                if first <= timed.version <= last:
                    tasks += self.table.tasks(timed)
            return list(self._partitions(tasks))


class IcebergChangelogPushingReader(PushedFilters, IcebergChangelogReader):
    """The batch reader where the read's planner pushes filters (``changefeed.pushdown``)."""


class IcebergChangelogStreamReader(_IcebergReader, TimelineStreamReader):
    """The streaming protocol (``TimelineStreamReader``) over a branch's snapshots, the
    table's metadata read afresh on every call."""

    def __init__(self, options: IcebergOptions, schema: StructType) -> None:
        table = _Table(options)
        super().__init__(options, schema)
        self._use_schema_of(table, None)
        self.table_id = str(table.metadata.table_uuid)
        self.started_at = table.snapshots[-1].version if table.snapshots else 0
        self._table = table

    def _fresh(self) -> _Table:
        self._table = _Table(self.iceberg)
        return self._table

    def _first_version(self) -> int | None:
        return self._table.first_version(batch=False, newest=self.started_at)

    def _head(self, last: int | None) -> Served | None:
        table = self._fresh()
        chosen = [t for t in table.snapshots if last is None or t.version <= last]
        if not chosen:
            return None
        head = chosen[-1]
        return Served(head.version, head.timestamp_ms, head.snapshot.snapshot_id)

    def _commits(self, start: Offset, last: int | None) -> Iterator[tuple[Served, list[Any]]]:
        """The branch's snapshots from ``start`` (its ``version`` on) up to ``last``, their
        timestamps continuing the offset's chain; the offset's snapshot must still be on the
        branch (else the history was rewritten, or expired: data loss)."""
        assert start.version is not None
        table = self._fresh()
        snapshots = table.snapshots
        begin = start.version
        served = start.snapshot_id
        if served is not None and served not in {t.snapshot.snapshot_id for t in snapshots}:
            oldest = snapshots[0] if snapshots else None
            if oldest is None or not table.timeline.expired_before or begin >= oldest.version:
                raise self._rewritten(served)
            if oldest.snapshot.parent_snapshot_id != served:  # the snapshots between expired
                begin = table.checked_first(begin)
        elif served is None:
            begin = table.checked_first(begin)
        previous = start.previous_ms
        for timed in snapshots:
            if timed.version < begin:
                continue
            if last is not None and timed.version > last:
                break
            previous = next_timestamp(timed.snapshot.timestamp_ms, previous)
            chained = TimedSnapshot(timed.snapshot, timed.version, previous)
            problem = self._schema_problem(table, chained)
            if problem is not None:
                raise problem
            yield Served(timed.version, previous, timed.snapshot.snapshot_id), table.tasks(chained)

    def _schema_problem(self, table: _Table, timed: TimedSnapshot) -> Exception | None:
        if timed.version <= self.started_at:
            return None  # older rows read into the current schema by field id
        found = table.spark_schema(timed.version)
        if found == self.table_schema:
            return None
        return error(
            "ICEBERG_CHANGELOG.SCHEMA_CHANGED",
            version=timed.version,
            found=found.simpleString(),
            reading=self.table_schema.simpleString(),
            why="the stream's schema is fixed when it starts. Restart the query to read on "
            "with the new schema (a new checkpoint if columns were dropped or retyped).",
        )

    def _snapshot_tasks(self, pinned: Offset) -> list[Any]:
        """The table as of the pinned snapshot, as inserts at its version."""
        if pinned.snapshot_id is None:  # an empty table when the stream started
            return []
        table = self._table
        for timed in table.snapshots:
            if timed.snapshot.snapshot_id == pinned.snapshot_id:
                at = TimedSnapshot(timed.snapshot, timed.version, pinned.previous_ms or 0)
                files = snapshot_files(timed.snapshot, table.table.io)
                return list(table_tasks(at, files, table.layout))
        raise self._rewritten(pinned.snapshot_id)

    def _rewritten(self, snapshot_id: int) -> Exception:
        return error(
            "ICEBERG_CHANGELOG.HISTORY_REWRITTEN",
            snapshotId=snapshot_id,
            path=self.uri(),
            branch=self.iceberg.branch,
        )


def _row_id(
    given: tuple[str, ...] | None, iceberg: Any, strict: StructType, updates: bool
) -> tuple[tuple[str, ...], ...] | None:
    """The row id the passes group by: ``rowId`` as given, else the table's identifier
    fields (as Spark's connectors declare their row id); update detection needs one of
    them, carry-over removal compares whole rows without."""
    if given is not None:
        return row_id_paths(given, strict)
    found = identifier_paths(iceberg)
    if found:
        return found
    if updates:
        raise error("INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID", flags="computeUpdates")
    return None


def _has_lineage(table: _Table) -> bool:
    """Whether rows carry v3 row lineage: v3 tables do, unless a column takes the name of
    a lineage field (then it is not read, and carry-overs are found by comparing rows)."""
    reserved = {name for _, name in LINEAGE_FIELDS}
    names = {f.name for s in table.metadata.schemas for f in s.fields}
    return table.metadata.format_version >= 3 and not names & reserved
