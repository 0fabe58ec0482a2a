"""Lets a Spark Connect server discover ``spark_cdc_apply``, the sink ``apply_changes``
writes through (as ``pyspark_delta_changelog`` does ``delta_changelog``): clients on any
Python start it by name; a missing deltalake is named on every use."""

from spark_cdc.server_plugin.dependencies import discovered

DefaultSource = discovered(
    "spark_cdc.server_plugin.sinks.apply.sink", "ApplyChangesSink", "spark_cdc_apply"
)

__all__ = ["DefaultSource"]
