"""The target and the state as Iceberg tables in a catalog, as pyiceberg writes them: made
when missing (one catalog commit that creates the table with the batch's rows), checked
before anything is written, and changed by one snapshot per batch that carries the writer's
id and the batch's number in its summary (as Flink's Iceberg sink keeps its job id and
checkpoint id), so a batch applied again is found and skipped.

A batch's target snapshot is a copy-on-write rewrite: the data files that may hold the
batch's keys (their column bounds say so) are read, each rewritten without the rows the
batch replaces when it has any, and the batch's new rows are added, in one ``overwrite``
snapshot. pyiceberg writes no delete files, and reads no equality deletes: a table that has
them is refused by name.

Another writer's commit in between is pyiceberg's to settle: it retries on the new head when
nothing the snapshot declares (the batch's keys, the files it rewrites) was touched, and
fails validation otherwise, which is refused as ``APPLY_CHANGES.CONCURRENT_WRITE``.

Three of pyiceberg 0.12's private names are used (the ``server`` extra pins 0.12): Arrow
rows written as data files (``_dataframe_to_data_files``, what its own writers use), an
Arrow schema converted before the table exists (``Catalog._convert_schema_if_needed``), and
a create transaction's file IO (``_table.io``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.spec import START_AT, ApplySpec
from spark_cdc.server_plugin.sinks.apply.tables import aligned, check_columns

# The snapshot summary entries a batch's commits carry: the writer, its batch, and what the
# batch did (what a batch ``apply_changes`` call reads back).
WRITER_KEY = "spark-cdc.writer-id"
BATCH_KEY = "spark-cdc.batch"
OUTCOME_KEY = "spark-cdc.outcome"
# pyiceberg prunes files by an ``In`` of at most this many values (more: every file).
_IN_LIMIT = 200
_POSITION = "__spark_cdc_position"  # a row's place, carried through a join
# pyiceberg 0.12's catalogs whose ``commit_table`` is not implemented: a batch would fail
# only after writing its files.
_READ_ONLY_CATALOGS = ("dynamodb", "bigquery")


def catalogs(spec: ApplySpec) -> Iterator[Any]:
    """The catalog the spec names, built from its properties alone, as the Iceberg
    reader builds one (``iceberg.table.catalog_from``). Without a ``name``, pyiceberg's
    default one's, then the one under the name this package gave catalogs before
    (``LEGACY_CATALOG_NAME``): a target made then goes on there (``located``)."""
    from spark_cdc.server_plugin.iceberg.table import catalog_from, catalog_names

    kind = dict(spec.catalog).get("type", "").strip().lower()
    if kind in _READ_ONLY_CATALOGS:
        problem = f"pyiceberg's {kind} catalog cannot commit to a table"
        raise error("APPLY_CHANGES.CATALOG_FAILED", table=spec.target, problem=problem)
    for name in catalog_names(dict(spec.catalog)):
        try:
            yield catalog_from({**dict(spec.storage_options), **dict(spec.catalog)}, name)
        except Exception as problem:  # pyiceberg raises any kind for a bad catalog setting
            raise error(
                "APPLY_CHANGES.CATALOG_FAILED", table=spec.target, problem=_first_line(problem)
            ) from problem


def located(
    spec: ApplySpec, load: Callable[[Any, str, str], Any | None]
) -> tuple[Any, Any | None, Any | None]:
    """The catalog holding the spec's target or state, and both as ``load(catalog,
    name, role)`` gives them (None: none); the first catalog when none holds either,
    where the first batch makes them. The legacy name is tried only then."""
    first = None
    for found in catalogs(spec):
        first = found if first is None else first
        target, state = load(found, spec.target, "target"), load(found, spec.state, "state")
        if target is not None or state is not None:
            return found, target, state
    return first, None, None


def _first_line(problem: Exception) -> str:
    text = str(problem).strip()
    return text.splitlines()[0] if text else type(problem).__name__


@contextmanager
def refusing_conflicts(name: str) -> Iterator[None]:
    """pyiceberg's errors of a commit as ours: a conflict with another writer's commit (it
    retried those it could), and a commit whose outcome is unknown."""
    from pyiceberg.exceptions import (
        CommitFailedException,
        CommitStateUnknownException,
        ValidationException,
    )

    try:
        yield
    except (ValidationException, CommitFailedException) as lost:
        raise error(
            "APPLY_CHANGES.CONCURRENT_WRITE", path=name, problem=_first_line(lost)
        ) from lost
    except CommitStateUnknownException as unknown:
        raise error(
            "APPLY_CHANGES.TARGET_WRITE_FAILED", path=name, problem=_first_line(unknown)
        ) from unknown


def existing(found: Any, name: str, schema: pa.Schema, spec: ApplySpec, role: str) -> Any | None:
    """The table ``name`` of the catalog ``found``, checked against ``schema``; None when
    there is none yet (the batch's first commit makes it, so a refused batch makes none)."""
    table = _loaded(found, name)
    if table is None:
        return None
    _check_schema(table, name, schema, spec, role)
    if role == "target":
        _check_partitioning(table, name, spec)
    return table


def existing_state(spec: ApplySpec) -> Any | None:
    """The state table as it is, unchecked (None: none yet): what its commits recorded."""
    return located(spec, lambda found, name, role: _loaded(found, name))[2]


def _loaded(found: Any, name: str) -> Any | None:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return found.load_table(name)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _iceberg_schema(schema: pa.Schema) -> Any:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(schema))


