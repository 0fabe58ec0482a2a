"""Lets a Spark Connect server discover ``delta_changelog``: Spark looks for top-level
``pyspark_*`` modules that define ``DefaultSource`` in the server's Python environment."""

from spark_cdc.server_plugin.delta.source import DeltaChangelogSource as DefaultSource

__all__ = ["DefaultSource"]
