"""``spark_cdc_apply``: ``apply_changes``' engine as a Python data source *writer* the server
discovers (``pyspark_spark_cdc_apply``), so a client on any Python starts it by name with
options, and nothing it pickled runs on the server.

Spark's commit protocol carries exactly-once. The client's plan partitions the feed by key,
so each task resolves the changes of its keys against the state (``batch.resolve_share``),
writes the rows it resolved as files of the tables where it can (``TableFormat.stage``: the
files are named by no commit yet) and hands the rest back as a commit message
(Arrow IPC, compressed); once every task succeeded, the driver's ``commit`` commits the
batch (``batch.apply_shares``) with the batch's number: 0 for a batch DataFrame (its
writer id is its own), the micro-batch id for a stream, the marker a restarted stream finds
in the tables. A failed task or stage aborts before anything is committed, and the files
the tasks staged are deleted. A feed with truncates is not partitioned: its tasks hand back
their rows and the commit resolves the batch whole (``batch.apply_batch``), the driver's
Python process keeping the state table's rows between a stream's micro-batches
(``TableFormat.memory``: a Delta state's), one table at a time.

Reading ``spark_cdc_apply`` with a writer's options returns what that writer's batch did,
from the state table's commit (each format's ``OUTCOME_KEY``; the target's commit carries
it too, when the batch changed the target): the counts a batch call returns to the
client.

This module is what Spark's Python processes unpickle to make the data source and its
writer: at a stream's first micro-batch the driver starts one to make the writer, one to
make the data source and one to commit, each a new process, one after another. So it
imports only PySpark's data source classes, and making a writer only looks for delta-rs
(``dependencies.missing``); the engine (Arrow, numpy, delta-rs) loads in the tasks and the
commit, which use it, and not in the first two (Spark's writer process imports Arrow
itself; delta-rs and our modules added about 0.1 s to it, measured on a stock server).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.cdc_options import option
from spark_cdc.server_plugin.dependencies import DELTALAKE, PYICEBERG, require
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.spec import ICEBERG, ApplySpec
from spark_cdc.server_plugin.sinks.apply.messages import (
    ResolvedChanges,
    rows_of,
    shares,
    task_message,
    unstaged,
)

if TYPE_CHECKING:  # the engine loads where a batch is written or committed (module docstring)
    import pyarrow as pa

SINK_NAME = "spark_cdc_apply"
SPEC_OPTION = "spec"
# A read with this option ("true") sets the spec's stream checkpoint aside for a full
# refresh, the new one naming the spec's writer (``checkpoints``), and returns no outcome.
SET_ASIDE_OPTION = "setCheckpointAside"
STORAGE_PREFIX = "storage."
CATALOG_PREFIX = "catalog."
# The spec's fields that travel as options of their own (``spec_options``).
_APART = {"storage_options": STORAGE_PREFIX, "catalog": CATALOG_PREFIX}
OUTCOME_SCHEMA = "batch long, changes long, keys long, rows long"
# A read with this option reads, instead of a writer's outcomes, where its snapshots stand
# (``status``), the target's rows to compare with (``target``) or its current ones
# (``current``), or the files Spark's Parquet reader reads the current ones from
# (``files``, also of a Delta table read as a snapshot source): ``snapshot_reads``.
READ_OPTION = "read"
STATUS, TARGET, CURRENT, FILES = "status", "target", "current", "files"
FILES_SCHEMA = "target_schema string, target_files array<string>"
STATUS_SCHEMA = (
    f"target_exists boolean, target_batch long, state_batch long, writer string, {FILES_SCHEMA}, "
    "target_keys_unique boolean"
)
# How far back the outcome of a batch is looked for in the target's history.
_OUTCOME_SEARCH = 50


def spec_options(spec: ApplySpec) -> dict[str, str]:
    """``spec`` as the sink's options: the storage options and catalog properties apart,
    under ``storage.<KEY>`` and ``catalog.<KEY>``, so that Spark's redaction of
    secret-looking option names applies to them."""
    described = dataclasses.asdict(spec)
    apart = {prefix: dict(described.pop(field)) for field, prefix in _APART.items()}
    return {
        SPEC_OPTION: json.dumps(described),
        **{prefix + k: v for prefix, given in apart.items() for k, v in given.items()},
    }


def spec_from_options(options: Mapping[str, str]) -> ApplySpec:
    raw = option(options, SPEC_OPTION)
    if raw is None:
        raise error("APPLY_CHANGES.INTERNAL_ERROR", path="?", problem="the sink got no spec")
    described = json.loads(raw)
    fields = {f.name: f for f in dataclasses.fields(ApplySpec)}
    for name, value in described.items():
        if isinstance(value, list) and name in fields:
            described[name] = tuple(value)
    for field, prefix in _APART.items():
        described[field] = tuple(
            sorted(
                (k[len(prefix) :], str(v))
                for k, v in options.items()
                if k.lower().startswith(prefix)
            )
        )
    return ApplySpec(**described)


class ApplyChangesSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def schema(self) -> str | StructType:
        read = option(self.options, READ_OPTION)
        if read == STATUS:
            return STATUS_SCHEMA
        if read == FILES:
            return FILES_SCHEMA
        if read in (TARGET, CURRENT):
            from spark_cdc.server_plugin.sinks.apply.snapshot_reads import target_schema

            return target_schema(_required_spec(self.options), current=read == CURRENT)
        return OUTCOME_SCHEMA

    # Spark makes the writer in a process that writes nothing (module docstring): the
    # packages are looked for there, and loaded where the writer writes and commits.
    def writer(self, schema: StructType, overwrite: bool) -> BatchApplier:
        return BatchApplier(_required_spec(self.options, load=False), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamApplier:
        return StreamApplier(_as_named_writer(_required_spec(self.options, load=False)))

    def reader(self, schema: StructType) -> DataSourceReader:
        spec = _required_spec(self.options)
        read = option(self.options, READ_OPTION)
        if read in (STATUS, FILES):
            return StatusReader(spec, files_only=read == FILES)
        if read in (TARGET, CURRENT):
            return TargetRowsReader(spec, schema, current=read == CURRENT)
        if option(self.options, SET_ASIDE_OPTION) == "true":
            return OutcomeReader(spec, set_aside=True)
        return OutcomeReader(_as_named_writer(spec))


def _as_named_writer(spec: ApplySpec) -> ApplySpec:
    """A stream's spec as the writer its checkpoint names: the generation a full refresh
    of it started (``checkpoints``), which the client knows only in the refresh's run."""
    from spark_cdc.server_plugin.sinks.apply.checkpoints import writer
    from spark_cdc.server_plugin.sinks.apply.engine.binding import REFRESH

    named = writer(spec.checkpoint)
    if named is None or not named.startswith(spec.app_id.split(REFRESH)[0] + REFRESH):
        return spec
    return dataclasses.replace(spec, app_id=named)


