"""The plan ``apply_changes`` hands the server: any feed reduced to one shape (the
target's columns, keys included, in the feed's order; the sequence as
``__spark_cdc_seq_<i>`` columns compared in order; ``__spark_cdc_op`` saying whether each row
is an upsert, a delete or a truncate; ``__spark_cdc_key_hash``, Spark's ``hash()`` of the
keys, by which the server lays out its state), with Spark's ``create_auto_cdc_flow`` rules
for its parameters checked on the way. Built from stock relations: no round trip beyond the
feed's schema, which the caller reads once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import quoted
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    DELETE,
    DELETION_VECTORS_PROPERTY,
    END_AT,
    KEY_HASH,
    OP,
    RESERVED_PREFIX,
    START_AT,
    TRUNCATE,
    UPSERT,
    sequence_column,
)
from spark_cdc.server_plugin.vocabulary import CHANGE_TYPE, METADATA_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class ApplyPlan:
    """The prepared feed and what the server needs to know of its columns. ``changelog``:
    the feed has ``_change_type``, ``_commit_version`` and ``_commit_timestamp``."""

    prepared: DataFrame
    keys: list[str]
    columns: list[str]
    tracked: list[str]
    sequence_names: list[str]
    changelog: bool
    partitioned_by_key: bool


def plan_apply(
    feed: DataFrame,
    scd_type: int,
    keys: Sequence[str],
    sequence_by: str | Sequence[str] | Column,
    apply_as_deletes: str | Column | None,
    apply_as_truncates: str | Column | None,
    column_list: Sequence[str] | None,
    except_column_list: Sequence[str] | None,
    track_history_column_list: Sequence[str] | None,
    track_history_except_column_list: Sequence[str] | None,
    partitions: int = 0,
) -> ApplyPlan:
    """The feed as the server applies it; its parameters refused by name when wrong. A
    changelog's deletes are ``_change_type = 'delete'`` unless ``apply_as_deletes`` says
    otherwise, its ``update_preimage`` rows are dropped and its three columns stay out of
    the target. With ``partitions``, a feed without truncates is hash-partitioned by key
    into that many tasks, each of which resolves its keys on the server (a truncate ends
    every key: such a feed is resolved whole)."""
    from pyspark.sql import functions as F

    schema = feed.schema
    names = list(schema.names)
    changelog = all(c in names for c in METADATA_COLUMNS)
    keys = column_names("keys", keys, names, required=True)
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
        *[F.col(quoted(c)) for c in columns],
        *[part.alias(sequence_column(i)) for i, part in enumerate(sequence)],
        op.cast("tinyint").alias(OP),
        F.hash(*_hashed(schema, keys)).alias(KEY_HASH),
    )
    by_key = partitions > 0 and apply_as_truncates is None
    if by_key:
        prepared = prepared.repartition(partitions, *_hashed(schema, keys))
    return ApplyPlan(prepared, keys, columns, tracked, sequence_names, changelog, by_key)


def column_names(
    parameter: str, given: Any, names: list[str], required: bool = False, of: str = "the feed"
) -> list[str]:
    """Column names of the feed (``of``: what has the columns ``names``): a list of
    strings, each a column of it."""
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
                source=of,
                columns=", ".join(names),
            )
    return chosen


def target_layout(
    columns: Sequence[str],
    partition_cols: Sequence[str] | None,
    table_properties: Mapping[str, str] | None,
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """``partition_cols`` (among the target's ``columns``) and ``table_properties`` (text
    to text, as Spark's ``create_streaming_table`` takes them), checked: what shapes a
    target the first batch makes."""
    partitions = tuple(
        column_names("partition_cols", partition_cols, list(columns), required=False)
    )
    given = table_properties if table_properties is not None else {}
    if not isinstance(given, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()
    ):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="table_properties",
            problem=f"is {table_properties!r}",
            fix="pass a dict of property names to text values, such as "
            "{'delta.checkpointInterval': '10'}",
        )
    properties = dict(given)
    for name, allowed in _BOOLEAN_PROPERTIES.items():
        value = properties.get(name, "").strip().lower()
        if name in properties and value not in allowed:
            raise cdc_error(
                "APPLY_CHANGES.INVALID_PARAMETER",
                parameter="table_properties",
                problem=f"set {name} to {properties[name]!r}",
                fix=f"set it to {' or '.join(repr(v) for v in allowed)}, or leave it out",
            )
    return partitions, tuple(sorted(properties.items()))


# Properties a target takes only as these values: appending only, it could not be applied
# to (a change deletes or rewrites rows).
_BOOLEAN_PROPERTIES = {
    DELETION_VECTORS_PROPERTY: ("true", "false"),
    "delta.appendOnly": ("false",),
}


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
        chosen = set(column_names("column_list", column_list, names))
        columns = [n for n in names if n in chosen]
    else:
        left_out = set(column_names("except_column_list", except_column_list, names))
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
        chosen = set(column_names("track_history_column_list", only, values))
        return [c for c in values if c in chosen]
    left_out = set(column_names("track_history_except_column_list", other_than, values))
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
        parts = column_names("sequence_by", sequence_by, names, required=True)
        return [F.col(quoted(p)) for p in parts], parts
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


def _hashed(schema: StructType, keys: list[str]) -> list[Column]:
    """The key columns as ``KEY_HASH`` hashes them and the feed is partitioned by them (so
    a task holds the keys of one bucket of the state): a string as its UTF-8 bytes, which
    Spark hashes as it hashes the string, whatever its collation (a collation hashes its
    own way, and is no part of the Delta type that keeps a key's hash the same)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    columns = []
    for key in keys:
        column = F.col(quoted(key))
        if isinstance(schema[key].dataType, StringType):
            column = column.cast("binary")
        columns.append(column)
    return columns
