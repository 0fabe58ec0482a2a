"""Registering this package's data sources from a client session, for servers that do not
have it installed: the classes travel by value, so the server needs only their imports
(pyspark, pyarrow and, for ``delta_changelog``, deltalake)."""

from __future__ import annotations

import sys
from typing import Any


def register_by_value(spark: Any, source: type) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules["server_plugin"])
    spark.dataSource.register(source)