def _required_spec(options: Mapping[str, str], load: bool = True) -> ApplySpec:
    """The writer's spec, once the server has what its target's format needs
    (``_usable``)."""
    spec = spec_from_options(options)
    _usable(spec, load)
    return spec


def _usable(spec: ApplySpec, load: bool = True) -> None:
    """Refuse by name a server without what the spec's target format needs: delta-rs,
    which the state of a Delta target needs too; pyiceberg for an Iceberg one (``load``:
    ``dependencies.missing``'s)."""
    require(PYICEBERG if spec.target_format == ICEBERG else DELTALAKE, SINK_NAME, load)


def _applied(spec: ApplySpec, messages: list[Any], version: int, memory: Any) -> None:
    """The batch applied once every task succeeded: the tasks' shares committed, or their
    rows resolved and committed here."""
    from spark_cdc.server_plugin.sinks.apply.task import applied

    found = shares(messages)
    table = unstaged(messages)
    if found and table is not None:  # tasks that found the tables in two states
        _discarded(spec, messages)
        raise error(
            "APPLY_CHANGES.CONCURRENT_WRITE",
            path=spec.state,
            problem="another writer changed the tables while the batch's tasks read them",
        )
    if found:
        applied(spec, version, shares=found)
        return
    if table is not None:
        applied(spec, version, table=table, memory=memory)


def _discarded(spec: ApplySpec, messages: list[Any]) -> None:
    """A failed batch: nothing was committed, and the files its tasks staged are deleted
    (a task that failed after staging leaves orphans, which VACUUM removes)."""
    from spark_cdc.server_plugin.sinks.apply.task import table_format

    for message in messages:
        if isinstance(message, ResolvedChanges):
            table_format(spec).discard(spec, message.staged, held=False)


class BatchApplier(DataSourceArrowWriter):
    """A batch DataFrame applied once, as this writer's batch 0 (a snapshot's: its
    version)."""

    def __init__(self, spec: ApplySpec, schema: StructType) -> None:
        self.spec = spec
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        _usable(self.spec)
        return task_message(self.spec, iterator)

    def commit(self, messages: list[Any]) -> None:
        _usable(self.spec)
        if self.spec.snapshot_version is not None and not rows_of(messages):
            # A snapshot that changes nothing is applied all the same: its version is
            # recorded, so that the next one is compared with it.
            from spark_cdc.server_plugin.arrow_types import arrow_schema
            from spark_cdc.server_plugin.sinks.apply.task import applied

            applied(self.spec, self.spec.batch, table=arrow_schema(self.schema).empty_table())
            return
        _applied(self.spec, messages, self.spec.batch, None)

    def abort(self, messages: list[Any]) -> None:
        _discarded(self.spec, messages)


