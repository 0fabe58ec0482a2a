"""spark_cdc: Spark's CDC post-processing for Spark Connect, planned on the client.

    import spark_cdc

    feed = spark_cdc.read(spark).option("rowId", "id").load("/data/orders")
    stream = spark_cdc.readStream(spark).option("rowId", "id").changes("sales.orders")

``read``/``readStream`` read a table's change feed (a Delta table's through the server's
``delta_changelog`` source), shaped as Spark's ``spark.read``/``spark.readStream``;
``post_process`` post-processes any change-feed DataFrame.
Beneath: ``spark_cdc.rewrite`` (the plans) and ``spark_cdc.server_plugin`` (what runs in the
server; it imports neither of the layers above it).

Importing the package arranges three patches of PySpark's Connect client (see
``spark_cdc.compat.hooks`` for why they wait until that client loads): server errors of
ours get their own condition back, stream starts pass the guard, and closing a session
cannot deadlock a query (``compat.release_pool``). The public names load
on first use, so a server's Python worker that imports the plugin pays for neither.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from spark_cdc.compat.hooks import when_imported
from spark_cdc.server_plugin.conditions import ConditionError

if TYPE_CHECKING:
    from spark_cdc.apply import AppliedChanges, applied_batches, apply_changes
    from spark_cdc.apply_snapshots import AppliedSnapshot, apply_changes_from_snapshot
    from spark_cdc.changelog_reader import (
        ChangelogReader,
        ChangelogStreamReader,
        read,
        readStream,
    )
    from spark_cdc.connection import ConnectionProblem, connect
    from spark_cdc.rewrite.envelopes import decode_changes
    from spark_cdc.rewrite.errors import CdcAnalysisException
    from spark_cdc.rewrite.options import CdcOptions, DeduplicationMode
    from spark_cdc.rewrite.post_process import post_process
    from spark_cdc.rewrite.snapshot_diff import snapshot_changes
    from spark_cdc.rewrite.spec import ChangelogSpec
    from spark_cdc.sources import register_delta_changelog, register_iceberg_changelog

_EXPORTS = {
    "read": "spark_cdc.changelog_reader",
    "readStream": "spark_cdc.changelog_reader",
    "ChangelogReader": "spark_cdc.changelog_reader",
    "ChangelogStreamReader": "spark_cdc.changelog_reader",
    "ChangelogSpec": "spark_cdc.rewrite.spec",
    "post_process": "spark_cdc.rewrite.post_process",
    "snapshot_changes": "spark_cdc.rewrite.snapshot_diff",
    "decode_changes": "spark_cdc.rewrite.envelopes",
    "CdcOptions": "spark_cdc.rewrite.options",
    "DeduplicationMode": "spark_cdc.rewrite.options",
    "CdcAnalysisException": "spark_cdc.rewrite.errors",
    "register_delta_changelog": "spark_cdc.sources",
    "register_iceberg_changelog": "spark_cdc.sources",
    "apply_changes": "spark_cdc.apply",
    "AppliedChanges": "spark_cdc.apply",
    "applied_batches": "spark_cdc.apply",
    "apply_changes_from_snapshot": "spark_cdc.apply_snapshots",
    "AppliedSnapshot": "spark_cdc.apply_snapshots",
    "connect": "spark_cdc.connection",
    "ConnectionProblem": "spark_cdc.connection",
}
__all__ = [
    "AppliedChanges",
    "AppliedSnapshot",
    "CdcAnalysisException",
    "CdcOptions",
    "ChangelogReader",
    "ChangelogSpec",
    "ChangelogStreamReader",
    "ConnectionProblem",
    "DeduplicationMode",
    "applied_batches",
    "apply_changes",
    "apply_changes_from_snapshot",
    "connect",
    "decode_changes",
    "post_process",
    "read",
    "readStream",
    "register_delta_changelog",
    "register_iceberg_changelog",
    "snapshot_changes",
]


class MissingPySpark(ConditionError, ImportError):
    """PySpark is an extra of this package (``[client]`` or ``[pyspark]``), so an install
    without either has none; said on first use, not at import, so that pytest (which loads
    this package's plugin) and ``spark-cdc --help`` still work."""


def require_pyspark() -> None:
    if importlib.util.find_spec("pyspark") is None:
        raise MissingPySpark("SPARK_CDC.MISSING_PYSPARK", python=sys.executable)


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
        from spark_cdc.connection import bound_lost_connection_retries, patch_grpc_errors

        server_errors.patch_convert_exception(module)
        patch_grpc_errors(module)
        bound_lost_connection_retries(module)
    elif module.__name__.endswith(".query"):
        server_errors.patch_query_exception(module)
    else:
        server_errors.patch_error_log(module)


def _close_sessions_safely(module: Any) -> None:
    from spark_cdc.compat import release_pool

    release_pool.patch(module)


def _guard_stream_starts(module: Any) -> None:
    from spark_cdc.rewrite import pyspark_internals

    writer = module.DataStreamWriter
    start = pyspark_internals.stream_start(writer)
    if getattr(start, "_spark_cdc_guarded", False):
        return

    @functools.wraps(start)
    def guarded_start(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Imported here, at a start, not when the patch is made: PySpark's Connect client is
        # still loading then, and the guard needs all of it.
        from spark_cdc.stream_guard import start_guarded

        return start_guarded(start, self, *args, **kwargs)

    guarded_start._spark_cdc_guarded = True  # type: ignore[attr-defined]
    pyspark_internals.replace_stream_start(writer, guarded_start)


when_imported("pyspark.sql.connect.client.core", _convert_server_errors)
when_imported("pyspark.sql.connect.streaming.query", _convert_server_errors)
when_imported("pyspark.errors.exceptions.connect", _convert_server_errors)
when_imported("pyspark.sql.connect.streaming.readwriter", _guard_stream_starts)
when_imported("pyspark.sql.connect.client.reattach", _close_sessions_safely)
