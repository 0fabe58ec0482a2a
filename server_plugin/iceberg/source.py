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
    changelog_schema,
    declared_schema,
    row_id_paths,
)
from spark_cdc.server_plugin.changefeed.commit_timestamps import next_timestamp
from spark_cdc.server_plugin.changefeed.offsets import ICEBERG, Offset, check_forward
from spark_cdc.server_plugin.changefeed.partitions import (
    RESOLVE_BYTES,
    FileGroup,
    default_parallelism,
    plan_partitions,
)
from spark_cdc.server_plugin.changefeed.resolving_reader import read_resolved
from spark_cdc.server_plugin.dependencies import PYICEBERG, require
from spark_cdc.server_plugin.errors import ChangelogSourceError, error, internal_errors
from spark_cdc.server_plugin.iceberg.changes import (
    IcebergTask,
    TableLayout,
    snapshot_tasks,
    table_tasks,
)
from spark_cdc.server_plugin.iceberg.file_reader import LINEAGE_FIELDS, ReadContext, read_task
from spark_cdc.server_plugin.iceberg.manifests import snapshot_files
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
        options = _options_for_schema(self.options)
        path = options.common.path
        with internal_errors(path, family=ICEBERG):
            table = _Table(options)
            bounded = options.common.has_end or options.ending_snapshot is not None
            last = table.batch_range()[1] if bounded else None
            return _declared(changelog_schema(table.spark_schema(last)), options)

    def reader(self, schema: StructType) -> DataSourceReader:
        require(PYICEBERG, SOURCE_NAME)
        options = parse_iceberg_options(self.options)
        with internal_errors(options.common.path, family=ICEBERG):
            return IcebergChangelogReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require(PYICEBERG, SOURCE_NAME)
        options = parse_iceberg_options(self.options, True)
        with internal_errors(options.common.path, family=ICEBERG):
            return IcebergChangelogStreamReader(options, schema)


def _options_for_schema(raw: Mapping[str, str]) -> IcebergOptions:
    """As the Delta source's: a bad end bound is left to the reader, which names it."""
    try:
        return parse_iceberg_options(raw)
    except ChangelogSourceError:
        kept = {k: v for k, v in raw.items() if k.lower() not in _END_BOUNDS}
        if len(kept) == len(raw):
            raise
        return parse_iceberg_options(kept)


_END_BOUNDS = ("endingversion", "endingtimestamp", ENDING_SNAPSHOT.lower())


def _declared(strict: StructType, options: IcebergOptions) -> StructType:
    common = options.common
    return declared_schema(strict, common.resolves, common.compute_updates, common.nullable_schema)


class _Table:
    """The table as of now: its metadata, its branch's snapshots, the read's range."""

    def __init__(self, options: IcebergOptions) -> None:
        self.options = options
        self.path = options.common.path
        self.table = open_table(self.path, options.common.storage, options.catalog)
        self.metadata = self.table.metadata
        self.timeline: Timeline = timeline(self.metadata, options.branch, self.path)
        self.layout = TableLayout.of(self.metadata)

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
        return snapshot_tasks(timed, snapshot_files(timed.snapshot, self.table.io), self.layout)

    def batch_range(self) -> tuple[int, int]:
        """The versions a batch read covers; an empty range is ``first > last``."""
        common = self.options.common
        if common.starting_latest:
            raise error("INVALID_CDC_OPTION.LATEST_IN_BATCH")
        versions = [t.version for t in self.snapshots]
        latest = versions[-1] if versions else 0
        inclusive = 0 if common.starting_inclusive else 1
        if self.options.starting_snapshot is not None:
            first = self.version_of(self.options.starting_snapshot, STARTING_SNAPSHOT) + inclusive
        elif common.starting_version is not None:
            if common.starting_version > latest:
                raise _starting_after_latest(common.starting_version, latest)
            first = common.starting_version + inclusive
        elif common.starting_earliest:
            first = versions[0] if versions else 0
        elif common.starting_timestamp_ms is not None:
            found = self.first_at_or_after(common.starting_timestamp_ms + inclusive)
            if found is None:
                raise error("INVALID_CDC_OPTION.STARTING_TIMESTAMP_AFTER_LATEST")
            first = found
        else:
            first = 0
        last = latest
        ending = 0 if common.ending_inclusive else 1
        if self.options.ending_snapshot is not None:
            last = self.version_of(self.options.ending_snapshot, ENDING_SNAPSHOT) - ending
        elif common.ending_version is not None:
            last = min(latest, common.ending_version - ending)
        elif common.ending_timestamp_ms is not None:
            stamp = common.ending_timestamp_ms - ending
            kept = [t.version for t in self.snapshots if t.timestamp_ms <= stamp]
            last = kept[-1] if kept else -1
        return self.checked_first(first), last

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


