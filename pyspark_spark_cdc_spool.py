"""Lets a Spark Connect server discover ``spark_cdc_spool``, the sink ``spark-cdc tail``
streams into (``server_plugin.spool``)."""

from spark_cdc.server_plugin.spool import SpoolSink as DefaultSource

__all__ = ["DefaultSource"]
