"""The rules of a schema given to a change-feed read, as models: the source takes exactly
the schemas that are some of the feed's columns with the feed's types and nullable where
the feed is (``changelog_schema.projection``), and the client reads a DDL string's column
names as Spark's parser does (``read_schema.column_names``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from spark_cdc.read_schema import column_names, with_range_columns
from spark_cdc.server_plugin.changefeed.changelog_schema import (
    as_nullable,
    changelog_schema,
    projection,
)
from spark_cdc.server_plugin.errors import ChangelogSourceError

TYPES: list[DataType] = [
    LongType(),
    StringType(),
    DoubleType(),
    ArrayType(StringType(), False),
    StructType([StructField("x", IntegerType(), False), StructField("y", StringType())]),
]
FEED = changelog_schema(
    StructType(
        [StructField(f"c{i}", t, nullable=i % 2 == 1) for i, t in enumerate(TYPES)]
        + [StructField("weird name`", LongType())]
    )
)


@st.composite
def given_schemas(draw: st.DrawFn) -> tuple[StructType, bool]:
    """A schema a user might give, and whether it is some of the feed's columns as the
    rules allow: drawn from the feed's, then perhaps broken one of the ways a user does."""
    fields = draw(st.lists(st.sampled_from(FEED.fields), min_size=1, unique=True))
    fields = [
        StructField(f.name, as_nullable(f.dataType) if draw(st.booleans()) else f.dataType, True)
        if draw(st.booleans())
        else f
        for f in fields
    ]
    how = draw(st.sampled_from(["kept", "unknown", "case", "type", "twice", "not null"]))
    ok = how == "kept"
    at = draw(st.integers(0, len(fields) - 1))
    field = fields[at]
    if how == "unknown":
        fields[at] = StructField(field.name + "_x", field.dataType)
    elif how == "case":
        ok = field.name.upper() == field.name
        fields[at] = StructField(field.name.upper(), field.dataType, field.nullable)
    elif how == "type":
        other = IntegerType() if field.dataType != IntegerType() else LongType()
        fields[at] = StructField(field.name, other, field.nullable)
    elif how == "twice":
        fields.append(field)
    elif how == "not null":  # NOT NULL everywhere, nested fields too
        own = FEED[field.name]
        tight = _not_null(own.dataType)
        ok = not own.nullable and tight == own.dataType
        fields[at] = StructField(field.name, tight, False)
    return StructType(fields), ok


def _not_null(data_type: DataType) -> DataType:
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, _not_null(f.dataType), False) for f in data_type])
    if isinstance(data_type, ArrayType):
        return ArrayType(_not_null(data_type.elementType), False)
    return data_type


@given(given_schemas())
def test_a_schema_is_taken_exactly_when_it_is_some_of_the_feeds_columns(
    case: tuple[StructType, bool],
) -> None:
    schema, ok = case
    if as_nullable(schema) == as_nullable(FEED):
        assert projection(schema, FEED, "t") is None  # the feed's own: nothing to select
        return
    if ok:
        assert projection(schema, FEED, "t") == schema
        return
    with pytest.raises(ChangelogSourceError) as refused:
        projection(schema, FEED, "t")
    assert refused.value.condition == "INVALID_CHANGELOG_SCHEMA.READ_SCHEMA"


def _ddl(field: StructField, colon: bool) -> str:
    name = "`" + field.name.replace("`", "``") + "`"
    text = f"{name}{':' if colon else ''} {field.dataType.simpleString()}"
    return text + ("" if field.nullable else " NOT NULL") + " COMMENT 'a, b'"


@given(st.lists(st.sampled_from(FEED.fields), min_size=1, unique=True), st.booleans())
def test_a_ddl_strings_names_are_its_columns(fields: list[StructField], colon: bool) -> None:
    ddl = ", ".join(_ddl(f, colon) for f in fields)
    assert column_names(ddl) == [f.name for f in fields]
    assert column_names(f"struct<{ddl}>") == [f.name for f in fields]


def test_plain_ddl_names_and_the_range_columns_added() -> None:
    ddl = "id BIGINT, amounts ARRAY<DECIMAL(10, 2)>, m MAP<STRING, INT>, name: string"
    assert column_names(ddl) == ["id", "amounts", "m", "name"]
    added = with_range_columns("id BIGINT, _commit_version BIGINT", ["_commit_version"])
    assert added == "id BIGINT, _commit_version BIGINT"
    added = with_range_columns("id BIGINT", ["_commit_version", "_commit_timestamp"])
    assert added == "id BIGINT, `_commit_version` bigint, `_commit_timestamp` timestamp"
    struct = StructType([StructField("id", LongType())])
    assert with_range_columns(struct, ["_commit_version"]).names == ["id", "_commit_version"]
