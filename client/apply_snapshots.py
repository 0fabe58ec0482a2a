"""``apply_changes_from_snapshot``: a table without a changelog mirrored (SCD type 1) or
historised (type 2) from its snapshots, each compared with the target and its changes
applied exactly once, with Databricks' AUTO CDC FROM SNAPSHOT parameters.

Each snapshot is diffed against the target's rows (``snapshot_changes``; the target's files
read by Spark's Parquet reader where they hold its rows as they are, else by the server's
installed sink: ``server_plugin.sinks.apply.snapshot_reads``) and the changes
go through ``apply_changes``' engine as the writer's batch numbered by the snapshot's
version, its sequence that version too (type 2's ``__START_AT``/``__END_AT``). The writer's
name follows the target, so every run into one target is one writer: its last batch is
the last snapshot applied, a version applied again is found and skipped, and an older one
is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_cdc.apply import (
    AppliedChanges,
    _check_full_refresh,
    _scd_type,
    applied_once,
    planned,
    tables_spec,
)
from spark_cdc.rewrite.apply_plan import column_names, plan_apply
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import quoted
from spark_cdc.rewrite.server_code import make_available, server_parallelism
from spark_cdc.rewrite.snapshot_diff import snapshot_changes
from spark_cdc.server_plugin.sinks.apply.engine.binding import REFRESH
from spark_cdc.server_plugin.sinks.apply.engine.spec import DELTA, SNAPSHOT_WRITER_PREFIX, ApplySpec
from spark_cdc.server_plugin.sinks.apply.sink import ApplyChangesSink
from spark_cdc.server_plugin.vocabulary import COMMIT_VERSION
from spark_cdc.snapshot_reads import check_given_again, status, table_rows, target_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# What a source function is: given the last version applied (None: none yet), the next
# snapshot and its version, or None when there is none.
NextSnapshot = Callable[[int | None], "tuple[DataFrame, int] | None"]


@dataclass(frozen=True)
class AppliedSnapshot:
    """What applying one snapshot did: its ``version``; the ``changes`` it made (a key
    inserted, deleted or changed is one), the ``keys`` and the target ``rows`` they
    wrote; ``skipped``: the version was applied already, and nothing was done."""

    version: int
    changes: int
    keys: int
    rows: int
    skipped: bool = False


def apply_changes_from_snapshot(
    target: str,
    source: str | DataFrame | NextSnapshot,
    keys: Sequence[str],
    *,
    stored_as_scd_type: int | str = 1,
    track_history_column_list: Sequence[str] | None = None,
    track_history_except_column_list: Sequence[str] | None = None,
    column_list: Sequence[str] | None = None,
    except_column_list: Sequence[str] | None = None,
    version: int | None = None,
    source_format: str | None = None,
    source_options: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
    state_location: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    table_properties: Mapping[str, str] | None = None,
    partition_cols: Sequence[str] | None = None,
    format: str = DELTA,
    catalog: Mapping[str, str] | None = None,
    schema_evolution: bool = False,
    full_refresh: bool = False,
) -> list[AppliedSnapshot]:
    """Apply the snapshots of ``source`` to ``target``: each compared by ``keys`` with the
    target's rows, a new key inserted, a changed one updated, a missing one deleted (type
    1) or closed (type 2), an unchanged one left alone. Returns what each snapshot did.

    ``source`` is the next snapshot, at ``version`` or one above the last applied: a batch
    DataFrame, a table's name (read with ``spark.read.table``), or a path (a Delta table,
    read as the sink reads a target, or with ``source_format`` any format Spark reads:
    ``spark.read.format(source_format).options(**source_options).load(source)``, a folder
    of Parquet or CSV dumps). Or it is a function called on the client with the last
    version applied (None at first) that returns the next snapshot and its version, or
    None when there is no newer one; it is called until it returns None.
    Versions must grow: one applied already is skipped (and ends the calls), an older
    one is refused with ``APPLY_CHANGES.SNAPSHOT_VERSION_NOT_NEWER``.

    The target is ``apply_changes``' (a Delta path or table name, or an Iceberg table in
    ``catalog`` with ``format="iceberg"``), made by the first snapshot; a target written
    by ``apply_changes`` from a change feed is refused, as this target is to it. A
    snapshot with a key twice or a NULL key is refused (``SNAPSHOT_CHANGES.*``) before
    anything is written. With ``schema_evolution``, a column a snapshot adds is added to
    the target (its values written to every key that has one), and one it no longer has is
    NULL from then on; without, either fails the comparison, naming the column.
    ``full_refresh`` makes the target and its state anew from the source's snapshots, as
    if none had been applied (a function is called with None first): the way out of a
    target or state deleted, replaced or edited by hand. See docs/snapshots.md.

    Examples
    --------
    >>> from spark_cdc import apply_changes_from_snapshot
    >>> def dumps(last):
    ...     day = next_dump_after(last)  # yours: e.g. the folders of a nightly export
    ...     return None if day is None else (spark.read.parquet(f"/dumps/{day}"), day)
    >>> apply_changes_from_snapshot("/data/customers", dumps, keys=["customer_id"],
    ...     stored_as_scd_type=2)
    """
    scd_type = _scd_type(stored_as_scd_type)
    if column_list and except_column_list:
        raise cdc_error(
            "APPLY_CHANGES.CONFLICTING_PARAMETERS", first="column_list", second="except_column_list"
        )
    _check_full_refresh(full_refresh)
    session = spark if spark is not None else _active_session()
    tables = tables_spec(
        session,
        target,
        scd_type,
        format,
        catalog,
        state_location,
        storage_options,
        app_id=writer_id(target),
    )
    if full_refresh:  # a generation of the writer's own (``binding.REFRESH``)
        generation = f"{tables.app_id}{REFRESH}{uuid.uuid4().hex[:12]}"
        tables = dataclasses.replace(tables, app_id=generation, full_refresh=True)
    next_snapshot = _next_snapshot(source, version, session, tables, source_format, source_options)
    make_available(session, ApplyChangesSink, "apply_changes")

    def applied(
        after: DataFrame, before: DataFrame | None, number: int, base: int, unique: bool
    ) -> AppliedChanges:
        """The changes of snapshot ``after`` (its columns chosen) from ``before`` (None: an
        empty target; ``unique``: it holds each key once for certain) applied as the
        writer's batch ``number``, computed against its batch ``base`` (-1: none)."""
        from pyspark.sql import functions as F

        changes = snapshot_changes(
            after.limit(0) if before is None else before,
            after,
            keys,
            number,
            commit_timestamp=F.current_timestamp(),
            allow_missing_columns=schema_evolution,
            options={"computeUpdates": True},
            _unique_before=unique,
        )
        tasks = server_parallelism(session)
        plan = plan_apply(
            changes,
            scd_type,
            keys,
            COMMIT_VERSION,
            None,
            None,
            None,
            None,
            track_history_column_list,
            track_history_except_column_list,
            tasks,
        )
        spec = dataclasses.replace(
            planned(tables, plan, tasks, partition_cols, table_properties),
            schema_evolution=schema_evolution,
            snapshot_version=number,
            snapshot_base=base,
        )
        return applied_once(plan, spec)

    done: list[AppliedSnapshot] = []
    while True:
        found = status(session, tables)
        state_batch = found.state_batch
        tables = dataclasses.replace(tables, app_id=found.writer)
        got = next_snapshot(state_batch)
        if got is None:
            return done
        snapshot, number = _checked(got, state_batch, found.target_batch, tables.target)
        if state_batch is not None and number == state_batch:
            done.append(AppliedSnapshot(number, 0, 0, 0, skipped=True))
            return done
        after = _chosen(snapshot, keys, column_list, except_column_list)
        base = -1 if state_batch is None else state_batch
        if found.target_batch is not None and found.target_batch > base:
            check_given_again(session, tables, scd_type, after, keys, number, schema_evolution)
        # A refresh's first snapshot is compared with nothing.
        compared = found.target_exists and not tables.full_refresh
        before = target_rows(session, tables, scd_type, found) if compared else None
        # The sink vouches only for rows its Parquet files hold (``plain_read``); a server
        # of an earlier version does not say.
        unique = bool(found.asDict().get("target_keys_unique"))
        outcome = applied(after, before, number, base, unique)
        tables = dataclasses.replace(tables, full_refresh=False)  # the generation goes on
        done.append(AppliedSnapshot(number, outcome.changes, outcome.keys, outcome.rows))
        if next_snapshot is not source:  # one snapshot: a DataFrame or a table's content
            return done