def _check_schema(table: Any, name: str, schema: pa.Schema, spec: ApplySpec, role: str) -> None:
    """The table holds exactly ``schema``'s columns, of the same Iceberg types (whether
    each is required aside)."""
    have = {f.name: _Type.of(f.field_type) for f in table.schema().fields}
    want = {f.name: _Type.of(f.field_type) for f in _iceberg_schema(schema).fields}
    check_columns(name, have, want, spec, role)


@dataclass(frozen=True)
class _Type:
    """An Iceberg type compared by its shape: names and types, not field ids (a table's
    own) nor whether nested fields are required (identifier fields must be)."""

    shape: Any
    text: str = dataclasses.field(compare=False)

    @classmethod
    def of(cls, data_type: Any) -> _Type:
        return cls(_shape(data_type), str(data_type))

    def __str__(self) -> str:
        return self.text


def _shape(data_type: Any) -> Any:
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(data_type, StructType):
        return ("struct", tuple((f.name, _shape(f.field_type)) for f in data_type.fields))
    if isinstance(data_type, ListType):
        return ("list", _shape(data_type.element_type))
    if isinstance(data_type, MapType):
        return ("map", _shape(data_type.key_type), _shape(data_type.value_type))
    return str(data_type)


def _check_partitioning(table: Any, name: str, spec: ApplySpec) -> None:
    """``partition_cols`` shape the target the first batch makes; given for an existing
    target, they must be its identity partitions."""
    schema = table.schema()
    have = tuple(schema.find_column_name(f.source_id) for f in table.spec().fields)
    if spec.partition_cols and spec.partition_cols != have:
        raise error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="partition_cols",
            problem=f"are {list(spec.partition_cols)}, but {name} is partitioned by {list(have)}",
            fix="leave partition_cols out (they apply when apply_changes makes the target), "
            f"or pass {list(have)}",
        )


def identifier_fields(spec: ApplySpec, schema: pa.Schema, role: str) -> list[str]:
    """What identifies a row of the table: a mirror's keys; in a history, a version, the
    keys and ``__START_AT`` (its fields when the sequence has several). The state's rows
    are changes, which nothing identifies."""
    if role != "target":
        return []
    if spec.scd_type == 1:
        return list(spec.keys)
    start = schema.field(START_AT).type
    parts = [f"{START_AT}.{f.name}" for f in start] if pa.types.is_struct(start) else [START_AT]
    return [*spec.keys, *parts]


def _required(schema: pa.Schema, names: list[str]) -> pa.Schema:
    """``schema`` with the top-level columns of ``names`` (and a struct's fields named)
    NOT NULL: Iceberg's identifier fields must be required."""
    top = {n.split(".", 1)[0] for n in names}
    fields = []
    for field in schema:
        if field.name in top:
            field = field.with_nullable(False)
            if pa.types.is_struct(field.type):
                field = field.with_type(pa.struct([f.with_nullable(False) for f in field.type]))
        fields.append(field)
    return pa.schema(fields)


