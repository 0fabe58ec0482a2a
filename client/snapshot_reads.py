"""What ``apply_changes_from_snapshot`` reads before it writes, through the server's sink
(``server_plugin.sinks.apply.snapshot_reads``) or, where the target's files hold its rows
as they are, Spark's own Parquet reader: where the writer stands, the target's rows a
snapshot is compared with, a Delta table given as the source, and, for a snapshot applied
again, the target's current rows."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import quoted
from spark_cdc.rewrite.snapshot_diff import snapshot_changes
from spark_cdc.server_plugin.sinks.apply.engine.spec import DELTA, END_AT, START_AT, ApplySpec
from spark_cdc.server_plugin.sinks.apply.sink import (
    CURRENT,
    FILES,
    READ_OPTION,
    SINK_NAME,
    STATUS,
    TARGET,
    spec_options,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession


def status(spark: SparkSession, tables: ApplySpec) -> Row:
    """Where the writer stands (``snapshot_reads.status``), and where Spark's Parquet
    reader reads the target's rows, their schema and files (``plain_read``)."""
    options = spec_options(tables)
    row = spark.read.format(SINK_NAME).options(**options).option(READ_OPTION, STATUS)
    return row.load().collect()[0]


def target_rows(
    spark: SparkSession, tables: ApplySpec, scd_type: int, found: Row, read: str = TARGET
) -> DataFrame:
    """The target's rows the next snapshot is compared with (``read``: ``CURRENT``, its
    current ones): type 2's open versions, without their two columns; read by Spark's
    Parquet reader where ``found`` gave their files, else by the sink. A target of the
    other type is refused by name."""
    from pyspark.sql import functions as F

    rows = read_rows(spark, tables, found, read)
    if found.target_files:  # the schema given: no round trip for its columns
        columns = [field["name"] for field in json.loads(found.target_schema)["fields"]]
    else:
        columns = rows.columns
    history = END_AT in columns
    if history != (scd_type == 2):
        stored = 2 if history else 1
        raise cdc_error(
            "APPLY_CHANGES.SCD_TYPE_MISMATCH",
            path=tables.target,
            stored=stored,
            evidence=f"it {'has' if history else 'has no'} a {END_AT} column",
            asked=scd_type,
        )
    if history:
        rows = rows.filter(F.col(END_AT).isNull()).drop(START_AT, END_AT)
    return rows


def table_rows(
    spark: SparkSession,
    source: str,
    tables: ApplySpec,
    source_format: str | None,
    source_options: Mapping[str, str] | None,
) -> DataFrame:
    """A table's current rows: with ``source_format`` (other than Delta), read by Spark in
    that format; else a path as a Delta table, read by the server's sink as it reads a
    target (deletion vectors and column mapping applied), a name through the session's
    catalog."""
    if source_format is not None and source_format.lower() != DELTA:
        return spark.read.format(source_format).options(**(source_options or {})).load(source)
    if "/" not in source:
        return spark.read.options(**(source_options or {})).table(source)
    as_target = dataclasses.replace(
        tables, target=source, state=source.rstrip("/") + "__no_state", target_format=DELTA
    )
    files = spark.read.format(SINK_NAME).options(**spec_options(as_target))
    return read_rows(spark, as_target, files.option(READ_OPTION, FILES).load().collect()[0])


def read_rows(spark: SparkSession, tables: ApplySpec, found: Row, read: str = TARGET) -> DataFrame:
    """The rows of ``tables``' target: its files read by Spark's Parquet reader with its
    schema, where the sink gave them (``snapshot_reads.plain_read``), else the sink's
    ``read`` (deletion vectors, column mapping and partition values applied)."""
    if found.target_files:
        from pyspark.sql.types import StructType

        schema = StructType.fromJson(json.loads(found.target_schema))
        return spark.read.schema(schema).parquet(*found.target_files)
    reader = spark.read.format(SINK_NAME).options(**spec_options(tables))
    return reader.option(READ_OPTION, read).load()


def check_given_again(
    spark: SparkSession,
    tables: ApplySpec,
    scd_type: int,
    after: DataFrame,
    keys: Sequence[str],
    number: int,
    schema_evolution: bool,
) -> None:
    """A snapshot the target holds and its state does not is applied again, and its
    changes are written to the state: they describe the target's rows only if the
    snapshot is the one the target received. A stop between its two commits and a state
    deleted after the first snapshot look alike, and neither source need give the same
    rows again (a DataFrame, a table changed since): the target's current rows (type 2:
    its open versions) compared with it must show no change."""
    from pyspark.sql import functions as F

    reader = spark.read.format(SINK_NAME).options(**spec_options(tables))
    files = reader.option(READ_OPTION, FILES).load().collect()[0]
    current = target_rows(spark, tables, scd_type, files, read=CURRENT)
    changes = snapshot_changes(current, after, keys, number, allow_missing_columns=schema_evolution)
    differing = changes.select(*[F.col(quoted(k)) for k in keys]).distinct().count()
    if differing:
        raise cdc_error(
            "APPLY_CHANGES.SNAPSHOT_GIVEN_AGAIN_DIFFERS",
            path=tables.target,
            version=number,
            count=differing,
        )
