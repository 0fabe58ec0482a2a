"""Lets a Spark Connect server discover ``iceberg_changelog``: Spark looks for top-level
``pyspark_*`` modules that define ``DefaultSource`` in the server's Python environment.
When the server's Python lacks a package the source imports (pyiceberg, pyarrow, numpy),
the source is still listed and every read names the package and its ``pip install``."""

try:
    from spark_cdc.server_plugin.iceberg.source import IcebergChangelogSource as DefaultSource
except ModuleNotFoundError as error:
    from spark_cdc.server_plugin.dependencies import for_missing_module, unavailable_source

    needed = for_missing_module(error)
    if needed is None:
        raise
    DefaultSource = unavailable_source(  # type: ignore[misc,assignment]  # the stand-in
        "iceberg_changelog", needed, f"has no '{needed.package}'"
    )

__all__ = ["DefaultSource"]