class _Reader:
    """What the batch and the stream reader share; pickled to executors for ``read``."""

    def __init__(self, options: IcebergOptions, schema: StructType) -> None:
        self.iceberg = options
        self.options = options.common
        self.schema = schema
        self.parallelism = options.common.parallelism or default_parallelism()
        self.rules: RowLevelRules | None = None
        self.strict_schema = schema
        self.context: ReadContext | None = None

    def _use_schema_of(self, table: _Table, version: int | None) -> None:
        """Read every file into the schema of ``version`` (by field id), as ``schema()``
        declared it; resolve the row-level passes' row id against it."""
        iceberg = table.iceberg_schema(version)
        strict = spark_schema(iceberg, table.path)
        self.table_schema = strict
        self.strict_schema = changelog_schema(strict)
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

    def _partitions(self, tasks: Sequence[IcebergTask]) -> list[FileGroup]:
        common = self.options
        budget = common.resolve_task_bytes or RESOLVE_BYTES
        keys = self.rules.key_names if self.rules else set()
        key_share = max(1, len(keys)) / max(1, len(self.table_schema.fields))
        return plan_partitions(tasks, self.parallelism, self.rules, budget, min(1.0, key_share))

    def __getstate__(self) -> dict[str, Any]:
        return {
            "options": self.iceberg,
            "schema": self.schema,
            "strict_schema": self.strict_schema,
            "context": self.context,
            "rules": self.rules,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.iceberg, self.schema = state["options"], state["schema"]
        self.options = self.iceberg.common
        self.strict_schema, self.context = state["strict_schema"], state["context"]
        self.rules = state["rules"]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, FileGroup):  # Spark's placeholder for "no partitions"
            return
        context = self.context
        assert context is not None
        versions = sorted({task.version for task in partition.files})
        files = [task.path for task in partition.files]

        def read(target: Any, task: Any) -> Iterator[Any]:
            return read_task(context, target, task)

        with internal_errors(
            context.table,
            versions[0] if len(versions) == 1 else ", ".join(map(str, versions)),
            f"'{files[0]}'" if len(files) == 1 else f"one of {len(files)}",
            family=ICEBERG,
        ):
            if partition.resolve and self.rules is not None:
                yield from read_resolved(
                    read, self.schema, partition, self.rules, self.strict_schema
                )
                return
            yield from read_group(read, self.schema, partition)


class IcebergChangelogReader(_Reader, DataSourceReader):
    def __init__(self, options: IcebergOptions, schema: StructType) -> None:
        table = _Table(options)
        super().__init__(options, schema)
        self.table = table
        self.range = table.batch_range()
        has_end = options.common.has_end or options.ending_snapshot is not None
        self._use_schema_of(table, self.range[1] if has_end else None)

    def partitions(self) -> Sequence[InputPartition]:
        with internal_errors(self.table.path, family=ICEBERG):
            first, last = self.range
            tasks: list[IcebergTask] = []
            for timed in self.table.snapshots:
                if first <= timed.version <= last:
                    tasks += self.table.tasks(timed)
            return self._partitions(tasks)


