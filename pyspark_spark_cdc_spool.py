"""Lets a Spark Connect server discover ``spark_cdc_spool``, the sink ``spark-cdc tail``
streams into (``server_plugin.sinks.spool``)."""

from spark_cdc.server_plugin.sinks.spool import SpoolSink as DefaultSource

__all__ = ["DefaultSource"]
