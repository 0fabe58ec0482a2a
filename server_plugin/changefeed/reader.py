"""What a change-feed source's batch and stream readers share, whatever the format: the
schema they declare, file tasks planned into partitions, and a partition read into Spark's
changelog rows on an executor, the row-level passes resolved per commit there.

A format's reader subclasses ``ChangelogFileReader`` and gives how one task's file is read
(``read_task``), the table it names in errors (``uri``) and what an executor needs of it
(``SHIPPED``): the driver's caches stay behind when Spark pickles the reader to executors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.changefeed.change_batches import projected, read_group
from spark_cdc.server_plugin.changefeed.changelog_schema import (
    declared_schema,
    projection,
    row_id_paths,
)
from spark_cdc.server_plugin.changefeed.offsets import DELTA
from spark_cdc.server_plugin.changefeed.partitions import (
    RESOLVE_BYTES,
    FileGroup,
    FileTask,
    default_parallelism,
    plan_partitions,
)
from spark_cdc.server_plugin.changefeed.pushdown import Check, kept_rows, kept_tasks, translated
from spark_cdc.server_plugin.changefeed.resolving_reader import read_resolved
from spark_cdc.server_plugin.changefeed.source_options import SourceOptions
from spark_cdc.server_plugin.errors import ChangelogSourceError, internal_errors
from spark_cdc.server_plugin.row_level.rules import RowLevelRules
from spark_cdc.server_plugin.vocabulary import METADATA_COLUMNS

Parsed = TypeVar("Parsed")
END_BOUNDS = ("endingversion", "endingtimestamp")


def options_for_schema(
    parse: Callable[[Mapping[str, str]], Parsed], raw: Mapping[str, str], end_bounds: Sequence[str]
) -> Parsed:
    """The options ``schema()`` reads with. It runs before Spark says batch or stream, and
    what is wrong with an end bound depends on which: a batch read lacks its start, a stream
    has no end. So a bad end bound (any of ``end_bounds``, lower case) is left to the reader
    of either kind, which follows at once and names it; the schema is then the latest
    version's."""
    try:
        return parse(raw)
    except ChangelogSourceError:
        kept = {k: v for k, v in raw.items() if k.lower() not in end_bounds}
        if len(kept) == len(raw):
            raise
        return parse(kept)


def declared(strict: StructType, options: SourceOptions) -> StructType:
    """The schema a read declares for a table's changelog schema ``strict``; a ``rowId``
    the table lacks is refused here, while Spark resolves the relation, before anything
    downstream refers to it (``INVALID_CDC_OPTION.UNKNOWN_ROW_ID_COLUMN``)."""
    if options.row_id is not None:
        row_id_paths(options.row_id, StructType(strict.fields[:-3]))  # the table's columns
    return declared_schema(
        strict, options.resolves, options.compute_updates, options.nullable_schema
    )


class ChangelogFileReader:
    """Plans file tasks into partitions and reads a partition; pickled to executors."""

    FAMILY: ClassVar[str] = DELTA  # the source's condition family
    SPLITS_FILES: ClassVar[bool] = False  # read_task reads spans of a file (split_files)
    SHIPPED: ClassVar[tuple[str, ...]] = (
        "options",
        "schema",
        "strict_schema",
        "projection",
        "rules",
        "pushed",
    )

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.strict_schema = schema  # the table's own nullability, to read files with
        self.table_schema = StructType(schema.fields[:-3])
        self.rules: RowLevelRules | None = None
        self.parallelism = options.parallelism or default_parallelism()
        self.pushed: list[Check] = []  # the filters Spark pushed that Arrow evaluates
        self.projection: StructType | None = None  # the columns Spark asked for, if fewer

    def _serve(self, strict: StructType) -> None:
        """Serve the changelog of a table whose changelog schema, with its own nullability,
        is ``strict``: files are read as it says, rows are handed on as the read declared
        them, or only the columns of a schema given to the read (``projection``)."""
        feed = declared(strict, self.options)
        self.projection = projection(self.schema, feed, self.uri())
        if self.projection is not None:
            self.schema = feed
        self.strict_schema = strict
        self.table_schema = StructType(strict.fields[:-3])

    def uri(self) -> str:
        """The table, as errors name it."""
        raise NotImplementedError

    def read_task(self, target: Any, task: Any, checks: Sequence[Check] = ()) -> Iterator[Any]:
        """One task's file as Arrow batches of ``target``'s columns; ``checks``: pushed
        filters whose statistics may spare row groups (every row read is kept as it is)."""
        raise NotImplementedError

    def errors_named(self, version: object = "unknown", file: object = "none") -> Any:
        """Any failure of ours below raised as the source's ``INTERNAL_ERROR``."""
        return internal_errors(self.uri(), version, file, family=self.FAMILY)

    def task_values(self, tasks: Sequence[Any], names: set[str]) -> dict[str, Any]:
        """Those of the table columns ``names`` constant over each task's rows (a file's
        partition values), as an Arrow array of a value per task: what a pushed filter on
        them skips files by."""
        return {}

    def _partitions(self, tasks: Sequence[FileTask]) -> list[FileGroup]:
        # A file skipped for its values must not change another's rows' labels: it holds
        # no carry-over's other half (that row is identical, values and all), but it may
        # hold the other half of an update.
        by_values = self.rules is None or not self.rules.update_detection
        constants = self.task_values if by_values else None
        tasks = kept_tasks(self.pushed, tasks, self.rules is not None, constants)
        budget = self.options.resolve_task_bytes or RESOLVE_BYTES
        keys = self.rules.key_names if self.rules else set()
        key_share = max(1, len(keys)) / max(1, len(self.table_schema.fields))
        share = min(1.0, key_share)
        return plan_partitions(
            tasks, self.parallelism, self.rules, budget, share, self.SPLITS_FILES
        )

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.SHIPPED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, FileGroup):  # Spark's placeholder for "no partitions"
            return
        versions = sorted({task.version for task in partition.files})
        files = [task.path for task in partition.files]
        with self.errors_named(
            versions[0] if len(versions) == 1 else ", ".join(map(str, versions)),
            f"'{files[0]}'" if len(files) == 1 else f"one of {len(files)}",
        ):
            if partition.resolve and self.rules is not None:
                batches = read_resolved(
                    self.read_task, self.schema, partition, self.rules, self.strict_schema
                )
            else:  # only the columns asked for, and the changelog's, which cost nothing
                batches = read_group(
                    lambda target, task: self.read_task(target, task, self.pushed),
                    self._read_schema(),
                    partition,
                )
            if self.projection is not None:  # the passes above saw every column
                batches = projected(batches, self.projection)
            yield from kept_rows(self.pushed, batches)

    def _read_schema(self) -> StructType:
        if self.projection is None:
            return self.schema
        wanted = {*self.projection.names, *METADATA_COLUMNS}
        return StructType([f for f in self.schema if f.name in wanted])


class PushedFilters:
    """What a batch reader adds where the read's planner pushes filters (``pushdown``): it
    keeps the ones Arrow evaluates and hands every one back, for Spark to apply again."""

    schema: StructType
    pushed: list[Check]

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:
        self.pushed = translated(filters, self.schema)
        return filters
