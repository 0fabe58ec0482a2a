"""``delta_changelog``: a Delta table's change feed from its transaction log, under Spark's
changelog contract, batch and streaming, for any Spark Connect server from 4.0 on.

Streams are modelled on Delta's own source, with one deliberate difference: a micro-batch
never splits a commit (the initial snapshot included), so a zero-delay watermark on
``_commit_timestamp`` downstream never sees a commit's rows arrive late. The streaming
protocol is every format's (``changefeed.stream_reader``); this module says how a Delta
log's commits are listed, checked and read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.changefeed.bounds import first_version, last_version
from spark_cdc.server_plugin.changefeed.changelog_schema import changelog_schema, row_id_paths
from spark_cdc.server_plugin.changefeed.offsets import Offset
from spark_cdc.server_plugin.changefeed.pushdown import Check, planner_pushes
from spark_cdc.server_plugin.changefeed.reader import (
    END_BOUNDS,
    ChangelogFileReader,
    PushedFilters,
    declared,
    options_for_schema,
)
from spark_cdc.server_plugin.changefeed.source_options import SourceOptions
from spark_cdc.server_plugin.changefeed.stream_reader import Served, TimelineStreamReader
from spark_cdc.server_plugin.delta.column_mapping import ColumnMapping
from spark_cdc.server_plugin.delta.file_reader import (
    check_no_reserved_columns,
    partition_value,
    read_task,
)
from spark_cdc.server_plugin.delta.file_tasks import FileTask, commit_tasks, snapshot_tasks
from spark_cdc.server_plugin.delta.log import DeltaLog, check_readable_protocol
from spark_cdc.server_plugin.delta.options import parse_delta_options
from spark_cdc.server_plugin.delta.table_schema import (
    physical_schema,
    readable_as,
    schema_changed,
    table_schema,
)
from spark_cdc.server_plugin.delta.timeline import TimedCommit, Timeline
from spark_cdc.server_plugin.dependencies import DELTALAKE, require
from spark_cdc.server_plugin.errors import error, internal_errors
from spark_cdc.server_plugin.row_level.rules import RowLevelRules

SOURCE_NAME = "delta_changelog"


class DeltaChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        require(DELTALAKE, SOURCE_NAME)
        options = options_for_schema(parse_delta_options, self.options, END_BOUNDS)
        delta_log = DeltaLog(options.path, options.storage)
        with internal_errors(delta_log.uri):
            table = _checked_table(delta_log)
            if options.has_end:
                end = _batch_range(options, Timeline(delta_log, options.fail_on_data_loss))[1]
                if end != table.version():
                    table = delta_log.table(max(end, 0))
            schema = table_schema(table.schema().to_json())
            check_no_reserved_columns(schema)
            return declared(changelog_schema(schema), options)

    def reader(self, schema: StructType) -> DataSourceReader:
        require(DELTALAKE, SOURCE_NAME)
        options = parse_delta_options(self.options)
        pushing = planner_pushes()
        with internal_errors(options.path):
            if pushing:
                return DeltaChangelogPushingReader(options, schema)
            return DeltaChangelogReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require(DELTALAKE, SOURCE_NAME)
        options = parse_delta_options(self.options, True)
        with internal_errors(options.path):
            return DeltaChangelogStreamReader(options, schema)


class _DeltaReader(ChangelogFileReader):
    """How a Delta table's files are read, for the batch and the stream reader."""

    SHIPPED = (*ChangelogFileReader.SHIPPED, "log", "mapping")
    SPLITS_FILES = True

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.log = DeltaLog(options.path, options.storage)
        self.timeline = Timeline(self.log, options.fail_on_data_loss)
        self.mapping: ColumnMapping | None = None
        self.physical_schema = self.table_schema  # top-level physical names, for checks
        self.partition_columns: tuple[str, ...] = ()

    def uri(self) -> str:
        return self.log.uri

    def read_task(self, target: Any, task: Any, checks: Sequence[Check] = ()) -> Iterator[Any]:
        return read_task(
            self.log, target, task, self.options.fail_on_data_loss, self.mapping, checks
        )

    def task_values(self, tasks: Sequence[Any], names: set[str]) -> dict[str, Any]:
        """Each task's partition values, typed as the table declares them."""
        types = {f.name: f.type for f in arrow_schema(self.table_schema)}
        values = {}
        for name in (n for n in self.partition_columns if n in names):
            key = self.mapping.physical_name(name) if self.mapping is not None else name
            texts = [dict(task.partition_values).get(key) for task in tasks]
            scalars = [partition_value(text, types[name]).as_py() for text in texts]
            values[name] = pa.array(scalars, types[name])
        return values

    def _use_mapping_of(self, table: Any) -> None:
        """Column mapping as of the version whose schema this read serves, and the row-level
        passes to resolve, their row id resolved against that schema."""
        metadata = table.metadata()
        self.partition_columns = tuple(metadata.partition_columns)
        schema_string = table.schema().to_json()
        self.mapping = ColumnMapping.of(schema_string, metadata.configuration)
        self.physical_schema = physical_schema(schema_string, metadata.configuration)
        strict = table_schema(schema_string)
        check_no_reserved_columns(strict)  # here too: a read given a schema skips schema()
        self._serve(changelog_schema(strict))
        options = self.options
        if options.resolves:
            paths = None if options.row_id is None else row_id_paths(options.row_id, strict)
            self.rules = RowLevelRules(paths, options.drop_carryovers, options.compute_updates)

    def _unreadable(self, timed: TimedCommit, why: str) -> Exception | None:
        older = timed.physical_schema
        if self.mapping is not None:  # a dropped column's old values are not served
            kept = set(self.physical_schema.names)
            older = StructType([f for f in older.fields if f.name in kept])
        if readable_as(older, self.physical_schema):
            return None
        return schema_changed(timed.commit.version, timed.schema, self.table_schema, why)


