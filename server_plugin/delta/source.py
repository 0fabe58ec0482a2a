"""``delta_changelog``: a Delta table's change feed from its transaction log, under Spark's
changelog contract, batch and streaming, for any Spark Connect server from 4.0 on.

Streams are modelled on Delta's own source, with one deliberate difference: a micro-batch
never splits a commit (the initial snapshot included), so a zero-delay watermark on
``_commit_timestamp`` downstream never sees a commit's rows arrive late.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.changefeed.admission import AVAILABLE_NOW, AdmissionControl
from spark_cdc.server_plugin.changefeed.change_batches import read_group
from spark_cdc.server_plugin.changefeed.changelog_schema import (
    as_nullable,
    changelog_schema,
    declared_schema,
    row_id_paths,
)
from spark_cdc.server_plugin.changefeed.offsets import Offset, check_forward
from spark_cdc.server_plugin.changefeed.partitions import (
    RESOLVE_BYTES,
    FileGroup,
    default_parallelism,
    plan_partitions,
)
from spark_cdc.server_plugin.changefeed.resolving_reader import read_resolved
from spark_cdc.server_plugin.changefeed.source_options import SourceOptions
from spark_cdc.server_plugin.delta.column_mapping import ColumnMapping
from spark_cdc.server_plugin.delta.file_reader import check_no_reserved_columns, read_task
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
from spark_cdc.server_plugin.errors import ChangelogSourceError, error, internal_errors
from spark_cdc.server_plugin.row_level.rules import RowLevelRules

SOURCE_NAME = "delta_changelog"


class DeltaChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        require(DELTALAKE, SOURCE_NAME)
        options = _options_for_schema(self.options)
        delta_log = DeltaLog(options.path, options.storage)
        with internal_errors(delta_log.uri):
            table = _checked_table(delta_log)
            if options.has_end:
                end = _batch_range(options, Timeline(delta_log, options.fail_on_data_loss))[1]
                if end != table.version():
                    table = delta_log.table(max(end, 0))
            schema = table_schema(table.schema().to_json())
            check_no_reserved_columns(schema)
            return _declared(changelog_schema(schema), options)

    def reader(self, schema: StructType) -> DataSourceReader:
        require(DELTALAKE, SOURCE_NAME)
        options = parse_delta_options(self.options)
        with internal_errors(options.path):
            return DeltaChangelogReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require(DELTALAKE, SOURCE_NAME)
        options = parse_delta_options(self.options, True)
        with internal_errors(options.path):
            return DeltaChangelogStreamReader(options, schema)


def _options_for_schema(raw: Mapping[str, str]) -> SourceOptions:
    """``schema()`` runs before Spark says batch or stream, and what is wrong with an end
    bound depends on which: a batch read lacks its start, a stream has no end. So a bad end
    bound is left to the reader of either kind, which follows at once and names it; the
    schema is then the latest version's."""
    try:
        return parse_delta_options(raw)
    except ChangelogSourceError:
        without_end = {k: v for k, v in raw.items() if k.lower() not in _END_BOUNDS}
        if len(without_end) == len(raw):
            raise
        return parse_delta_options(without_end)


_END_BOUNDS = ("endingversion", "endingtimestamp")


