"""The target and the state as Iceberg tables in a catalog, as pyiceberg writes them: made
when missing (one catalog commit that creates the table with the batch's rows), checked
before anything is written, and changed by one snapshot per batch that carries the writer's
id and the batch's number in its summary (as Flink's Iceberg sink keeps its job id and
checkpoint id), so a batch applied again is found and skipped. A batch's target snapshot
is ``rewrites``'.

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

import pyarrow as pa
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.columns import aligned, check_columns
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET, KEY_HASH, START_AT, ApplySpec
from spark_cdc.server_plugin.sinks.apply.iceberg.deletes import merges_on_read

# The snapshot summary entries a batch's commits carry: the writer, its batch, and what the
# batch did (what a batch ``apply_changes`` call reads back).
WRITER_KEY = "spark-cdc.writer-id"
BATCH_KEY = "spark-cdc.batch"
OUTCOME_KEY = "spark-cdc.outcome"
# pyiceberg 0.12's catalogs whose ``commit_table`` is not implemented: a batch would fail
# only after writing its files.
_READ_ONLY_CATALOGS = ("dynamodb", "bigquery")
_CATALOG_ATTEMPTS = 3


def catalogs(spec: ApplySpec) -> Iterator[Any]:
    """The catalog the spec names, built from its properties alone, as the Iceberg
    reader builds one (``iceberg.table.catalog_from``). Without a ``name``, pyiceberg's
    default one's, then the one under the name this package gave catalogs before
    (``LEGACY_CATALOG_NAME``): a target made then goes on there (``located``)."""
    from spark_cdc.server_plugin.iceberg.table import catalog_names

    kind = dict(spec.catalog).get("type", "").strip().lower()
    if kind in _READ_ONLY_CATALOGS:
        problem = f"pyiceberg's {kind} catalog cannot commit to a table"
        raise error("APPLY_CHANGES.CATALOG_FAILED", table=spec.target, problem=problem)
    properties = {**dict(spec.storage_options), **dict(spec.catalog)}
    for name in catalog_names(dict(spec.catalog)):
        yield _built(spec, properties, name)


def _built(spec: ApplySpec, properties: dict[str, str], name: str | None) -> Any:
    """The catalog ``name`` of ``properties``. A SQL catalog's first use makes its own
    tables, and a batch's tasks may all come first: those that find them made by another
    (``already exists``) build it again."""
    from spark_cdc.server_plugin.iceberg.table import catalog_from

    attempt = 1
    while True:
        try:
            return catalog_from(properties, name)
        except Exception as problem:  # pyiceberg raises any kind for a bad catalog setting
            if attempt < _CATALOG_ATTEMPTS and "already exists" in str(problem):
                attempt += 1
                continue
            raise error(
                "APPLY_CHANGES.CATALOG_FAILED", table=spec.target, problem=first_line(problem)
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


def first_line(problem: Exception) -> str:
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
        raise error("APPLY_CHANGES.CONCURRENT_WRITE", path=name, problem=first_line(lost)) from lost
    except CommitStateUnknownException as unknown:
        raise error(
            "APPLY_CHANGES.TARGET_WRITE_FAILED", path=name, problem=first_line(unknown)
        ) from unknown


def existing(found: Any, name: str, schema: pa.Schema, spec: ApplySpec, role: str) -> Any | None:
    """The table ``name`` of the catalog ``found``, checked against ``schema``; None when
    there is none yet (the batch's first commit makes it, so a refused batch makes none)."""
    table = loaded(found, name)
    if table is None:
        return None
    _check_schema(table, name, schema, spec, role)
    if role == "target":
        _check_partitioning(table, name, spec)
        merges_on_read(name, table.metadata.properties, table.metadata.format_version)
    return table


def existing_state(spec: ApplySpec) -> Any | None:
    """The state table as it is, unchecked (None: none yet): what its commits recorded."""
    return located(spec, lambda found, name, role: loaded(found, name))[2]


def existing_target(spec: ApplySpec) -> Any | None:
    """The target as it is, unchecked (None: none yet)."""
    return located(spec, lambda found, name, role: loaded(found, name))[1]


def loaded(found: Any, name: str) -> Any | None:
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
    if role == "state":  # how the state is laid out is its own (``state``)
        have = {n: t for n, t in have.items() if n not in (KEY_HASH, BUCKET)}
        want = {n: t for n, t in want.items() if n not in (KEY_HASH, BUCKET)}
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
    partition_by: tuple[str, ...] | None = None,
) -> None:
    """The table ``name`` made by one catalog commit that also holds ``rows`` and the
    batch's marker, partitioned (identity) by ``partition_by`` (None: a target's
    ``partition_cols``). Another writer that made it first is a lost race."""
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
            problem=f"cannot identify an Iceberg table's rows ({first_line(refused)})",
            fix="key the target by columns of other types (not float, double or nested), "
            "or apply the changes to a Delta target",
        ) from refused
    partitions = spec.partition_cols if partition_by is None else partition_by
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


def marker(spec: ApplySpec, version: int | None, outcome: str | None) -> dict[str, str]:
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


def table_schema(table: Any) -> pa.Schema:
    """The table's columns as pyiceberg writes them (identifier fields NOT NULL)."""
    return pa.schema(table.schema().as_arrow())


def written(table_schema_: pa.Schema, rows: pa.Table) -> pa.Table:
    """``rows`` as the table takes them: its column types, order and nullability."""
    return aligned(rows, table_schema_).select(table_schema_.names).cast(table_schema_)


def append_rows(
    table: Any,
    spec: ApplySpec,
    version: int,
    rows: pa.Table,
    outcome: str | None = None,
    staged: tuple[Any, ...] = (),
) -> None:
    """One snapshot of ``rows`` and the data files tasks ``staged`` (even of none: it
    carries the marker)."""
    with refusing_conflicts(table.name()), evolved(table, spec, rows) as transaction:
        _append(transaction, table.io, spec, version, rows, outcome, staged)


def _append(
    transaction: Any,
    io: Any,
    spec: ApplySpec,
    version: int,
    rows: pa.Table,
    outcome: str | None,
    staged: tuple[Any, ...] = (),
) -> None:
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    metadata = transaction.table_metadata
    rows = written(pa.schema(metadata.schema().as_arrow()), rows)
    properties = marker(spec, version, outcome)
    with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
        if rows.num_rows:
            for data_file in _dataframe_to_data_files(
                table_metadata=metadata, df=rows, io=io, write_uuid=append.commit_uuid
            ):
                append.append_data_file(data_file)
        for data_file in staged:
            append.append_data_file(data_file)


@contextmanager
def evolved(table: Any, spec: ApplySpec, rows: pa.Table) -> Iterator[Any]:
    """A transaction on ``table`` that first adds the columns of ``rows`` it lacks (with
    ``schema_evolution``; the checks refused them otherwise), committed on leaving."""
    transaction = table.transaction()
    added = [f for f in rows.schema if f.name not in table.schema().column_names]
    if added and spec.schema_evolution:
        with transaction.update_schema() as update:
            update.union_by_name(pa.schema(added))
    yield transaction
    transaction.commit_transaction()


def file_paths(table: Any) -> set[str]:
    """The data files the table's current snapshot holds."""
    if table.current_snapshot() is None:
        return set()
    return {task.file.file_path for task in table.scan().plan_files()}


def data_file_count(table: Any) -> int:
    """The data files of the table's current snapshot (its summary's count)."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return 0
    return int(snapshot.summary.additional_properties.get("total-data-files", "0"))
