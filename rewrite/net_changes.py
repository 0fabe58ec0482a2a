"""Streaming net changes: per row id, the net effect of its changes (batch: ``rewrite.batch``).

One stateful operator, ``applyInPandasWithState`` with an event-time timeout on every
server, keyed by a bucket of row ids (see ``rewrite.net_state`` for why, with the
measurements).
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql.connect import functions as F
from pyspark.sql.connect import proto
from pyspark.sql.connect.plan import LogicalPlan
from pyspark.sql.types import (
    DataType,
    DoubleType,
    FloatType,
    IntegralType,
    MapType,
    StringType,
    StructType,
)
from spark_cdc.rewrite import net_state
from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.names import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    METADATA_COLUMNS,
)
from spark_cdc.rewrite.pyspark_internals import child_of, dataframe, plan_id_of, plan_of
from spark_cdc.rewrite.row_level import (
    EXACT_JSON_OPTIONS,
    RowLevelPasses,
    checked_change_type,
)
from spark_cdc.rewrite.server_code import server_facts, uses_installed_code
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.rewrite.streaming import with_commit_watermark
from spark_cdc.server_plugin import conditions, errors


def streaming_net_changes(
    df: DataFrame, spec: ChangelogSpec, passes: RowLevelPasses, compute_updates: bool
) -> DataFrame:
    """One stateful operator keyed by a bucket of row ids, the row-level passes folded in."""
    rules = net_state.NetRules(
        carryover_removal=passes.carryover_removal,
        by_row_version=spec.row_version is not None,
        update_detection=passes.update_detection,
        compute_updates=compute_updates,
    )
    return dataframe(NetChangesRelation(df, spec, rules), df.sparkSession)


class NetChangesRelation(LogicalPlan):
    """The stateful operator and the decoding of its JSON rows, planned when first sent.

    The operator's input (the row id's identity and bucket) and its output (decoding the
    rows) depend on the input's schema, and the stateful API needs the output schema up
    front: only the server knows it. Asking at ``post_process`` time would cost a round
    trip per plan built, so this node asks once, when the plan is first sent (which is a
    round trip anyway). Then too it learns which code runs the operator
    (``rewrite.server_code``): the server's installed copy, referenced by name, or this
    module shipped by value.
    """

    def __init__(self, source: DataFrame, spec: ChangelogSpec, rules: net_state.NetRules) -> None:
        super().__init__(plan_of(source))
        self._spark = source.sparkSession
        self._row_id = list(spec.row_id or ())
        self._row_version = spec.row_version
        self._rules = rules
        self._resolved: DataFrame | None = None
        self._installed_python: str | None = None  # the server's, when its copy runs

    def resolve(self) -> DataFrame:
        if self._resolved is None:
            child = child_of(self)
            assert child is not None
            source = dataframe(child, self._spark)
            schema = source.schema
            _refuse_non_string_map_keys(schema)
            if uses_installed_code(self._spark, "Streaming net changes"):
                self._installed_python = server_facts(self._spark).python
            operator_input = _operator_input(source, schema, self._row_id, self._row_version)
            out = _stateful(operator_input, self._rules, self._installed_python is None)
            self._resolved = _decoded(out, schema)
        return self._resolved

    def plan(self, session: Any) -> proto.Relation:
        relation = proto.Relation()
        relation.CopyFrom(plan_of(self.resolve()).plan(session))
        relation.common.plan_id = plan_id_of(self)
        if self._installed_python is not None:
            _run_installed(relation, self._rules, self._installed_python)
        return relation


def _run_installed(message: Any, rules: net_state.NetRules, python: str) -> None:
    """The operator's function in ``message`` (a plan) as a reference to the server's
    installed ``net_state``, for the server's Python: pickled by the standard library
    (functions by name, never by value), at protocol 4, which Python 3.10-3.13 all read.
    PySpark checks the plan's Python version against its worker's; the code it then runs
    is the worker's own, so the version the client runs does not matter."""
    import pickle

    from pyspark.sql.connect import proto as connect_proto
    from pyspark.util import PythonEvalType

    if isinstance(message, connect_proto.PythonUDF):
        if message.eval_type == PythonEvalType.SQL_GROUPED_MAP_PANDAS_UDF_WITH_STATE:
            output_type = pickle.loads(message.command)[1]
            function = net_state.pandas_function(rules)
            message.command = pickle.dumps((function, output_type), protocol=4)
            message.python_ver = python
        return
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        for item in [value] if hasattr(value, "ListFields") else value:  # one, or repeated
            if hasattr(item, "ListFields"):  # a map's values may be scalars
                _run_installed(item, rules, python)


