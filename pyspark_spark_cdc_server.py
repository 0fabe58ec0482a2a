"""Lets a Spark Connect server discover ``spark_cdc_server``, which tells a client the
server's Python and its installed package's protocol (``server_plugin.server_info``)."""

from spark_cdc.server_plugin.server_info import ServerInfoSource as DefaultSource

__all__ = ["DefaultSource"]