def writer_id(target: str) -> str:
    """Every run into one target is one writer (module docstring)."""
    digest = hashlib.sha256(target.encode()).hexdigest()[:32]
    return f"{SNAPSHOT_WRITER_PREFIX}{digest}"


def _checked(
    got: Any, applied: int | None, reached: int | None, target: str
) -> tuple[DataFrame, int]:
    """The source's answer, checked: a DataFrame and a version not below the last
    applied, and after a stop between a snapshot's two commits, that snapshot again."""
    from pyspark.sql import DataFrame

    if (
        not isinstance(got, tuple)
        or len(got) != 2
        or not isinstance(got[0], DataFrame)
        or isinstance(got[1], bool)
        or not isinstance(got[1], int)
    ):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="source",
            problem=f"returned {type(got).__name__}, not a (DataFrame, int) pair or None",
            fix="return the next snapshot and its version, or None when there is none",
        )
    snapshot, number = got
    done = -1 if applied is None else applied
    if number < done:
        raise cdc_error(
            "APPLY_CHANGES.SNAPSHOT_VERSION_NOT_NEWER", path=target, last=done, version=number
        )
    if reached is not None and reached > done and number != reached:
        raise cdc_error(
            "APPLY_CHANGES.SNAPSHOT_INTERRUPTED", path=target, applied=reached, version=number
        )
    return snapshot, number


