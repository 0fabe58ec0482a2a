"""Several tables as one feed: their columns by name (a column of several tables once, each
table's rows NULL in the columns it lacks), then ``_table`` (``schema.table``), then the
changelog columns. One table's feed is its own changelog, without ``_table``.

A column two tables give different types cannot be one column, and is refused by name
(``COLUMN_TYPES_DIFFER``), as is a table's own column named ``_table``; read such tables as
feeds of their own.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType
from spark_cdc.server_plugin.changefeed.changelog_schema import changelog_schema
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.postgres.catalog import TableInfo

TABLE_COLUMN = "_table"


def feed_schema(infos: list[TableInfo]) -> StructType:
    if len(infos) == 1:
        return changelog_schema(infos[0].schema)
    fields: dict[str, tuple[StructField, str]] = {}
    for info in infos:
        for field in info.schema:
            if field.name == TABLE_COLUMN:
                raise error("POSTGRES_CHANGELOG.TABLE_COLUMN_TAKEN", table=info.qualified)
            known = fields.setdefault(field.name, (field, info.qualified))
            if known[0].dataType != field.dataType:
                raise error(
                    "POSTGRES_CHANGELOG.COLUMN_TYPES_DIFFER",
                    column=field.name,
                    first=known[1],
                    firstType=known[0].dataType.simpleString(),
                    second=info.qualified,
                    secondType=field.dataType.simpleString(),
                )
    columns = [field for field, _ in fields.values()]
    return changelog_schema(StructType([*columns, StructField(TABLE_COLUMN, StringType())]))


def table_schema(info: TableInfo) -> StructType:
    """The rows one table gives, before ``in_feed``."""
    return changelog_schema(info.schema)


def in_feed(rows: pa.Table | pa.RecordBatch, info: TableInfo, output: pa.Schema) -> pa.Table:
    """One table's changelog ``rows`` as the feed's (``output``)."""
    table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
    if TABLE_COLUMN not in output.names:
        return table
    count = table.num_rows
    arrays = [
        pa.repeat(pa.scalar(info.qualified), count)
        if field.name == TABLE_COLUMN
        else table.column(field.name)
        if field.name in table.column_names
        else pa.nulls(count, field.type)
        for field in output
    ]
    return pa.Table.from_arrays(arrays, schema=output)