def created(
    found: Any,
    name: str,
    schema: pa.Schema,
    spec: ApplySpec,
    version: int,
    rows: pa.Table,
    outcome: str,
    role: str,
    properties: Mapping[str, str] | None = None,
) -> None:
    """The table ``name`` made by one catalog commit that also holds ``rows`` and the
    batch's marker. Another writer that made it first is a lost race."""
    from pyiceberg.exceptions import TableAlreadyExistsError
    from pyiceberg.schema import Schema

    identifiers = identifier_fields(spec, schema, role)
    fresh = _iceberg_schema(_required(schema, identifiers))
    ids = [fresh.find_field(n).field_id for n in identifiers]
    try:
        fresh = Schema(*fresh.fields, identifier_field_ids=ids)
    except ValueError as refused:  # a float, double or nested identifier field
        raise error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="keys",
            problem=f"cannot identify an Iceberg table's rows ({_first_line(refused)})",
            fix="key the target by columns of other types (not float, double or nested), "
            "or apply the changes to a Delta target",
        ) from refused
    partitions = spec.partition_cols if role == "target" else ()
    _namespace_made(found, name)
    try:
        with refusing_conflicts(name):
            transaction = found.create_table_transaction(
                name,
                schema=fresh,
                partition_spec=_partition_spec(fresh, partitions),
                properties=dict(properties or {}),
            )
            _append(transaction, transaction._table.io, spec, version, rows, outcome)
            transaction.commit_transaction()
    except TableAlreadyExistsError as lost:
        problem = "it made the table first"
        raise error("APPLY_CHANGES.CONCURRENT_WRITE", path=name, problem=problem) from lost


def _namespace_made(found: Any, name: str) -> None:
    """The table's namespace, made when missing (two writers may both find it missing:
    the loser's error is not pyiceberg's own in every catalog)."""
    namespace = tuple(name.split(".")[:-1])
    if not namespace:
        return
    try:
        found.create_namespace_if_not_exists(namespace)
    except Exception:
        if not found.namespace_exists(namespace):
            raise


def _partition_spec(schema: Any, columns: tuple[str, ...]) -> Any:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    fields = [
        PartitionField(schema.find_field(c).field_id, 1000 + i, IdentityTransform(), c)
        for i, c in enumerate(columns)
    ]
    return PartitionSpec(*fields)


def _marker(spec: ApplySpec, version: int | None, outcome: str | None) -> dict[str, str]:
    if version is None:
        return {}
    marker = {WRITER_KEY: spec.app_id, BATCH_KEY: str(version)}
    return {**marker, OUTCOME_KEY: outcome} if outcome else marker


def last_batch(table: Any, app_id: str) -> int | None:
    """The latest batch of the writer ``app_id`` in the table's current history (the
    snapshots its current one descends from: a rolled-back one no longer counts)."""
    for summary in _summaries(table):
        if summary.get(WRITER_KEY) == app_id:
            return int(summary[BATCH_KEY])
    return None


def outcomes(table: Any, app_id: str, search: int) -> Iterator[str]:
    """The outcomes the writer ``app_id`` recorded, the latest first, among the table's
    latest ``search`` snapshots."""
    for i, summary in enumerate(_summaries(table)):
        if i >= search:
            return
        if summary.get(WRITER_KEY) == app_id and OUTCOME_KEY in summary:
            yield summary[OUTCOME_KEY]


def _summaries(table: Any) -> Iterator[dict[str, str]]:
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if snapshot.summary is not None:
            yield snapshot.summary.additional_properties


def every_outcome(table: Any) -> Iterator[str]:
    """Every outcome the table's current history recorded, the latest first."""
    for summary in _summaries(table):
        if OUTCOME_KEY in summary:
            yield summary[OUTCOME_KEY]


def identity(table: Any) -> tuple[str, int]:
    """The table's own id (``table-uuid``) and how far its history goes (its last
    sequence number: a copy restored from before has a smaller one)."""
    metadata = table.metadata
    return str(metadata.table_uuid), int(metadata.last_sequence_number)


def applied(table: Any, spec: ApplySpec, version: int) -> bool:
    """Whether this writer already committed ``version`` (its batch) to the table."""
    done = last_batch(table, spec.app_id)
    return done is not None and done >= version