def _next_snapshot(
    source: Any,
    version: int | None,
    spark: SparkSession,
    tables: ApplySpec,
    source_format: str | None,
    source_options: Mapping[str, str] | None,
) -> Callable[[int | None], Any]:
    """``source`` as a function of the last version applied (``source`` itself when it
    is one)."""
    from pyspark.sql import DataFrame

    if isinstance(source, DataFrame):
        kind = "DataFrame"
    elif callable(source):
        kind = "function"
    elif isinstance(source, str) and source:
        kind = "path"
    else:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="source",
            problem=f"is {source!r}",
            fix="pass a DataFrame, a table's name or path, or a function returning "
            "(DataFrame, version)",
        )
    # What each kind refuses: a function gives its own versions; only a path is read.
    refused: dict[str, object] = {"version": version} if kind == "function" else {}
    if kind != "path":
        refused.update(source_format=source_format, source_options=source_options)
    for parameter, value in refused.items():
        if value is not None:
            raise cdc_error(
                "APPLY_CHANGES.INVALID_PARAMETER",
                parameter=parameter,
                problem=f"is given with a source {kind}",
                fix="leave it out" if kind == "function" else "give it with a path source only",
            )
    if kind == "function":
        return source
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="version",
            problem=f"is {version!r}",
            fix="pass the snapshot's version as an int, or leave it out",
        )
    if isinstance(source, DataFrame) and source.isStreaming:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="source",
            problem="is a streaming DataFrame, and a snapshot is a table's whole content",
            fix="pass a batch DataFrame (spark.read), or use apply_changes for a change feed",
        )

    def current(applied: int | None) -> tuple[DataFrame, int]:
        number = version if version is not None else (1 if applied is None else applied + 1)
        if isinstance(source, DataFrame):
            return source, number
        return table_rows(spark, source, tables, source_format, source_options), number

    return current


def _chosen(
    snapshot: DataFrame,
    keys: Sequence[str],
    column_list: Sequence[str] | None,
    except_column_list: Sequence[str] | None,
) -> DataFrame:
    """The snapshot's columns the target keeps, once the ones named are its own."""
    from pyspark.sql import functions as F

    _check_columns(snapshot, keys, column_list, except_column_list)
    if column_list:
        return snapshot.select(*[F.col(quoted(c)) for c in column_list])
    return snapshot.drop(*except_column_list) if except_column_list else snapshot


def _check_columns(
    snapshot: DataFrame,
    keys: Sequence[str],
    column_list: Sequence[str] | None,
    except_column_list: Sequence[str] | None,
) -> None:
    """The columns named are the snapshot's, refused by name before a plan uses them
    (Spark's own error would list the diff's helper columns; one round trip for the
    snapshot's schema)."""
    names = snapshot.columns
    column_names("keys", keys, names, required=True, of="the snapshot")
    column_names("column_list", column_list, names, of="the snapshot")
    column_names("except_column_list", except_column_list, names, of="the snapshot")


def _active_session() -> SparkSession:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        raise cdc_error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="spark",
            problem="is not given, and no session is active",
            fix="pass spark=, the session to apply with",
        )
    return session
