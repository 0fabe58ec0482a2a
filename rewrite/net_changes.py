"""Net changes: per row id, the net effect of its changes, batch and streaming.

Batch is Spark's plan: a window per row id ordered by (commit version, pre-events before
post-events) finds the first and last event; Spark's (existedBefore, existsAfter) matrix
keeps and relabels them. Streaming runs one stateful operator keyed by row id (see
``rewrite.net_state``): ``transformWithState`` on 4.1+ servers, ``applyInPandasWithState``
with an event-time timeout on 4.0.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql.connect import functions as F
from pyspark.sql.connect import proto
from pyspark.sql.connect.column import Column
from pyspark.sql.connect.dataframe import DataFrame
from pyspark.sql.connect.group import GroupedData
from pyspark.sql.connect.plan import LogicalPlan
from pyspark.sql.connect.window import Window
from pyspark.sql.types import DataType, MapType, StringType, StructType
from spark_cdc.rewrite import net_state
from spark_cdc.rewrite.errors import contract_violation_message, unsupported_net_changes_column
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    FIRST_CHANGE_TYPE,
    HELPERS,
    INSERT,
    LAST_CHANGE_TYPE,
    ROW_COUNT,
    ROW_NUMBER,
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
    row_id_helper,
)
from spark_cdc.rewrite.net_state import POST_EVENTS, PRE_EVENTS
from spark_cdc.rewrite.plan_tree import walk
from spark_cdc.rewrite.row_level import (
    EXACT_JSON_OPTIONS,
    MULTIPLE_CHANGES_SENTENCE,
    RowLevelPasses,
    checked_change_type,
    row_image,
)
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.rewrite.streaming import with_commit_watermark


def batch_net_changes(df: DataFrame, spec: ChangelogSpec, compute_updates: bool) -> DataFrame:
    rank = F.when(checked_change_type().isin(*PRE_EVENTS), F.lit(0)).otherwise(F.lit(1))
    by_row = Window.partitionBy(*[F.col(c) for c in spec.row_id]).orderBy(
        F.col(COMMIT_VERSION).asc(), rank.asc()
    )
    whole = by_row.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    out = df.select(
        "*",
        F.row_number().over(by_row).alias(ROW_NUMBER),
        F.count(F.lit(1)).over(whole).alias(ROW_COUNT),
        F.first(CHANGE_TYPE).over(whole).alias(FIRST_CHANGE_TYPE),
        F.last(CHANGE_TYPE).over(whole).alias(LAST_CHANGE_TYPE),
    )
    existed_before = F.col(FIRST_CHANGE_TYPE).isin(*PRE_EVENTS)
    exists_after = F.col(LAST_CHANGE_TYPE).isin(*POST_EVENTS)
    is_first = F.col(ROW_NUMBER) == 1
    is_last = F.col(ROW_NUMBER) == F.col(ROW_COUNT)
    keep = (
        F.when(~existed_before & ~exists_after, F.lit(False))
        .when(~existed_before, is_last)
        .when(~exists_after, is_first)
        .otherwise(is_first | is_last)
    )
    pre, post = (UPDATE_PREIMAGE, UPDATE_POSTIMAGE) if compute_updates else (DELETE, INSERT)
    both = existed_before & exists_after
    relabel = (
        F.when(~existed_before & is_last, F.lit(INSERT))
        .when(~exists_after & is_first, F.lit(DELETE))
        .when(both & is_first, F.lit(pre))
        .when(both & is_last, F.lit(post))
        .otherwise(F.col(CHANGE_TYPE))
    )
    return out.where(keep).withColumn(CHANGE_TYPE, relabel).drop(*HELPERS)


def streaming_net_changes(
    df: DataFrame, spec: ChangelogSpec, passes: RowLevelPasses, compute_updates: bool
) -> DataFrame:
    """One stateful operator keyed by row id, with the row-level passes folded in."""
    keys = [F.col(c).alias(row_id_helper(i)) for i, c in enumerate(spec.row_id)]
    event = {  # one per field of net_state.Event
        "version": F.col(COMMIT_VERSION),
        "change": checked_change_type(),
        "row": F.to_json(F.struct("*"), EXACT_JSON_OPTIONS),
        "image": _carryover_image(spec, passes),
        "commit_ms": F.unix_millis(F.col(COMMIT_TIMESTAMP)),
    }
    # _commit_timestamp goes along: it carries the watermark the event-time timers need.
    operator_input = with_commit_watermark(df).select(
        *keys, *[event[name].alias(name) for name in net_state.Event._fields], COMMIT_TIMESTAMP
    )
    rules = net_state.NetRules(
        carryover_removal=passes.carryover_removal,
        by_row_version=spec.row_version is not None,
        update_detection=passes.update_detection,
        compute_updates=compute_updates,
        multiple_changes_message=contract_violation_message(
            "UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION", MULTIPLE_CHANGES_SENTENCE
        ),
    )
    plan = NetChangesRelation(operator_input, df, rules, len(spec.row_id))
    return DataFrame(plan, df.sparkSession)


def _carryover_image(spec: ChangelogSpec, passes: RowLevelPasses) -> Column:
    if not passes.carryover_removal:
        return F.lit(None).cast("string")
    if spec.row_version is not None:
        version = F.col(spec.row_version)
        return F.when(version.isNotNull(), F.to_json(F.struct(version), EXACT_JSON_OPTIONS))
    return row_image(F.struct("*"))


class NetChangesRelation(LogicalPlan):
    """The stateful operator and the decoding of its JSON rows, planned when first sent.

    Both stateful APIs need the output schema up front, and decoding the rows needs the
    input's schema: only the server knows it. Asking at ``post_process`` time would cost a
    round trip per plan built, so this node asks once, when the plan is first sent (which
    is a round trip anyway), and which API to use is decided then too.
    """

    def __init__(
        self, operator_input: DataFrame, source: DataFrame, rules: net_state.NetRules, keys: int
    ) -> None:
        super().__init__(operator_input._plan)
        self._source = source._plan
        self._spark = operator_input.sparkSession
        self._rules = rules
        self._keys = [row_id_helper(i) for i in range(keys)]
        self._resolved: DataFrame | None = None
        self._uses_transform_with_state = False

    @property
    def uses_transform_with_state(self) -> bool:
        self.resolve()
        return self._uses_transform_with_state

    def resolve(self) -> DataFrame:
        if self._resolved is None:
            schema = DataFrame(self._source, self._spark).schema
            _refuse_non_string_map_keys(schema)
            self._uses_transform_with_state = server_has_transform_with_state(self._spark)
            out = _stateful(
                DataFrame(self._child, self._spark),
                self._keys,
                self._rules,
                self._uses_transform_with_state,
            )
            # Decode once into a struct, then pick its fields: Spark keeps the two projections
            # apart rather than parse the JSON once per column.
            decoded = out.select(
                F.from_json(F.col(net_state.ROW), schema, EXACT_JSON_OPTIONS).alias(net_state.ROW),
                net_state.CHANGE,
            )
            row = F.col(net_state.ROW)
            self._resolved = decoded.select(
                *[
                    F.col(net_state.CHANGE).alias(f.name)
                    if f.name == CHANGE_TYPE
                    else row.getField(f.name).alias(f.name)
                    for f in schema.fields
                ]
            )
        return self._resolved

    def plan(self, session: Any) -> proto.Relation:
        relation = proto.Relation()
        relation.CopyFrom(self.resolve()._plan.plan(session))
        relation.common.plan_id = self._plan_id
        return relation


def _stateful(
    df: DataFrame, keys: list[str], rules: net_state.NetRules, transform_with_state: bool
) -> DataFrame:
    from pyspark import cloudpickle

    # The server may not have this package: ship the operator's code with the plan.
    cloudpickle.register_pickle_by_value(sys.modules[net_state.__name__])
    grouped = df.groupBy(*keys)
    if transform_with_state:
        return grouped.transformWithState(
            net_state.tws_processor(rules), net_state.OUTPUT_SCHEMA, "Append", "EventTime"
        )
    from pyspark.sql.streaming.state import GroupStateTimeout

    return grouped.applyInPandasWithState(
        net_state.pandas_function(rules),
        net_state.OUTPUT_SCHEMA,
        net_state.PANDAS_STATE_SCHEMA,
        "append",
        GroupStateTimeout.EventTimeTimeout,
    )


def server_has_transform_with_state(spark: Any) -> bool:
    if not hasattr(GroupedData, "transformWithState"):  # a 4.0 client
        return False
    major, minor = (int(part) for part in spark.version.split(".")[:2])
    return (major, minor) >= (4, 1)


def _refuse_non_string_map_keys(schema: StructType) -> None:
    for field in schema.fields:
        if _has_non_string_map_key(field.dataType):
            raise unsupported_net_changes_column(field.name, field.dataType.simpleString())


def _has_non_string_map_key(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return not isinstance(data_type.keyType, StringType) or _has_non_string_map_key(
            data_type.valueType
        )
    if isinstance(data_type, StructType):
        return any(_has_non_string_map_key(f.dataType) for f in data_type.fields)
    element = getattr(data_type, "elementType", None)
    return element is not None and _has_non_string_map_key(element)


def uses_transform_with_state(root: LogicalPlan) -> bool:
    """Whether a plan holds a streaming net changes operator run by ``transformWithState``."""
    return any(
        isinstance(node, NetChangesRelation) and node.uses_transform_with_state
        for node in walk(root)
    )