class IcebergChangelogStreamReader(
    _Reader,
    AdmissionControl,
    DataSourceStreamReader,
    *AVAILABLE_NOW,  # type: ignore[misc]
):
    """Admits whole snapshots per micro-batch, within maxFilesPerTrigger/maxBytesPerTrigger
    (on servers that pass limits: 4.2+), but always at least one."""

    def __init__(self, options: IcebergOptions, schema: StructType) -> None:
        table = _Table(options)
        super().__init__(options, schema)
        self._use_schema_of(table, None)
        self.path = table.path
        self.table_id = str(table.metadata.table_uuid)
        self.started_at = table.snapshots[-1].version if table.snapshots else 0
        self.target: int | None = None  # trigger(availableNow=True): the last version to read
        self.position: Offset | None = None
        self._planned: tuple[Offset, Offset, list[IcebergTask]] | None = None
        self._served = False
        self._table = table

    def _fresh(self) -> _Table:
        self._table = _Table(self.iceberg)
        return self._table

    def initialOffset(self) -> dict[str, Any]:
        with internal_errors(self.path, family=ICEBERG):
            return self._initial_offset().to_json()

    def _initial_offset(self) -> Offset:
        common, table = self.options, self._table
        inclusive = 0 if common.starting_inclusive else 1
        if self.iceberg.starting_snapshot is not None:
            first = table.version_of(self.iceberg.starting_snapshot, STARTING_SNAPSHOT)
            return Offset(self.table_id, first + inclusive, False, None)
        if common.starting_version is not None:
            if common.starting_version > self.started_at:
                raise _starting_after_latest(common.starting_version, self.started_at)
            return Offset(self.table_id, common.starting_version + inclusive, False, None)
        if common.starting_timestamp_ms is not None:
            found = table.first_at_or_after(common.starting_timestamp_ms + inclusive)
            first = found if found is not None else self.started_at + 1
            return Offset(self.table_id, first, False, None)
        if common.starting_earliest:
            first = table.snapshots[0].version if table.snapshots else 0
            return Offset(self.table_id, first, False, None)
        return Offset(self.table_id, None, not common.starting_latest, None)

    def prepareForTriggerAvailableNow(self) -> None:
        table = self._fresh()
        self.target = table.snapshots[-1].version if table.snapshots else 0

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        with internal_errors(self.path, family=ICEBERG):
            if start is not None:
                begin = Offset.from_json(start, self.table_id, ICEBERG)
            else:
                begin = self.position or self._initial_offset()
            end = self._advance(begin, limit)
            self.position = end
            return end.to_json()

    def _advance(self, start: Offset, limit: Any) -> Offset:
        table = self._fresh()
        if start.version is None:  # the first batch pins the snapshot: the table or latest
            head = self._head(table)
            self._served = start.initial_snapshot and head is not None
            if head is None:  # an empty table: its first snapshot is the first change
                return Offset(self.table_id, 0, False, None)
            return Offset(
                self.table_id, head.version + 1, False, head.timestamp_ms, head.snapshot.snapshot_id
            )
        budget = self._budget(limit)
        end, batch = start, list[IcebergTask]()
        try:
            for timed in self._snapshots_from(table, start, self.target):
                problem = self._schema_problem(table, timed)
                if problem is not None:
                    raise problem
                tasks = table.tasks(timed)
                if not budget.admit(tasks):
                    break
                end = Offset(
                    self.table_id,
                    timed.version + 1,
                    False,
                    timed.timestamp_ms,
                    timed.snapshot.snapshot_id,
                )
                batch += tasks
        except ChangelogSourceError:
            if not budget.commits and (not self._served or self.target is not None):
                raise
            # As the Delta source: serve what came before, answer "no new data" once so a
            # downstream watermark releases the last snapshot's rows, then fail.
        self._served = budget.commits > 0
        self._planned = (start, end, batch)
        return end

    def _head(self, table: _Table) -> TimedSnapshot | None:
        chosen = [t for t in table.snapshots if self.target is None or t.version <= self.target]
        return chosen[-1] if chosen else None

    def _snapshots_from(
        self, table: _Table, start: Offset, last: int | None
    ) -> Iterator[TimedSnapshot]:
        """The branch's snapshots from ``start`` (its ``version`` on) up to ``last``, their
        timestamps continuing the offset's chain; the offset's snapshot must still be on the
        branch (else the history was rewritten, or expired: data loss)."""
        assert start.version is not None
        snapshots = table.snapshots
        begin = start.version
        served = start.snapshot_id
        if served is not None and served not in {t.snapshot.snapshot_id for t in snapshots}:
            oldest = snapshots[0] if snapshots else None
            if oldest is None or not table.timeline.expired_before or begin >= oldest.version:
                raise error(
                    "ICEBERG_CHANGELOG.HISTORY_REWRITTEN",
                    snapshotId=served,
                    path=self.path,
                    branch=self.iceberg.branch,
                )
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
            yield TimedSnapshot(timed.snapshot, timed.version, previous)

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

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        with internal_errors(self.path, family=ICEBERG):
            return self._stream_partitions(start, end)

    def _stream_partitions(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Sequence[InputPartition]:
        first = Offset.from_json(start, self.table_id, ICEBERG)
        last = Offset.from_json(end, self.table_id, ICEBERG)
        check_forward(first, last, ICEBERG)
        if self.position is None or (self.position.version or 0) < (last.version or 0):
            self.position = last
        if first.version is None:
            if not first.initial_snapshot or last.version is None or last.snapshot_id is None:
                return []
            return self._partitions(self._initial_tasks(last))
        if self._planned is not None and self._planned[:2] == (first, last):
            return self._partitions(self._planned[2])
        assert last.version is not None
        table = self._fresh()
        tasks: list[IcebergTask] = []
        for timed in self._snapshots_from(table, first, last.version - 1):
            problem = self._schema_problem(table, timed)
            if problem is not None:
                raise problem
            tasks += table.tasks(timed)
        return self._partitions(tasks)

    def _initial_tasks(self, last: Offset) -> list[IcebergTask]:
        """The table as of the pinned snapshot, as inserts at its version."""
        table = self._table
        for timed in table.snapshots:
            if timed.snapshot.snapshot_id == last.snapshot_id:
                pinned = TimedSnapshot(timed.snapshot, timed.version, last.previous_ms or 0)
                files = snapshot_files(timed.snapshot, table.table.io)
                return table_tasks(pinned, files, table.layout)
        raise error(
            "ICEBERG_CHANGELOG.HISTORY_REWRITTEN",
            snapshotId=last.snapshot_id,
            path=self.path,
            branch=self.iceberg.branch,
        )

    def commit(self, end: dict[str, Any]) -> None:
        pass


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


def _starting_after_latest(version: int, latest: int) -> Exception:
    return error(
        "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST",
        startingVersion=version,
        latestVersion=latest,
    )
