"""Shipping this package's code from a client session, for servers that do not have it
installed: data sources and ``apply_changes``' functions travel by value, so the server
needs only their imports (pyspark, pyarrow and deltalake)."""

from __future__ import annotations

import sys
from typing import Any


def ship_by_value() -> None:
    """This package's functions and classes, pickled for the server, carry their code."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__package__])


def register_by_value(spark: Any, source: type) -> None:
    """Spark 4.1+ lets a session's registration shadow an installed source; 4.0 refuses,
    and then the server's installed copy is the one used."""
    from pyspark.errors import AnalysisException

    ship_by_value()
    try:
        spark.dataSource.register(source)
    except AnalysisException as error:
        if error.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
