"""``post_process``: Spark's CDC post-processing, planned on the client.

Which passes run follows ``ResolveChangelogTable``: carry-over removal iff the mode is not
``none`` and the changelog holds carry-overs; update detection iff ``computeUpdates`` and
the changelog writes updates as delete+insert; net changes iff the mode is ``netChanges``
and the changelog holds intermediate changes. Building the plan never calls the server.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.batch import batch_post_process
from spark_cdc.rewrite.column_functions import settle_column_functions
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import COMMIT_TIMESTAMP, COMMIT_VERSION, HELPER_PREFIX
from spark_cdc.rewrite.net_changes import streaming_net_changes
from spark_cdc.rewrite.options import CdcOptions, DeduplicationMode, OptionValue, parse_options
from spark_cdc.rewrite.plan_tree import mark_streaming_rewrite, reads_a_stream
from spark_cdc.rewrite.raised import raise_in_query
from spark_cdc.rewrite.row_level import RowLevelPasses
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.rewrite.streaming import streaming_row_level


def post_process(
    df: DataFrame,
    spec: ChangelogSpec,
    options: Mapping[str, OptionValue] | CdcOptions | None = None,
) -> DataFrame:
    """Return ``df``'s change feed with the passes ``options`` ask for and ``spec`` allows.

    Building the plan makes no server round trip; the options are checked now.

    Parameters
    ----------
    df : DataFrame
        A change feed, batch or streaming: the table's columns and ``_change_type``,
        ``_commit_version``, ``_commit_timestamp``.
    spec : ChangelogSpec
        What the feed declares about itself (row id, row version, capability flags).
    options : Mapping or CdcOptions, optional
        Spark's CDC options (``deduplicationMode``, ``computeUpdates``, the range), as
        strings by Spark's names (any key case; values str, bool or int) or typed as a
        ``CdcOptions``; Spark's defaults when omitted.

    Returns
    -------
    DataFrame
        ``df``'s columns, in order, post-processed.

    Examples
    --------
    >>> from spark_cdc import ChangelogSpec, post_process
    >>> feed = spark.read.format("delta").option("readChangeFeed", "true").load("/t")
    >>> out = post_process(
    ...     feed,
    ...     ChangelogSpec(row_id=["id"]),
    ...     {"deduplicationMode": "netChanges", "computeUpdates": True},
    ... )  # doctest: +SKIP
    """
    opts = parse_options(options.to_options() if isinstance(options, CdcOptions) else options)
    settle_column_functions(df.sparkSession)
    passes, net = planned_passes(spec, opts)
    ranged = restrict_to_range(df, opts)
    if not (passes.any or net):
        return ranged
    checked = refuse_reserved_columns(ranged)
    if reads_a_stream(df):
        if net:
            out = streaming_net_changes(checked, spec, passes, opts.compute_updates)
        else:
            out = streaming_row_level(checked, spec, passes)
        return mark_streaming_rewrite(out)
    return batch_post_process(checked, spec, passes, net, opts.compute_updates)


def planned_passes(
    spec: ChangelogSpec, opts: CdcOptions, source_finds_row_id: bool = False
) -> tuple[RowLevelPasses, bool]:
    """The row-level passes and whether net changes run, after every check that refuses
    the request (in Spark's order); shared with ``ChangelogReader``, which may hand the
    row-level passes to its source and must refuse exactly what this refuses, except that
    a source which finds a row id itself (``source_finds_row_id``) runs update detection
    without one given (and refuses it if the table has none)."""
    passes = required_passes(spec, opts)
    net = (
        opts.deduplication_mode is DeduplicationMode.NET_CHANGES
        and spec.contains_intermediate_changes
    )
    if spec.row_id is None and ((passes.update_detection and not source_finds_row_id) or net):
        needs = "computeUpdates" if passes.update_detection else "net changes (netChanges)"
        raise cdc_error("INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID", flags=needs)
    return passes, net


def required_passes(spec: ChangelogSpec, opts: CdcOptions) -> RowLevelPasses:
    dedupe = opts.deduplication_mode is not DeduplicationMode.NONE
    passes = RowLevelPasses(
        carryover_removal=dedupe and spec.contains_carryover_rows,
        update_detection=opts.compute_updates and spec.represents_update_as_delete_and_insert,
    )
    if passes.update_detection and spec.contains_carryover_rows and not dedupe:
        raise cdc_error("INVALID_CDC_OPTION.UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL")
    return passes


def refuse_reserved_columns(df: DataFrame) -> DataFrame:
    """Fail analysis, naming the column, if an input column uses our helper prefix.

    The schema is only known on the server: every ``__spark_cdc_*`` column is gathered
    into a struct that must be empty, so a clash is a DATATYPE_MISMATCH naming it (and the
    check folds away when there is none).
    """
    reserved = F.struct(df.colRegex(f"`{HELPER_PREFIX}.*`")).cast("struct<>")
    return df.where(reserved.isNull() | F.lit(True))


def restrict_to_range(df: DataFrame, opts: CdcOptions) -> DataFrame:
    bounds: list[Column] = []
    version = F.col(COMMIT_VERSION)
    if opts.starting_version is not None:
        start = F.lit(opts.starting_version)
        bounds.append(version >= start if opts.starting_bound_inclusive else version > start)
    if opts.ending_version is not None:
        end = F.lit(opts.ending_version)
        bounds.append(version <= end if opts.ending_bound_inclusive else version < end)
    stamp = F.col(COMMIT_TIMESTAMP)
    if opts.starting_timestamp is not None:
        start = _timestamp_literal("startingTimestamp", opts.starting_timestamp)
        bounds.append(stamp >= start if opts.starting_bound_inclusive else stamp > start)
    if opts.ending_timestamp is not None:
        end = _timestamp_literal("endingTimestamp", opts.ending_timestamp)
        bounds.append(stamp <= end if opts.ending_bound_inclusive else stamp < end)
    for bound in bounds:
        df = df.where(bound)
    return df


def _timestamp_literal(option: str, text: str) -> Column:
    """The server casts (a zone-less string is in the session time zone); a string that
    passed the client's check but not the server's cast still fails under Spark's class."""
    value = F.lit(text).try_cast("timestamp")
    error = raise_in_query(
        "INVALID_CDC_OPTION.INVALID_TIMESTAMP", option=F.lit(option), value=F.lit(text)
    )
    return F.when(value.isNull(), error).otherwise(value)
