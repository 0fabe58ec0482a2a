"""``spark_cdc_server``: what this server's installed package is, for a client deciding how
to start server-side work (``spark_cdc.rewrite.server_code``).

A client on another Python minor version than the server's cannot run code it pickles
there (PySpark refuses the worker), so it runs the server's installed code by name
instead: the sources and sinks, and the net changes operator by reference. That needs the
server's copy to take what this client sends: ``PROTOCOL`` names that shape, and changes
whenever a source's, a sink's or the operator's parameters do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

PROTOCOL = 8
INFO_SOURCE = "spark_cdc_server"
INFO_SCHEMA = "python string, protocol int, package string"


def python_version() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-cdc-connect")
    except PackageNotFoundError:  # a checkout on the path
        return "unknown"


class ServerInfoSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return INFO_SOURCE

    def schema(self) -> str:
        return INFO_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _InfoReader()


class _InfoReader(DataSourceReader):
    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, str]]:
        yield python_version(), PROTOCOL, package_version()
