"""Shipping this package's sources and sinks from a client session, for servers that do not
have it installed: the class travels by value (with this package's code), so the server
needs only its imports (pyspark, pyarrow, deltalake), and its Python must be the client's
minor version (``rewrite.server_code`` checks that first)."""

from __future__ import annotations

import sys
from typing import Any


def register_by_value(spark: Any, source: type) -> None:
    """Spark 4.1+ lets a session's registration shadow an installed source; 4.0 refuses,
    and then the server's installed copy is the one used."""
    from pyspark import cloudpickle
    from pyspark.errors import AnalysisException

    cloudpickle.register_pickle_by_value(sys.modules[__package__])
    try:
        spark.dataSource.register(source)
    except AnalysisException as error:
        if error.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