class DeltaChangelogReader(_DeltaReader, DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        table = self.log.table()
        if options.has_end:  # the end version's logical schema, as schema() declared it
            end = _batch_range(options, self.timeline)[1]
            if end != table.version():
                table = self.log.table(max(end, 0))
        self._use_mapping_of(table)

    def partitions(self) -> list[InputPartition]:
        with self.errors_named():
            first, last = _batch_range(self.options, self.timeline)
            tasks: list[FileTask] = []
            for timed in self.timeline.commits(first, None, last=last):
                problem = self._unreadable(
                    timed,
                    "its rows cannot be read with the range's final schema; split the "
                    "read at that version.",
                )
                if problem is not None:
                    raise problem
                tasks += commit_tasks(timed.commit, timed.timestamp_ms)
            return list(self._partitions(tasks))


class DeltaChangelogPushingReader(PushedFilters, DeltaChangelogReader):
    """The batch reader where the read's planner pushes filters (``changefeed.pushdown``)."""


class DeltaChangelogStreamReader(_DeltaReader, TimelineStreamReader):
    """The streaming protocol (``TimelineStreamReader``) over a Delta log's commits."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        table = _checked_table(self.log)
        self._use_mapping_of(table)
        self.table_id = table.metadata().id
        self.started_at = table.version()  # later schema changes fail the stream

    def _first_version(self) -> int | None:
        if not self.options.has_start or self.options.starting_latest:
            return None
        versions = _commit_versions(self.log)
        return first_version(
            self.options,
            versions,
            lambda ms: self.timeline.first_at_or_after(ms, versions),
            batch=False,
            newest=self.started_at,
        )

    def _head(self, last: int | None) -> Served:
        pinned = last if last is not None else self._newest_version()
        recorded = self.log.commit(pinned)
        return Served(pinned, recorded.timestamp_ms if recorded is not None else None)

    def _newest_version(self) -> int:
        return _commit_versions(self.log)[-1]

    def _commits(self, start: Offset, last: int | None) -> Iterator[tuple[Served, list[Any]]]:
        assert start.version is not None
        for timed in self.timeline.commits(start.version, start.previous_ms, last):
            problem = self._schema_problem(timed)
            if problem is not None:
                raise problem
            tasks = commit_tasks(timed.commit, timed.timestamp_ms)
            yield Served(timed.commit.version, timed.timestamp_ms), list(tasks)

    def _schema_problem(self, timed: TimedCommit) -> Exception | None:
        version = timed.commit.version
        changed = timed.commit.metadata is not None and timed.schema != self.table_schema
        if changed and version > self.started_at:
            return schema_changed(
                version,
                timed.schema,
                self.table_schema,
                "the stream's schema is fixed when it starts. Restart the query to read on "
                "with the new schema (a new checkpoint if columns were dropped or retyped).",
            )
        return self._unreadable(
            timed, "this stream cannot read those rows; start it from a later version."
        )

    def _snapshot_tasks(self, pinned: Offset) -> list[Any]:
        assert pinned.version is not None
        snapshot = pinned.version - 1
        table = self.log.table(snapshot)
        return list(snapshot_tasks(table, snapshot, pinned.previous_ms or 0))


def _checked_table(delta_log: DeltaLog) -> Any:
    table = delta_log.table()
    protocol = table.protocol()
    check_readable_protocol(
        {"readerFeatures": protocol.reader_features or ()},
        {"configuration": table.metadata().configuration},
    )
    return table


def _commit_versions(delta_log: DeltaLog) -> list[int]:
    versions = delta_log.commit_versions()
    if not versions:
        raise error("DELTA_CHANGELOG.NOT_A_DELTA_TABLE", path=delta_log.uri)
    return versions


def _batch_range(options: SourceOptions, timeline: Timeline) -> tuple[int, int]:
    """The versions a batch read covers; an empty range is ``first > last``."""
    versions = _commit_versions(timeline.log)
    first = first_version(
        options, versions, lambda ms: timeline.first_at_or_after(ms, versions), batch=True
    )
    last = last_version(options, versions[-1], lambda ms: timeline.last_at_or_before(ms, versions))
    assert first is not None  # a batch read always starts somewhere
    return first, last
