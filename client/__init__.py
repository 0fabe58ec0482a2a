"""spark_cdc: Spark's CDC post-processing for Spark Connect, planned on the client.

    from spark_cdc import ChangelogReader, ChangelogSpec, post_process

``ChangelogReader`` reads a Delta table's change feed through the server's
``delta_changelog`` source; ``post_process`` post-processes any change-feed DataFrame.
Beneath: ``spark_cdc.rewrite`` (the plans) and ``spark_cdc.server_plugin`` (what runs in the
server; it imports neither of the layers above it).

Importing the package arranges two patches of PySpark's Connect client (see
``spark_cdc.compat.hooks`` for why they wait until that client loads): server errors of
ours get their own condition back, and stream starts pass the guard. The public names load
on first use, so a server's Python worker that imports the plugin pays for neither.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from spark_cdc.compat.hooks import when_imported

if TYPE_CHECKING:
    from spark_cdc.changelog_reader import ChangelogReader
    from spark_cdc.connection import ConnectionProblem, connect
    from spark_cdc.rewrite.errors import CdcAnalysisException
    from spark_cdc.rewrite.options import CdcOptions, DeduplicationMode
    from spark_cdc.rewrite.post_process import post_process
    from spark_cdc.rewrite.spec import ChangelogSpec
    from spark_cdc.sources import register_delta_changelog

_EXPORTS = {
    "ChangelogReader": "spark_cdc.changelog_reader",
    "ChangelogSpec": "spark_cdc.rewrite.spec",
    "post_process": "spark_cdc.rewrite.post_process",
    "CdcOptions": "spark_cdc.rewrite.options",
    "DeduplicationMode": "spark_cdc.rewrite.options",
    "CdcAnalysisException": "spark_cdc.rewrite.errors",
    "register_delta_changelog": "spark_cdc.sources",
    "connect": "spark_cdc.connection",
    "ConnectionProblem": "spark_cdc.connection",
}
__all__ = [
    "CdcAnalysisException",
    "CdcOptions",
    "ChangelogReader",
    "ChangelogSpec",
    "ConnectionProblem",
    "DeduplicationMode",
    "connect",
    "post_process",
    "register_delta_changelog",
]


class MissingPySpark(ImportError):
    """PySpark is an extra of this package (``[client]`` or ``[pyspark]``), so an install
    without either has none; said on first use, not at import, so that pytest (which loads
    this package's plugin) and ``spark-cdc --help`` still work."""

    def getCondition(self) -> str:
        return "SPARK_CDC.MISSING_PYSPARK"


def require_pyspark() -> None:
    if importlib.util.find_spec("pyspark") is None:
        raise MissingPySpark(
            f"[SPARK_CDC.MISSING_PYSPARK] spark-cdc-connect needs PySpark's Spark Connect "
            f"client, and this Python ({sys.executable}) has none: install the jar-free "
            "client with `pip install 'spark-cdc-connect[client]'`, or full PySpark with "
            "`pip install 'spark-cdc-connect[pyspark]'`."
        )


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'spark_cdc' has no attribute '{name}'")
    require_pyspark()
    module = importlib.import_module(_EXPORTS[name])
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _convert_server_errors(module: Any) -> None:
    from spark_cdc.compat import server_errors

    if module.__name__.endswith(".core"):
        from spark_cdc.connection import patch_grpc_errors

        server_errors.patch_convert_exception(module)
        patch_grpc_errors(module)
    elif module.__name__.endswith(".query"):
        server_errors.patch_query_exception(module)
    else:
        server_errors.patch_error_log(module)


def _guard_stream_starts(module: Any) -> None:
    writer = module.DataStreamWriter
    start = writer._start_internal
    if getattr(start, "_spark_cdc_guarded", False):
        return

    @functools.wraps(start)
    def guarded_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Imported here, at a start, not when the patch is made: PySpark's Connect client is
        # still loading then, and the guard needs all of it.
        from spark_cdc.stream_guard import start_guarded

        return start_guarded(start, self, *args, **kwargs)

    guarded_start._spark_cdc_guarded = True  # type: ignore[attr-defined]
    writer._start_internal = guarded_start


when_imported("pyspark.sql.connect.client.core", _convert_server_errors)
when_imported("pyspark.sql.connect.streaming.query", _convert_server_errors)
when_imported("pyspark.errors.exceptions.connect", _convert_server_errors)
when_imported("pyspark.sql.connect.streaming.readwriter", _guard_stream_starts)
