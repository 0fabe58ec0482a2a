"""``apply_changes``: a change feed applied to a Delta target, as SCD type 1 (a mirror) or
type 2 (a history), exactly once, on any Spark Connect server >= 4.0.

The parameters are Spark's ``create_auto_cdc_flow``'s (Spark Declarative Pipelines), so
code moves either way. The client checks them and reduces the feed to one shape
(``rewrite.apply_plan``), then writes it to the server's ``spark_cdc_apply`` sink by name
(``server_plugin.sinks.apply.sink``): the server's installed code applies each batch with
delta-rs, so no Delta jars are needed there and the client's Python need not be the
server's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from spark_cdc.result_size import applying, batch_too_large
from spark_cdc.rewrite.apply_plan import ApplyPlan, plan_apply, target_layout
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.server_code import make_available, server_parallelism
from spark_cdc.server_plugin.sinks.apply.engine.binding import REFRESH
from spark_cdc.server_plugin.sinks.apply.engine.spec import DELTA, ICEBERG, ApplySpec
from spark_cdc.server_plugin.sinks.apply.sink import (
    SET_ASIDE_OPTION,
    SINK_NAME,
    ApplyChangesSink,
    spec_options,
)
from spark_cdc.sources import names_a_table, table_location

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

STATE_SUFFIX = "__apply_changes_state"


@dataclass(frozen=True)
class AppliedChanges:
    """What applying a batch DataFrame did: ``changes`` read, ``keys`` whose rows changed,
    ``rows`` written for them (type 2: the versions inserted, the one a change closes
    included)."""

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
    table_properties: Mapping[str, str] | None = None,
    partition_cols: Sequence[str] | None = None,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    format: str = DELTA,
    catalog: Mapping[str, str] | None = None,
    full_refresh: bool = False,
) -> StreamingQuery | AppliedChanges:
    """Apply ``feed`` to the Delta table ``target``: a path as the server sees it (any
    string with ``/``; the table is made by the first batch when missing) or the name of a
    Delta table in the server's catalog (its location, asked with one ``DESCRIBE`` round
    trip). With ``format="iceberg"``, ``target`` names an Iceberg table
    (``namespace.table``) in the pyiceberg catalog whose properties ``catalog`` gives (the
    ``catalog.<KEY>`` options of the Iceberg reader: ``type``, ``uri``, ``warehouse``...),
    made by the first batch when missing. A batch DataFrame is applied once, returning
    what it did; a streaming one micro-batch by micro-batch, returning the started query.

    ``keys`` identify a row; ``sequence_by`` (a column, several compared in order, or a
    Column) orders a key's changes. ``stored_as_scd_type`` 1 keeps each key's latest row,
    2 its history with ``__START_AT``/``__END_AT``. A feed with ``_change_type``,
    ``_commit_version`` and ``_commit_timestamp`` is a changelog: its deletes are
    ``_change_type = 'delete'``, its ``update_preimage`` rows are not applied, and those
    three columns stay out of the target. ``table_properties`` and ``partition_cols``
    (Spark's ``create_streaming_table`` names) shape a target the first batch makes; it
    has deletion vectors only when ``delta.enableDeletionVectors`` is ``'true'``.
    ``full_refresh`` rebuilds the target and its state from ``feed`` (read from its
    start): one commit replacing every row, older versions still readable; a stream's
    checkpoint is set aside (kept beside it) and the stream starts over in a new one. It
    is the way out of the refusals of a target deleted, replaced or left without its
    state (docs/living-with-a-target.md). See docs/apply-changes.md for every parameter.

    Reads the feed's schema (one round trip), as ``changes(tableName)`` reads a location,
    and once per session what the server has installed (see docs/getting-started.md) and
    how many tasks it runs at once (the feed is split by key into that many).

    Examples
    --------
    >>> from spark_cdc import apply_changes, readStream
    >>> feed = readStream(spark).option("rowId", "order_id").load("/data/orders")
    >>> query = apply_changes(feed, "/data/orders_history", keys=["order_id"],
    ...     sequence_by="_commit_version", stored_as_scd_type=2,
    ...     checkpoint_location="/data/chk/orders_history")
    """

    scd_type = _scd_type(stored_as_scd_type)
    if feed.isStreaming and not checkpoint_location:
        raise cdc_error("APPLY_CHANGES.MISSING_CHECKPOINT_LOCATION")
    _check_full_refresh(full_refresh)
    spark = feed.sparkSession
    checkpoint = checkpoint_location if feed.isStreaming else None
    tables = tables_spec(
        spark, target, scd_type, format, catalog, state_location, storage_options, checkpoint
    )
    # The feed is split by key among the server's tasks, and its state laid out in as many
    # buckets (``buckets``).
    tasks = server_parallelism(spark)
    plan = plan_apply(
        feed,
        scd_type,
        keys,
        sequence_by,
        apply_as_deletes,
        apply_as_truncates,
        column_list,
        except_column_list,
        track_history_column_list,
        track_history_except_column_list,
        tasks,
    )
    spec = dataclasses.replace(
        planned(tables, plan, tasks, partition_cols, table_properties),
        ignore_null_updates=ignore_null_updates,
        schema_evolution=schema_evolution,
        full_refresh=full_refresh,
        checkpoint=checkpoint,
        tombstone_retention_ms=_retention_ms(tombstone_retention, scd_type),
    )
    if full_refresh and feed.isStreaming:  # a generation of its own (``binding``)
        spec = dataclasses.replace(spec, app_id=f"{spec.app_id}{REFRESH}{uuid.uuid4().hex[:12]}")
    if not feed.isStreaming:
        return applied_once(plan, spec)
    make_available(spark, ApplyChangesSink, "apply_changes")
    options = spec_options(spec)
    if full_refresh:  # the stream starts over from its feed's start, the old checkpoint kept
        spark.read.format(SINK_NAME).options(**options).option(
            SET_ASIDE_OPTION, "true"
        ).load().collect()
    writer = plan.prepared.writeStream.format(SINK_NAME).options(**options)
    writer = writer.option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    query = writer.start()
    _STARTED[str(query.id)] = (spark, options)
    applying(str(query.id))
    return query


def tables_spec(
    spark: SparkSession,
    target: str,
    scd_type: int,
    format: str,
    catalog: Mapping[str, str] | None,
    state_location: str | None,
    storage_options: Mapping[str, str] | None,
    checkpoint: str | None = None,
    app_id: str | None = None,
) -> ApplySpec:
    """Where a writer's tables are and in which format, checked: a spec without columns
    yet (``planned`` adds a feed's). A Delta table's name is resolved to its location
    (one ``DESCRIBE``). ``app_id``: the writer's name, else a batch call's own or a
    stream's (``_writer_id``)."""
    properties_of_catalog = _catalog(format, target, state_location, catalog)
    target_name = target if format == DELTA and names_a_table(target) else None
    if target_name is not None:
        target = table_location(spark, target_name)
    return ApplySpec(
        target=target,
        state=state_location or target.rstrip("/") + STATE_SUFFIX,
        keys=(),
        columns=(),
        sequence_names=(),
        scd_type=scd_type,
        tracked=(),
        ignore_null_updates=False,
        changelog_pairs=False,
        schema_evolution=False,
        app_id=app_id or _writer_id(target, checkpoint),
        target_name=target_name,
        storage_options=tuple(sorted((storage_options or {}).items())),
        target_format=format,
        catalog=tuple(sorted(properties_of_catalog.items())),
    )


def planned(
    tables: ApplySpec,
    plan: ApplyPlan,
    tasks: int,
    partition_cols: Sequence[str] | None,
    table_properties: Mapping[str, str] | None,
) -> ApplySpec:
    """``tables`` with the columns of ``plan``'s feed, split among ``tasks``, and the
    layout of a target the first batch makes (checked against those columns)."""
    partitions, properties = target_layout(plan.columns, partition_cols, table_properties)
    return dataclasses.replace(
        tables,
        keys=tuple(plan.keys),
        columns=tuple(plan.columns),
        sequence_names=tuple(plan.sequence_names),
        tracked=tuple(plan.tracked),
        changelog_pairs=plan.changelog,
        partitioned_by_key=plan.partitioned_by_key,
        key_buckets=tasks,
        table_properties=properties,
        partition_cols=partitions,
    )


def applied_once(plan: ApplyPlan, spec: ApplySpec) -> AppliedChanges:
    """A batch feed applied as the spec's writer's batch (``spec.batch``), and what it
    did (read back from the state's commit)."""
    from pyspark.errors import PySparkException

    spark = plan.prepared.sparkSession
    make_available(spark, ApplyChangesSink, "apply_changes")
    options = spec_options(spec)
    try:
        plan.prepared.write.format(SINK_NAME).options(**options).mode("append").save()
    except PySparkException as problem:
        too_large = batch_too_large(str(problem))
        if too_large is None:
            raise
        raise too_large from problem
    done = spark.read.format(SINK_NAME).options(**options).load()
    found = done.filter(done.batch == spec.batch).limit(1).collect()
    return AppliedChanges(*found[0][1:]) if found else AppliedChanges(0, 0, 0)


# The sink's options of each query ``apply_changes`` started in this process, by query id:
# what ``applied_batches`` reads the outcomes with.
_STARTED: dict[str, tuple[SparkSession, dict[str, str]]] = {}


def applied_batches(query: StreamingQuery) -> dict[int, AppliedChanges]:
    """What the latest micro-batches of a stream ``apply_changes`` started did, by batch
    id: the figures a batch call returns, for each micro-batch that had changes (the state
    table records them; the last 50 of its commits are read, in one small query).

    Examples
    --------
    >>> query = apply_changes(feed, "/data/orders_mirror", keys=["order_id"],
    ...     sequence_by="_commit_version", checkpoint_location="/data/chk/orders")
    >>> applied_batches(query)  # doctest: +SKIP
    {0: AppliedChanges(changes=1000, keys=1000, rows=1000), 1: AppliedChanges(...)}
    """
    started = _STARTED.get(str(query.id))
    if started is None:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="query",
            problem="was not started by apply_changes in this process",
            fix="pass the query apply_changes returned",
        )
    spark, options = started
    found = spark.read.format(SINK_NAME).options(**options).load().collect()
    return {int(row[0]): AppliedChanges(*row[1:]) for row in reversed(found)}


def _retention_ms(retention: timedelta | None, scd_type: int) -> int | None:
    """Type 1's tombstone retention in milliseconds (None: for ever)."""
    if retention is None:
        return None
    if scd_type == 2:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="tombstone_retention",
            problem="applies to SCD type 1 only (a history keeps every change it is made of)",
            fix="leave it out, or store the target as type 1",
        )
    if not isinstance(retention, timedelta) or retention < timedelta(0):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="tombstone_retention",
            problem=f"is {retention!r}",
            fix="pass a timedelta of zero or more, or None to remember deletes for ever",
        )
    return int(retention.total_seconds() * 1000)