# The state a stream's micro-batches leave, kept by the driver's Python process for the next
# micro-batch of the same writer (one writer's at a time: memory does not grow with streams).
_MEMORY: dict[tuple[str, str], Any] = {}


def _memory_for(spec: ApplySpec) -> Any:
    """The format's copy of the state for this writer's next micro-batch
    (``TableFormat.memory``)."""
    from spark_cdc.server_plugin.sinks.apply.task import table_format

    key = (spec.state, spec.app_id)
    if key not in _MEMORY:
        _MEMORY.clear()
        _MEMORY[key] = table_format(spec).memory()
    return _MEMORY[key]


class StreamApplier(DataSourceStreamWriter, DataSourceArrowWriter):
    """Each micro-batch applied as this writer's batch ``batchId``. Also a
    ``DataSourceArrowWriter``: Spark 4.0 hands a stream writer Arrow batches only then (4.1+
    has ``DataSourceStreamArrowWriter`` and takes this too)."""

    def __init__(self, spec: ApplySpec) -> None:
        self.spec = spec

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        _usable(self.spec)
        return task_message(self.spec, iterator)

    # A stream writer's commit and abort take the batch id (DataSourceStreamWriter's).
    def commit(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        _usable(self.spec)
        _applied(self.spec, messages, batchId, _memory_for(self.spec))

    def abort(self, messages: list[Any], batchId: int) -> None:  # type: ignore[override]
        _discarded(self.spec, messages)


class OutcomeReader(DataSourceReader):
    """What this writer's batches did, the latest first (of the state's last
    ``_OUTCOME_SEARCH`` commits); none when it applied nothing. With ``set_aside``, the
    spec's stream checkpoint is set aside instead (``checkpoints``)."""

    def __init__(self, spec: ApplySpec, set_aside: bool = False) -> None:
        self.spec = spec
        self.set_aside = set_aside

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, int, int]]:
        if self.set_aside:
            from spark_cdc.server_plugin.sinks.apply import checkpoints

            if self.spec.checkpoint is None:
                problem = "a checkpoint is set aside for a stream's spec only"
                raise error("APPLY_CHANGES.INTERNAL_ERROR", path=self.spec.target, problem=problem)
            checkpoints.set_aside(self.spec.checkpoint, self.spec.app_id)
            return
        for described in _outcomes(self.spec):
            found = json.loads(described)
            if found.get("app_id") == self.spec.app_id:
                yield found.get("batch", 0), found["changes"], found["keys"], found["rows"]


def _outcomes(spec: ApplySpec) -> Iterator[str]:
    """The outcomes the state's latest commits recorded, the latest first."""
    from spark_cdc.server_plugin.sinks.apply.task import table_format

    tables_format = table_format(spec)
    state = tables_format.existing_state(spec)
    if state is not None:
        yield from tables_format.outcomes(state, spec, _OUTCOME_SEARCH)


class StatusReader(DataSourceReader):
    """One row: whether the spec's target exists, its writer's last batch in the target
    and in the state, and the writer (``snapshot_reads.status``); then, where Spark's
    Parquet reader reads the target's rows to compare with, their schema and files, and
    whether they hold each key once for certain (``snapshot_reads.plain_read``; NULL: the
    sink reads them, ``TARGET``). With
    ``files_only``, those two of the spec's target as a snapshot source reads it."""

    def __init__(self, spec: ApplySpec, files_only: bool = False) -> None:
        self.spec = spec
        self.files_only = files_only

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        from spark_cdc.server_plugin.sinks.apply.snapshot_reads import plain_read, status

        if self.files_only:
            yield (plain_read(self.spec, None) or (None, None))[:2]
            return
        found = status(self.spec)
        plain = plain_read(self.spec, found) or (None, None, False)
        yield found.target_exists, found.target_batch, found.state_batch, found.writer, *plain


class TargetRowsReader(DataSourceReader):
    """The target's rows a snapshot is compared with (``snapshot_reads``), or with
    ``current`` its current ones, in partitions of its files."""

    def __init__(self, spec: ApplySpec, schema: StructType, current: bool = False) -> None:
        self.spec = spec
        self.declared = schema
        self.current = current

    def partitions(self) -> list[InputPartition]:
        from spark_cdc.server_plugin.changefeed.partitions import default_parallelism
        from spark_cdc.server_plugin.sinks.apply.snapshot_reads import target_partitions

        return target_partitions(self.spec, default_parallelism(), self.current)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from spark_cdc.server_plugin.sinks.apply.snapshot_reads import target_rows

        return target_rows(self.spec, partition, self.declared)
