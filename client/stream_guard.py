"""The stream-start guard: every streaming start passes it, and a stream holding one of our
rewrites is checked and prepared in four named steps before the start command is sent.

1. ``refuse_output_mode``: Update/Complete re-emit revised groups, which a change feed
   never has. Spark refuses them for its native CDC plans, but a 4.0/4.1 server accepts
   ``outputMode("update")`` on any streaming aggregation, so the client must.
2. ``refuse_downstream_watermark``: a ``withWatermark`` after the rewrite would stall it.
3. ``state_store_for``: streaming net changes on ``transformWithState`` need RocksDB.
4. ``watch``: the started query is watched for rows dropped behind the watermark
   (``spark_cdc.late_rows``).

A refused start never reaches the server: no query, checkpoint or output is created. The
package root wraps ``DataStreamWriter._start_internal``, the one method every start goes
through (start, toTable, foreach*), to call ``start_guarded``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from spark_cdc.late_rows import watch
from spark_cdc.rewrite.errors import CdcAnalysisException
from spark_cdc.rewrite.net_changes import uses_transform_with_state
from spark_cdc.rewrite.plan_tree import (
    contains_streaming_rewrite,
    watermark_above_streaming_rewrite,
)

_APPEND = "append"
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_STATE = "org.apache.spark.sql.execution.streaming.state."
DEFAULT_STATE_STORE = _STATE + "HDFSBackedStateStoreProvider"
ROCKSDB_STATE_STORE = _STATE + "RocksDBStateStoreProvider"


def refuse_output_mode(writer: Any, output_mode: str | None) -> None:
    mode = (output_mode or writer._write_proto.output_mode or _APPEND).lower()
    if mode != _APPEND:
        raise unsupported_output_mode(mode)


def refuse_downstream_watermark(writer: Any) -> None:
    if watermark_above_streaming_rewrite(writer._write_stream):
        raise downstream_watermark()


@contextmanager
def state_store_for(writer: Any) -> Iterator[None]:
    """Start a ``transformWithState`` net changes stream on RocksDB, touching nothing else.

    ``transformWithState`` refuses Spark's default state store. A query takes its store
    from the session when it starts (and keeps it in its checkpoint), so the session is
    switched for the start command only, and only from the default store.
    """
    if not uses_transform_with_state(writer._write_stream):
        yield
        return
    conf = writer._session.conf
    current = conf.get(STATE_STORE_PROVIDER, None)
    if current not in (None, DEFAULT_STATE_STORE):
        yield
        return
    conf.set(STATE_STORE_PROVIDER, ROCKSDB_STATE_STORE)
    try:
        yield
    finally:
        if current is None:
            conf.unset(STATE_STORE_PROVIDER)
        else:
            conf.set(STATE_STORE_PROVIDER, current)


def start_guarded(start: Callable[..., Any], writer: Any, *args: Any, **kwargs: Any) -> Any:
    """``start(writer, ...)``, the steps above first when the stream holds a rewrite."""
    if not contains_streaming_rewrite(writer._write_stream):
        return start(writer, *args, **kwargs)
    refuse_output_mode(writer, kwargs.get("outputMode"))
    refuse_downstream_watermark(writer)
    with state_store_for(writer):
        query = start(writer, *args, **kwargs)
    return watch(query)


def unsupported_output_mode(mode: str) -> CdcAnalysisException:
    return CdcAnalysisException(
        "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION",
        f"Output mode '{mode}' is not supported for Change Data Capture (CDC) streaming reads "
        "with post-processing (carry-over removal, update detection or net changes): they emit "
        "each change once and never revise it. Use outputMode('append'), the default.",
        outputMode=mode,
    )


def downstream_watermark() -> CdcAnalysisException:
    return CdcAnalysisException(
        "UNSUPPORTED_FEATURE.CDC_DOWNSTREAM_WATERMARK",
        "withWatermark() applied after CDC post-processing would stall this query: Spark "
        "keeps one global watermark, the minimum of all, and rows reach your watermark only "
        "after CDC's own watermark on _commit_timestamp has released them, so neither ever "
        "advances. Apply withWatermark() to the change feed before post_process(), or write "
        "the post-processed feed to a table and watermark the stream that reads it.",
    )