def _catalog(
    format: str, target: str, state_location: str | None, catalog: Mapping[str, str] | None
) -> dict[str, str]:
    """The catalog properties of an Iceberg target, checked with the format and the
    tables' names: pyiceberg commits to a table only through a catalog (a folder's
    commit would fail after writing its files), so a folder is refused up front."""
    if format not in (DELTA, ICEBERG):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="format",
            problem=f"is {format!r}",
            fix=f"pass {DELTA!r} (the default) or {ICEBERG!r}",
        )
    if format == DELTA:
        if catalog:
            raise cdc_error(
                "APPLY_CHANGES.INVALID_PARAMETER",
                parameter="catalog",
                problem="is given for a Delta target",
                fix="pass format='iceberg' with it, or leave it out",
            )
        return {}
    if not catalog or not isinstance(catalog, Mapping):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="catalog",
            problem="is missing for an Iceberg target",
            fix="pass the pyiceberg catalog's properties, such as {'type': 'rest', "
            "'uri': 'https://catalog.example.com', 'warehouse': 'lake'}",
        )
    for parameter, name in (("target", target), ("state_location", state_location)):
        if name is not None and (not names_a_table(name) or "." not in name):
            raise cdc_error(
                "APPLY_CHANGES.INVALID_PARAMETER",
                parameter=parameter,
                problem=f"is {name!r}, not an Iceberg table's name (an Iceberg table is "
                "committed to through its catalog, never as a folder)",
                fix="name the table as namespace.table in the catalog given",
            )
    return {str(k): str(v) for k, v in catalog.items()}


def _check_full_refresh(full_refresh: bool) -> None:
    if not isinstance(full_refresh, bool):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="full_refresh",
            problem=f"is {full_refresh!r}",
            fix="pass True or False",
        )


def _scd_type(value: int | str) -> int:
    if str(value) not in ("1", "2"):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="stored_as_scd_type",
            problem=f"is {value!r}",
            fix="pass 1 (a mirror) or 2 (a history)",
        )
    return int(value)


def _writer_id(target: str, checkpoint_location: str | None) -> str:
    """The writer's name in the tables' markers: a stream's follows its checkpoint (a
    restart finds what it committed); a batch call is a writer of its own."""
    if checkpoint_location is None:
        return f"spark-cdc-apply-{uuid.uuid4().hex}"
    digest = hashlib.sha256(f"{checkpoint_location}\n{target}".encode()).hexdigest()[:32]
    return f"spark-cdc-apply-{digest}"
