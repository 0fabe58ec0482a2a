"""``apply_changes``: a change feed applied to a Delta target, as SCD type 1 (a mirror) or
type 2 (a history), exactly once, on any Spark Connect server >= 4.0.

The parameters are Spark's ``create_auto_cdc_flow``'s (Spark Declarative Pipelines), so
code moves either way. The client checks them and reduces the feed to one shape (the
target's columns, the sequence, what each row is: ``server_plugin.apply.spec``); the server
applies each batch in one task with delta-rs (``server_plugin.apply``), so no Delta jars are
needed on the server.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.server_plugin.apply import task
from spark_cdc.server_plugin.apply.spec import (
    DELETE,
    END_AT,
    OP,
    RESERVED_PREFIX,
    START_AT,
    TRUNCATE,
    UPSERT,
    ApplySpec,
    sequence_column,
)
from spark_cdc.server_plugin.registration import ship_by_value
from spark_cdc.server_plugin.vocabulary import CHANGE_TYPE, METADATA_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

STATE_SUFFIX = "__apply_changes_state"


@dataclass(frozen=True)
class AppliedChanges:
    """What applying a batch DataFrame did: ``changes`` read, ``keys`` whose rows were
    replaced, ``rows`` written for them."""

    changes: int
    keys: int
    rows: int


def apply_changes(
    feed: DataFrame,
    target: str,
    keys: Sequence[str],
    sequence_by: str | Sequence[str] | Column,
    *,
    stored_as_scd_type: int | str = 1,
    apply_as_deletes: str | Column | None = None,
    apply_as_truncates: str | Column | None = None,
    column_list: Sequence[str] | None = None,
    except_column_list: Sequence[str] | None = None,
    track_history_column_list: Sequence[str] | None = None,
    track_history_except_column_list: Sequence[str] | None = None,
    ignore_null_updates: bool = False,
    checkpoint_location: str | None = None,
    schema_evolution: bool = False,
    tombstone_retention: timedelta | None = None,
    state_location: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
) -> StreamingQuery | AppliedChanges:
    """Apply ``feed`` to the Delta table at ``target`` (a path as the server sees it;
    created when missing): a batch DataFrame once, returning what it did; a streaming one
    micro-batch by micro-batch, returning the started query.

    ``keys`` identify a row; ``sequence_by`` (a column, several compared in order, or a
    Column) orders a key's changes. ``stored_as_scd_type`` 1 keeps each key's latest row,
    2 its history with ``__START_AT``/``__END_AT``. A feed with ``_change_type``,
    ``_commit_version`` and ``_commit_timestamp`` is a changelog: its deletes are
    ``_change_type = 'delete'``, its ``update_preimage`` rows are not applied, and those
    three columns stay out of the target. See docs/apply-changes.md for every parameter.

    Reads the feed's schema (one round trip), as ``changes(tableName)`` reads a location.

    Examples
    --------
    >>> from spark_cdc import apply_changes, readStream
    >>> feed = readStream(spark).option("rowId", "order_id").load("/data/orders")
    >>> query = apply_changes(feed, "/data/orders_history", keys=["order_id"],
    ...     sequence_by="_commit_version", stored_as_scd_type=2,
    ...     checkpoint_location="/data/chk/orders_history")
    """
    from pyspark.sql import functions as F

    scd_type = _scd_type(stored_as_scd_type)
    schema = feed.schema
    names = list(schema.names)
    changelog = all(c in names for c in METADATA_COLUMNS)
    keys = _names("keys", keys, names, required=True)
    columns = _target_columns(names, keys, column_list, except_column_list, changelog)
    tracked = _tracked(
        scd_type, columns, keys, track_history_column_list, track_history_except_column_list
    )
    _refuse_reserved(columns, scd_type)
    sequence, sequence_names = _sequence(sequence_by, names)
    if apply_as_truncates is not None and scd_type == 2:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="apply_as_truncates",
            problem="applies to SCD type 1 only (a history keeps what a truncate ends)",
            fix="leave it out, or store the target as type 1",
        )
    if feed.isStreaming and not checkpoint_location:
        raise cdc_error("APPLY_CHANGES.MISSING_CHECKPOINT_LOCATION")

    deletes = _condition(apply_as_deletes) if apply_as_deletes is not None else None
    if deletes is None and changelog:
        deletes = F.col(CHANGE_TYPE) == "delete"
    op = F.lit(UPSERT)
    if deletes is not None:
        op = F.when(F.coalesce(deletes, F.lit(False)), F.lit(DELETE)).otherwise(op)
    if apply_as_truncates is not None:
        truncates = F.coalesce(_condition(apply_as_truncates), F.lit(False))
        op = F.when(truncates, F.lit(TRUNCATE)).otherwise(op)
    if changelog:
        feed = feed.filter(F.col(CHANGE_TYPE) != "update_preimage")
    prepared = feed.select(
        *[F.col(_quoted(c)) for c in columns],
        *[part.alias(sequence_column(i)) for i, part in enumerate(sequence)],
        op.cast("tinyint").alias(OP),
    )
    spec = ApplySpec(
        target=target,
        state=state_location or target.rstrip("/") + STATE_SUFFIX,
        keys=tuple(keys),
        columns=tuple(columns),
        sequence_names=tuple(sequence_names),
        scd_type=scd_type,
        tracked=tuple(tracked),
        ignore_null_updates=ignore_null_updates,
        changelog_pairs=changelog,
        schema_evolution=schema_evolution,
        app_id=_writer_id(target, checkpoint_location if feed.isStreaming else None),
        tombstone_retention_ms=(
            None if tombstone_retention is None else int(tombstone_retention.total_seconds() * 1000)
        ),
        storage_options=tuple(sorted((storage_options or {}).items())),
    )
    ship_by_value()
    if not feed.isStreaming:
        rows = task.apply_once(prepared, spec, version=0)
        return AppliedChanges(
            changes=sum(r["changes"] for r in rows),
            keys=sum(r["keys"] for r in rows),
            rows=sum(r["rows"] for r in rows),
        )
    writer = prepared.writeStream.foreachBatch(task.each_micro_batch(spec))
    writer = writer.option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


def _scd_type(value: int | str) -> int:
    if str(value) not in ("1", "2"):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="stored_as_scd_type",
            problem=f"is {value!r}",
            fix="pass 1 (a mirror) or 2 (a history)",
        )
    return int(value)


def _names(parameter: str, given: Any, names: list[str], required: bool = False) -> list[str]:
    """Column names of the feed: a list of strings, each a column of it."""
    if isinstance(given, str) or not all(isinstance(n, str) for n in given or ()):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter=parameter,
            problem=f"is {given!r}",
            fix="pass a list of column names",
        )
    chosen = list(given or ())
    if required and not chosen:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter=parameter,
            problem="is empty",
            fix="name at least one column",
        )
    for name in chosen:
        if name not in names:
            raise cdc_error(
                "APPLY_CHANGES.UNKNOWN_COLUMN",
                parameter=parameter,
                column=name,
                columns=", ".join(names),
            )
    return chosen


def _either(first: str, first_value: Any, second: str, second_value: Any) -> None:
    """Spark's rule: one of a pair of lists, an empty list counting as none."""
    if first_value and second_value:
        raise cdc_error("APPLY_CHANGES.CONFLICTING_PARAMETERS", first=first, second=second)