def table_schema(table: Any) -> pa.Schema:
    """The table's columns as pyiceberg writes them (identifier fields NOT NULL)."""
    return pa.schema(table.schema().as_arrow())


def _written(table_schema_: pa.Schema, rows: pa.Table) -> pa.Table:
    """``rows`` as the table takes them: its column types, order and nullability."""
    return aligned(rows, table_schema_).select(table_schema_.names).cast(table_schema_)


def append_rows(
    table: Any, spec: ApplySpec, version: int, rows: pa.Table, outcome: str | None = None
) -> None:
    """One snapshot (even of no rows: it carries the marker)."""
    with refusing_conflicts(table.name()), _evolved(table, spec, rows) as transaction:
        _append(transaction, table.io, spec, version, rows, outcome)


def _append(
    transaction: Any, io: Any, spec: ApplySpec, version: int, rows: pa.Table, outcome: str | None
) -> None:
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    metadata = transaction.table_metadata
    rows = _written(pa.schema(metadata.schema().as_arrow()), rows)
    properties = _marker(spec, version, outcome)
    with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
        if rows.num_rows:
            for data_file in _dataframe_to_data_files(
                table_metadata=metadata, df=rows, io=io, write_uuid=append.commit_uuid
            ):
                append.append_data_file(data_file)


@contextmanager
def _evolved(table: Any, spec: ApplySpec, rows: pa.Table) -> Iterator[Any]:
    """A transaction on ``table`` that first adds the columns of ``rows`` it lacks (with
    ``schema_evolution``; the checks refused them otherwise), committed on leaving."""
    transaction = table.transaction()
    added = [f for f in rows.schema if f.name not in table.schema().column_names]
    if added and spec.schema_evolution:
        with transaction.update_schema() as update:
            update.union_by_name(pa.schema(added))
    yield transaction
    transaction.commit_transaction()


