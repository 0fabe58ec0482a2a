"""Lets a Spark Connect server discover ``delta_changelog``: Spark looks for top-level
``pyspark_*`` modules that define ``DefaultSource`` in the server's Python environment.
When the server's Python lacks a package the source imports (pyarrow, numpy), the source is
still listed and every read names the package and its ``pip install``."""

from spark_cdc.server_plugin.dependencies import discovered

DefaultSource = discovered(
    "spark_cdc.server_plugin.delta.source", "DeltaChangelogSource", "delta_changelog"
)

__all__ = ["DefaultSource"]
