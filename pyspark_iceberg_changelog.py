"""Lets a Spark Connect server discover ``iceberg_changelog`` (as ``pyspark_delta_changelog``
does ``delta_changelog``); a missing pyiceberg, pyarrow or numpy is named on every read."""

from spark_cdc.server_plugin.dependencies import discovered

DefaultSource = discovered(
    "spark_cdc.server_plugin.iceberg.source", "IcebergChangelogSource", "iceberg_changelog"
)

__all__ = ["DefaultSource"]