def replace_rows(
    table: Any,
    spec: ApplySpec,
    version: int | None,
    replaced: pa.Table,
    rows: pa.Table,
    kept: pa.Table | None = None,
    outcome: str | None = None,
) -> None:
    """One ``overwrite`` snapshot: every row matching one of ``replaced`` in all its
    columns (the keys; type 2's keys and ``__START_AT``) deleted, ``rows`` inserted and,
    when ``kept`` is given (a truncate), every row of a key not in ``kept`` deleted too.
    Each data file that may hold a replaced row is read and, when it does, rewritten
    without it."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    name = table.name()
    whole = kept is not None
    changed = AlwaysTrue() if whole else declared(replaced, rows, spec.keys)
    with refusing_conflicts(name), _evolved(table, spec, rows) as transaction:
        metadata = transaction.table_metadata
        schema = metadata.schema()
        written = pa.schema(schema.as_arrow())
        properties = _marker(spec, version, outcome)
        with transaction.update_snapshot(snapshot_properties=properties).overwrite() as rewrite:
            rewrite.delete_by_predicate(changed)
            survivors = []
            for task in _candidates(table, changed):
                held = ArrowScan(metadata, table.io, schema, AlwaysTrue()).to_table([task])
                left = _without(held, replaced, kept, spec.keys)
                if left.num_rows == task.file.record_count and not task.delete_files:
                    continue  # holds none of them: the file stays
                rewrite.delete_data_file(task.file)
                if left.num_rows:
                    survivors.append(_written(written, left))
            new = pa.concat_tables([*survivors, _written(written, rows)])
            if new.num_rows:
                for data_file in _dataframe_to_data_files(
                    table_metadata=metadata, df=new, io=table.io, write_uuid=rewrite.commit_uuid
                ):
                    rewrite.append_data_file(data_file)


def declared(replaced: pa.Table, rows: pa.Table, keys: tuple[str, ...]) -> Any:
    """What the batch's snapshot declares it changes, for pyiceberg's check of other
    writers' commits (and to find the files to read): the first key's values among the
    replaced and inserted rows, as a set when small enough to prune by, else as a range."""
    from pyiceberg.expressions import AlwaysFalse, And

    key = keys[0]
    parts = [t.column(key) for t in (replaced, rows) if not pa.types.is_null(t.column(key).type)]
    if not parts:
        return AlwaysFalse()
    kind = parts[0].type
    values = pc.unique(pa.chunked_array([c for p in parts for c in p.cast(kind).chunks], kind))
    values = values.drop_null()
    if not len(values):
        return AlwaysFalse()
    if len(values) <= _IN_LIMIT:
        return expression("In", key, values.to_pylist())
    low, high = pc.min_max(values).values()
    at_least = expression("GreaterThanOrEqual", key, low.as_py())
    return And(at_least, expression("LessThanOrEqual", key, high.as_py()))


def expression(kind: str, *arguments: Any) -> Any:
    """pyiceberg's predicate class ``kind`` of ``arguments`` (a column's name, then its
    values): the classes take them by position, which their pydantic signatures, all that
    mypy reads, do not declare."""
    from pyiceberg import expressions

    return getattr(expressions, kind)(*arguments)


def _candidates(table: Any, declared: Any) -> list[Any]:
    """The data files that may hold rows matching ``declared`` (their bounds say so)."""
    from pyiceberg.expressions import AlwaysFalse

    if declared == AlwaysFalse() or table.current_snapshot() is None:
        return []
    with _refusing_equality_deletes(table):
        return list(table.scan(row_filter=declared).plan_files())


@contextmanager
def _refusing_equality_deletes(table: Any) -> Iterator[None]:
    try:
        yield
    except ValueError as refused:  # pyiceberg reads no equality deletes
        if "equality deletes" not in str(refused):
            raise
        raise error(
            "APPLY_CHANGES.UNSUPPORTED_TARGET_FEATURE",
            path=table.name(),
            features=f"equality deletes ({_first_line(refused)})",
        ) from refused


def _without(
    held: pa.Table, replaced: pa.Table, kept: pa.Table | None, keys: tuple[str, ...]
) -> pa.Table:
    """``held`` without the rows matching one of ``replaced`` (all its columns) and, with
    ``kept``, without those of keys not in ``kept``."""
    left = held if not replaced.num_rows else _joined(held, replaced, "left anti")
    if kept is not None:
        left = _joined(left, kept.select(list(keys)), "left semi")
    return left


def _joined(held: pa.Table, by: pa.Table, kind: str) -> pa.Table:
    """``held``'s rows that match one of ``by``'s in all its columns (``left semi``), or
    that match none (``left anti``), in their order. Arrow joins on the key columns alone
    (it carries no struct), a struct's fields compared one by one, and the rows are taken
    by position."""
    if not held.num_rows:
        return held
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for name in by.column_names:
        column = by.column(name)
        parts = list(column.type) if pa.types.is_struct(column.type) else [None]
        for i, part in enumerate(parts):
            if part is None:
                mine[name], theirs[name] = held.column(name), column
            else:
                flat = f"{name}.{part.name}"
                mine[flat] = pc.struct_field(held.column(name), [i])
                theirs[flat] = pc.struct_field(column, [i])
    keys = pa.table(mine)
    names = keys.column_names
    distinct = pa.table(theirs).cast(keys.schema).group_by(names).aggregate([])
    keys = keys.append_column(_POSITION, pa.array(np.arange(held.num_rows)))
    found = keys.join(distinct, names, join_type=kind).column(_POSITION).to_numpy()
    return held.take(pa.array(np.sort(found)))


def overwrite_rows(
    table: Any, spec: ApplySpec, version: int | None, rows: pa.Table, outcome: str | None = None
) -> None:
    """One snapshot in which ``rows`` replace every row of the table (a truncate, a
    compaction of the state)."""
    empty = rows.select(list(spec.keys)).slice(0, 0)
    replace_rows(table, spec, version, empty, rows, empty, outcome)


def scanned(table: Any, row_filter: Any) -> pa.Table:
    """The table's rows that ``row_filter`` may match (the files its bounds allow, rows
    filtered by pyiceberg)."""
    if table.current_snapshot() is None:
        return table_schema(table).empty_table()
    with _refusing_equality_deletes(table):
        return table.scan(row_filter=row_filter).to_arrow()


def data_file_count(table: Any) -> int:
    """The data files of the table's current snapshot (its summary's count)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-data-files", "0"))
