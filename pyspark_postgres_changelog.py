"""Lets a Spark Connect server discover ``postgres_changelog`` (see
``pyspark_delta_changelog``): when the server's Python lacks a package the source imports
(adbc-driver-postgresql, pyarrow, numpy), the source is still listed and every read names
the package and its ``pip install``."""

from spark_cdc.server_plugin.dependencies import discovered

DefaultSource = discovered(
    "spark_cdc.server_plugin.postgres.source", "PostgresChangelogSource", "postgres_changelog"
)

__all__ = ["DefaultSource"]