class _Reader:
    """What the batch and the stream reader share; pickled to executors for ``read``."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.strict_schema = schema  # the table's own nullability, to read files with
        self.table_schema = StructType(schema.fields[:-3])
        self.log = DeltaLog(options.path, options.storage)
        self.timeline = Timeline(self.log, options.fail_on_data_loss)
        self.mapping: ColumnMapping | None = None
        self.physical_schema = self.table_schema  # top-level physical names, for checks
        self.rules: RowLevelRules | None = None
        self.parallelism = options.parallelism or default_parallelism()

    def _use_mapping_of(self, table: Any) -> None:
        """Column mapping as of the version whose schema this read serves, and the row-level
        passes to resolve, their row id resolved against that schema."""
        metadata = table.metadata()
        schema_string = table.schema().to_json()
        self.mapping = ColumnMapping.of(schema_string, metadata.configuration)
        self.physical_schema = physical_schema(schema_string, metadata.configuration)
        strict = table_schema(schema_string)
        read_as = changelog_schema(strict)
        # The declared schema with the table's nullability (not another version's, should
        # the table have changed since Spark asked for the schema).
        if read_as != self.schema and as_nullable(read_as) == as_nullable(self.schema):
            self.strict_schema = read_as
            self.table_schema = strict
        options = self.options
        if options.resolves:
            paths = None if options.row_id is None else row_id_paths(options.row_id, strict)
            self.rules = RowLevelRules(paths, options.drop_carryovers, options.compute_updates)

    def _partitions(self, tasks: Sequence[FileTask]) -> list[FileGroup]:
        budget = self.options.resolve_task_bytes or RESOLVE_BYTES
        keys = self.rules.key_names if self.rules else set()
        key_share = max(1, len(keys)) / max(1, len(self.table_schema.fields))
        return plan_partitions(tasks, self.parallelism, self.rules, budget, min(1.0, key_share))

    def __getstate__(self) -> dict[str, Any]:
        # Executors only read files: ship what ``read`` needs, not the driver's caches.
        return {
            "options": self.options,
            "schema": self.schema,
            "strict_schema": self.strict_schema,
            "log": self.log,
            "mapping": self.mapping,
            "rules": self.rules,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options, self.schema, self.log = state["options"], state["schema"], state["log"]
        self.strict_schema, self.mapping = state["strict_schema"], state["mapping"]
        self.rules = state["rules"]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, FileGroup):  # Spark's placeholder for "no partitions"
            return
        fail = self.options.fail_on_data_loss
        versions = sorted({task.version for task in partition.files})
        files = [task.path for task in partition.files]
        mapping = self.mapping

        def read(target: Any, task: Any) -> Iterator[Any]:
            return read_task(self.log, target, task, fail, mapping)

        with internal_errors(
            self.log.uri,
            versions[0] if len(versions) == 1 else ", ".join(map(str, versions)),
            f"'{files[0]}'" if len(files) == 1 else f"one of {len(files)}",
        ):
            if partition.resolve and self.rules is not None:
                yield from read_resolved(
                    read, self.schema, partition, self.rules, self.strict_schema
                )
                return
            yield from read_group(read, self.schema, partition)

    def _unreadable(self, timed: TimedCommit, why: str) -> Exception | None:
        older = timed.physical_schema
        if self.mapping is not None:  # a dropped column's old values are not served
            kept = set(self.physical_schema.names)
            older = StructType([f for f in older.fields if f.name in kept])
        if readable_as(older, self.physical_schema):
            return None
        return schema_changed(timed.commit.version, timed.schema, self.table_schema, why)


class DeltaChangelogReader(_Reader, DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        table = self.log.table()
        if options.has_end:  # the end version's logical schema, as schema() declared it
            end = _batch_range(options, self.timeline)[1]
            if end != table.version():
                table = self.log.table(max(end, 0))
        self._use_mapping_of(table)

    def partitions(self) -> Sequence[InputPartition]:
        with internal_errors(self.log.uri):
            return self._planned_partitions()

    def _planned_partitions(self) -> Sequence[InputPartition]:
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
        return self._partitions(tasks)


class DeltaChangelogStreamReader(_Reader, AdmissionControl, DataSourceStreamReader, *AVAILABLE_NOW):  # type: ignore[misc]
    """Admits whole commits per micro-batch, within maxFilesPerTrigger/maxBytesPerTrigger
    (on servers that pass limits: 4.2+), but always at least one."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        table = _checked_table(self.log)
        self._use_mapping_of(table)
        self.table_id: str = table.metadata().id
        self.started_at: int = table.version()  # later schema changes fail the stream
        self.target: int | None = None  # trigger(availableNow=True): the last version to read
        self.position: Offset | None = None  # 4.0/4.1 call latestOffset() without a start
        # The files latestOffset admitted, for the partitions() call that plans that batch.
        self._planned: tuple[Offset, Offset, list[FileTask]] | None = None
        self._served = False  # whether the last latestOffset call admitted commits

    def initialOffset(self) -> dict[str, Any]:
        with internal_errors(self.log.uri):
            return self._initial_offset()

    def _initial_offset(self) -> dict[str, Any]:
        options = self.options
        if options.starting_version is not None:
            first = options.starting_version + (0 if options.starting_inclusive else 1)
            if options.starting_version > self.started_at:
                raise _starting_after_latest(options.starting_version, self.started_at)
            return Offset(self.table_id, first, False, None).to_json()
        if options.starting_timestamp_ms is not None:
            first = _first_version_from(options, self.timeline, self.log.commit_versions())
            return Offset(self.table_id, first, False, None).to_json()
        if options.starting_earliest:
            first = _commit_versions(self.log)[0]
            return Offset(self.table_id, first, False, None).to_json()
        return Offset(self.table_id, None, not options.starting_latest, None).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = _latest_version(self.log)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        with internal_errors(self.log.uri):
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict[str, Any] | None, limit: Any) -> dict[str, Any]:
        if start is not None:
            begin = Offset.from_json(start, self.table_id)
        else:
            begin = self.position or Offset.from_json(self.initialOffset(), self.table_id)
        end = self._advance(begin, limit)
        self.position = end
        return end.to_json()

    def _advance(self, start: Offset, limit: Any) -> Offset:
        if start.version is None:  # the first batch pins the version: snapshot or latest
            pinned = self.target if self.target is not None else _latest_version(self.log)
            recorded = self.log.commit(pinned)
            stamp = recorded.timestamp_ms if recorded is not None else None
            self._served = start.initial_snapshot
            return Offset(self.table_id, pinned + 1, False, stamp)
        budget = self._budget(limit)
        end, batch = start, list[FileTask]()
        try:
            for timed in self.timeline.commits(start.version, start.previous_ms, self.target):
                problem = self._schema_problem(timed)
                if problem is not None:
                    raise problem
                tasks = commit_tasks(timed.commit, timed.timestamp_ms)
                if not budget.admit(tasks):
                    break
                end = Offset(self.table_id, timed.commit.version + 1, False, timed.timestamp_ms)
                batch += tasks
        except ChangelogSourceError:
            if not budget.commits and (not self._served or self.target is not None):
                raise
            # A commit that cannot be served: serve the ones before it, then, right after a
            # micro-batch with rows, answer "no new data" once. Spark then runs its no-data
            # micro-batch, which releases the rows a downstream watermark still holds (a
            # post-processed stream's last commit), and the next call fails. Not under
            # availableNow: there "no new data" would end the query without the error.
        self._served = budget.commits > 0
        self._planned = (start, end, batch)
        return end

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

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        with internal_errors(self.log.uri):
            return self._stream_partitions(start, end)

    def _stream_partitions(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Sequence[InputPartition]:
        first = Offset.from_json(start, self.table_id)
        last = Offset.from_json(end, self.table_id)
        check_forward(first, last)
        if self.position is None or (self.position.version or 0) < (last.version or 0):
            self.position = last
        if first.version is None:
            if not first.initial_snapshot or last.version is None:
                return []
            snapshot = last.version - 1
            table = self.log.table(snapshot)
            return self._partitions(snapshot_tasks(table, snapshot, last.previous_ms or 0))
        if self._planned is not None and self._planned[:2] == (first, last):
            return self._partitions(self._planned[2])  # already read and checked
        tasks: list[FileTask] = []
        assert last.version is not None  # check_forward: an end at or after the start
        for timed in self.timeline.commits(first.version, first.previous_ms, last.version - 1):
            problem = self._schema_problem(timed)
            if problem is not None:
                raise problem
            tasks += commit_tasks(timed.commit, timed.timestamp_ms)
        return self._partitions(tasks)

    def commit(self, end: dict[str, Any]) -> None:
        pass


def _declared(strict: StructType, options: SourceOptions) -> StructType:
    return declared_schema(
        strict, options.resolves, options.compute_updates, options.nullable_schema
    )


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


def _latest_version(delta_log: DeltaLog) -> int:
    return _commit_versions(delta_log)[-1]


def _starting_after_latest(version: int, latest: int) -> Exception:
    return error(
        "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST",
        startingVersion=version,
        latestVersion=latest,
    )


def _first_version_from(options: SourceOptions, timeline: Timeline, versions: list[int]) -> int:
    stamp = options.starting_timestamp_ms
    assert stamp is not None
    first = timeline.first_at_or_after(stamp + (0 if options.starting_inclusive else 1), versions)
    if first is None:  # nothing recorded that late: the next commit will be
        return (versions[-1] + 1) if versions else 0
    return first


def _batch_range(options: SourceOptions, timeline: Timeline) -> tuple[int, int]:
    """The versions a batch read covers; an empty range is ``first > last``."""
    versions = _commit_versions(timeline.log)
    latest = versions[-1]
    if options.starting_latest:
        raise error("INVALID_CDC_OPTION.LATEST_IN_BATCH")
    if options.starting_version is not None:
        if options.starting_version > latest:
            raise _starting_after_latest(options.starting_version, latest)
        first = options.starting_version + (0 if options.starting_inclusive else 1)
    elif options.starting_earliest:  # commits before it were cleaned up: not data loss
        first = versions[0]
    elif options.starting_timestamp_ms is not None:
        first = _first_version_from(options, timeline, versions)
        if first > latest:
            raise error("INVALID_CDC_OPTION.STARTING_TIMESTAMP_AFTER_LATEST")
    else:
        first = 0
    last = latest
    if options.ending_version is not None:
        last = min(latest, options.ending_version - (0 if options.ending_inclusive else 1))
    elif options.ending_timestamp_ms is not None:
        stamp = options.ending_timestamp_ms - (0 if options.ending_inclusive else 1)
        found = timeline.last_at_or_before(stamp, versions)
        last = found if found is not None else -1
    return first, last
