"""Lets a Spark Connect server discover ``postgres_slots`` (see
``pyspark_postgres_changelog``): a database's replication slots, listed or dropped."""

from spark_cdc.server_plugin.dependencies import discovered

DefaultSource = discovered(
    "spark_cdc.server_plugin.postgres.slots", "PostgresSlotsSource", "postgres_slots"
)

__all__ = ["DefaultSource"]