def _target_columns(
    names: list[str],
    keys: list[str],
    column_list: Sequence[str] | None,
    except_column_list: Sequence[str] | None,
    changelog: bool,
) -> list[str]:
    """The target's columns, in the feed's order (as Spark keeps them)."""
    _either("column_list", column_list, "except_column_list", except_column_list)
    if column_list:
        chosen = set(_names("column_list", column_list, names))
        columns = [n for n in names if n in chosen]
    else:
        left_out = set(_names("except_column_list", except_column_list, names))
        if changelog:
            left_out |= set(METADATA_COLUMNS)
        columns = [n for n in names if n not in left_out]
    for key in keys:
        if key not in columns:
            raise cdc_error(
                "APPLY_CHANGES.INVALID_PARAMETER",
                parameter="column_list" if column_list else "except_column_list",
                problem=f"leaves out key column {key}",
                fix="keep every key in the target",
            )
    return columns


def _tracked(
    scd_type: int,
    columns: list[str],
    keys: list[str],
    only: Sequence[str] | None,
    other_than: Sequence[str] | None,
) -> list[str]:
    """Type 2: the columns whose change opens a version (by default all but the keys)."""
    _either("track_history_column_list", only, "track_history_except_column_list", other_than)
    if (only or other_than) and scd_type != 2:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="track_history_column_list" if only else "track_history_except_column_list",
            problem="applies to SCD type 2 only",
            fix="pass stored_as_scd_type=2, or leave it out",
        )
    values = [c for c in columns if c not in keys]
    if only:
        chosen = set(_names("track_history_column_list", only, values))
        return [c for c in values if c in chosen]
    left_out = set(_names("track_history_except_column_list", other_than, values))
    return [c for c in values if c not in left_out]


def _refuse_reserved(columns: list[str], scd_type: int) -> None:
    for name in columns:
        if name.startswith(RESERVED_PREFIX) or (scd_type == 2 and name in (START_AT, END_AT)):
            raise cdc_error("APPLY_CHANGES.RESERVED_COLUMN", column=name)


def _sequence(sequence_by: Any, names: list[str]) -> tuple[list[Any], list[str]]:
    """The sequence's parts as Columns, and their names (for type 2's struct)."""
    from pyspark.sql import functions as F

    if isinstance(sequence_by, str):
        sequence_by = [sequence_by]
    if isinstance(sequence_by, (list, tuple)):
        parts = _names("sequence_by", sequence_by, names, required=True)
        return [F.col(_quoted(p)) for p in parts], parts
    if hasattr(sequence_by, "alias"):  # a Column
        return [sequence_by], ["sequence"]
    raise cdc_error(
        "APPLY_CHANGES.INVALID_PARAMETER",
        parameter="sequence_by",
        problem=f"is {sequence_by!r}",
        fix="pass a column name, a list of them, or a Column",
    )


def _condition(value: str | Column) -> Column:
    from pyspark.sql import functions as F

    return F.expr(value) if isinstance(value, str) else value


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _writer_id(target: str, checkpoint_location: str | None) -> str:
    """The writer's name in the tables' markers: a stream's follows its checkpoint (a
    restart finds what it committed); a batch call is a writer of its own."""
    if checkpoint_location is None:
        return f"spark-cdc-apply-{uuid.uuid4().hex}"
    digest = hashlib.sha256(f"{checkpoint_location}\n{target}".encode()).hexdigest()[:32]
    return f"spark-cdc-apply-{digest}"
