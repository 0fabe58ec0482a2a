"""``postgres_slots``: a database's logical replication slots, and the WAL each keeps on the
database's disk; with ``drop``, one slot dropped.

A slot holds the log from its restart point on until a reader confirms it, so a stream that
stopped for good keeps growing the database's ``pg_wal`` until the disk is full. This is
what ``spark-cdc slots`` shows and drops, through the server (only it may reach the
database, and only it holds the credentials). The database is reached with the
``postgres_changelog`` source's connection options; the drop runs in the read's one task,
and refuses a slot a reader holds (``SLOT_ACTIVE``) rather than cut it off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from spark_cdc.server_plugin import cdc_options
from spark_cdc.server_plugin.dependencies import ADBC_POSTGRESQL, require
from spark_cdc.server_plugin.errors import error, internal_errors
from spark_cdc.server_plugin.postgres.catalog import CONFIRMED_LSN, RETAINED_WAL
from spark_cdc.server_plugin.postgres.connection import session
from spark_cdc.server_plugin.postgres.options import (
    CONNECTION_OPTIONS,
    connection_options,
    refuse_secrets,
)

SLOTS_SOURCE = "postgres_slots"
SCHEMA = StructType(
    [
        StructField("slot_name", StringType(), False),
        StructField("plugin", StringType()),
        StructField("database", StringType()),
        StructField("active", BooleanType()),
        StructField("confirmed_lsn", LongType()),
        StructField("retained_wal_bytes", LongType()),
        StructField("dropped", BooleanType(), False),
    ]
)
_SLOTS = (
    "SELECT slot_name::text, plugin::text, database::text, active, "
    f"{CONFIRMED_LSN} AS confirmed_lsn, {RETAINED_WAL} AS retained_wal_bytes "
    "FROM pg_replication_slots WHERE slot_type = 'logical'"
)


class PostgresSlotsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SLOTS_SOURCE

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        require(ADBC_POSTGRESQL, SLOTS_SOURCE)
        with internal_errors("replication slots", family="POSTGRES_CHANGELOG"):
            refuse_secrets(self.options)
            given = cdc_options.canonical(
                {k: v for k, v in self.options.items() if k.lower() != "path"},
                (*CONNECTION_OPTIONS, "drop"),
                SLOTS_SOURCE,
            )
            return _SlotsReader(connection_options(given), given.get("drop"))


class _SlotsReader(DataSourceReader):
    def __init__(self, connection: dict[str, str], drop: str | None) -> None:
        self.connection = connection
        self.drop = drop

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        named = internal_errors("replication slots", family="POSTGRES_CHANGELOG")
        with named, session(self.connection) as s:
            if self.drop is None:
                rows = s.rows(f"{_SLOTS} ORDER BY slot_name", "list replication slots")
                yield from ((*row.values(), False) for row in rows)
                return
            rows = s.rows(f"{_SLOTS} AND slot_name = $1", f"look up slot {self.drop}", (self.drop,))
            if not rows:
                raise error("POSTGRES_CHANGELOG.SLOT_NOT_FOUND", slot=self.drop)
            if rows[0]["active"]:
                raise error("POSTGRES_CHANGELOG.SLOT_ACTIVE", slot=self.drop)
            s.rows(
                "SELECT pg_drop_replication_slot($1)::text AS dropped",
                f"drop replication slot {self.drop}",
                (self.drop,),
            )
            yield (*rows[0].values(), True)
