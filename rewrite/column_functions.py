"""PySpark's column functions, kept off a session the server refused.

On their first call PySpark's Connect column functions (``F.col`` and the rest) read
``spark.python.sql.dataFrameDebugging.enabled`` through the process's active session,
which is its first one even when the server refused that one: from then on every
``F.col`` failed with UNAUTHENTICATED, on good sessions too (issue 27; measured on 4.3).
Reading it through the session a plan is built for instead is the same one request PySpark
makes, made where it can succeed; afterwards nothing is read again.
"""

from __future__ import annotations

from typing import Any

from spark_cdc.rewrite import pyspark_internals

DEBUGGING_CONF = "spark.python.sql.dataFrameDebugging.enabled"


def settle_column_functions(session: Any) -> None:
    """Read the setting through ``session`` if nothing has read it yet in this process."""
    if pyspark_internals.debugging_setting_unread():
        value = session.conf.get(DEBUGGING_CONF, "true")
        pyspark_internals.settle_debugging_setting(str(value).lower() == "true")