def _operator_input(
    df: DataFrame, schema: StructType, row_id: list[str], row_version: str | None
) -> DataFrame:
    """The operator's rows: bucket, row id identity, what ordering and the row-level passes
    need, and the row as JSON text (its data columns apart from its commit metadata, so
    that comparing two rows' images needs no second JSON of every row)."""
    types = {f.name: f.dataType for f in schema.fields}
    ids = [_grouping_value(F.col(c), types.get(c)) for c in row_id]
    columns = {
        net_state.BUCKET: F.pmod(F.hash(*ids), F.lit(net_state.BUCKETS)),
        net_state.ID: _identity(ids, [types.get(c) for c in row_id]),
        net_state.VERSION: F.col(COMMIT_VERSION),
        net_state.CHANGE: checked_change_type(),
        net_state.COMMIT_MS: F.unix_millis(F.col(COMMIT_TIMESTAMP)),
        net_state.DATA: F.to_json(F.struct("*").dropFields(*METADATA_COLUMNS), EXACT_JSON_OPTIONS),
        net_state.META: F.to_json(
            F.struct(F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP)), EXACT_JSON_OPTIONS
        ),
    }
    if row_version is not None:
        version = F.col(row_version)
        image = F.when(version.isNotNull(), F.to_json(F.struct(version), EXACT_JSON_OPTIONS))
        columns[net_state.IMAGE] = image
    # _commit_timestamp goes along: it carries the watermark the event-time timeout needs.
    return with_commit_watermark(df).select(
        *[column.alias(name) for name, column in columns.items()], COMMIT_TIMESTAMP
    )


def _grouping_value(column: Column, data_type: DataType | None) -> Column:
    """The value Spark groups by: -0.0 is 0.0 (Spark's NormalizeFloatingNumbers), so the
    identity text and the hash agree with the batch window's partitioning."""
    if isinstance(data_type, (FloatType, DoubleType)):
        return F.when(column == 0, F.lit(0.0).cast(data_type)).otherwise(column)
    return column


def _identity(ids: list[Column], types: list[DataType | None]) -> Column:
    """The row id as text, equal exactly when the ids are: one integral or string column
    is its own text (cheaper than JSON); anything else is the JSON of the id's columns."""
    if len(ids) == 1 and isinstance(types[0], (IntegralType, StringType)):
        return ids[0].cast("string")
    return F.to_json(F.struct(*ids), EXACT_JSON_OPTIONS)


def _stateful(df: DataFrame, rules: net_state.NetRules, ship: bool) -> DataFrame:
    from pyspark import cloudpickle
    from pyspark.sql.streaming.state import GroupStateTimeout

    # ``ship``: the server has no copy of this package, so the operator's code goes with the
    # plan, and the registry it raises its errors through (``net_state.error``).
    if ship:
        for module in (net_state, conditions, errors):
            cloudpickle.register_pickle_by_value(sys.modules[module.__name__])
    return df.groupBy(net_state.BUCKET).applyInPandasWithState(
        net_state.pandas_function(rules),
        net_state.OUTPUT_SCHEMA,
        net_state.STATE_SCHEMA,
        "append",
        GroupStateTimeout.EventTimeTimeout,
    )


def _decoded(out: DataFrame, schema: StructType) -> DataFrame:
    """The input's columns, in order, back from the operator's JSON texts."""
    data_schema = StructType([f for f in schema.fields if f.name not in METADATA_COLUMNS])
    meta_schema = StructType(
        [f for f in schema.fields if f.name in (COMMIT_VERSION, COMMIT_TIMESTAMP)]
    )
    # Decode once into a struct, then pick its fields: Spark keeps the two projections
    # apart rather than parse the JSON once per column.
    decoded = out.select(
        F.from_json(F.col(net_state.DATA), data_schema, EXACT_JSON_OPTIONS).alias(net_state.DATA),
        F.from_json(F.col(net_state.META), meta_schema, EXACT_JSON_OPTIONS).alias(net_state.META),
        net_state.CHANGE,
    )

    def column(name: str) -> Column:
        if name == CHANGE_TYPE:
            return F.col(net_state.CHANGE)
        if name in (COMMIT_VERSION, COMMIT_TIMESTAMP):
            return F.col(net_state.META).getField(name)
        return F.col(net_state.DATA).getField(name)

    return decoded.select(*[column(f.name).alias(f.name) for f in schema.fields])


def _refuse_non_string_map_keys(schema: StructType) -> None:
    for field in schema.fields:
        if _has_non_string_map_key(field.dataType):
            raise cdc_error(
                "UNSUPPORTED_FEATURE.CDC_NET_CHANGES_MAP_KEY",
                column=field.name,
                dataType=field.dataType.simpleString(),
            )


def _has_non_string_map_key(data_type: DataType) -> bool:
    if isinstance(data_type, MapType):
        return not isinstance(data_type.keyType, StringType) or _has_non_string_map_key(
            data_type.valueType
        )
    if isinstance(data_type, StructType):
        return any(_has_non_string_map_key(f.dataType) for f in data_type.fields)
    element = getattr(data_type, "elementType", None)
    return element is not None and _has_non_string_map_key(element)
