"""The stream-start guard: every streaming start passes it, and a stream holding one of our
rewrites is checked and prepared in named steps before the start command is sent.

1. ``refuse_output_mode``: Update/Complete re-emit revised groups, which a change feed
   never has. Spark refuses them for its native CDC plans, but a 4.0/4.1 server accepts
   ``outputMode("update")`` on any streaming aggregation, so the client must.
2. ``refuse_downstream_watermark``: a ``withWatermark`` after the rewrite would stall it.
3. ``partitions_for_start``: on a server left at Spark's 200 shuffle partitions, the
   stream's state gets as many as the server can use (``spark_cdc.state_partitions``).
4. ``watch``: the started query is watched for rows dropped behind the watermark
   (``spark_cdc.late_rows``).

A refused start never reaches the server: no query, checkpoint or output is created. The
package root wraps ``DataStreamWriter._start_internal``, the one method every start goes
through (start, toTable, foreach*), to call ``start_guarded``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_cdc.late_rows import watch
from spark_cdc.rewrite import pyspark_internals
from spark_cdc.rewrite.errors import CdcAnalysisException, cdc_error
from spark_cdc.rewrite.plan_tree import (
    contains_streaming_rewrite,
    watermark_above_streaming_rewrite,
)
from spark_cdc.state_partitions import partitions_for_start

_APPEND = "append"
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_STATE = "org.apache.spark.sql.execution.streaming.state."
DEFAULT_STATE_STORE = _STATE + "HDFSBackedStateStoreProvider"


def refuse_output_mode(writer: Any, output_mode: str | None) -> None:
    mode = (output_mode or pyspark_internals.writer_output_mode(writer) or _APPEND).lower()
    if mode != _APPEND:
        raise unsupported_output_mode(mode)


def refuse_downstream_watermark(writer: Any) -> None:
    if watermark_above_streaming_rewrite(pyspark_internals.writer_plan(writer)):
        raise downstream_watermark()


def start_guarded(start: Callable[..., Any], writer: Any, *args: Any, **kwargs: Any) -> Any:
    """``start(writer, ...)``, the steps above first when the stream holds a rewrite."""
    if not contains_streaming_rewrite(pyspark_internals.writer_plan(writer)):
        return start(writer, *args, **kwargs)
    refuse_output_mode(writer, kwargs.get("outputMode"))
    refuse_downstream_watermark(writer)
    with partitions_for_start(pyspark_internals.writer_session(writer)):
        started = start(writer, *args, **kwargs)
    return watch(started)


def unsupported_output_mode(mode: str) -> CdcAnalysisException:
    return cdc_error("STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION", outputMode=mode)


def downstream_watermark() -> CdcAnalysisException:
    return cdc_error("UNSUPPORTED_FEATURE.CDC_DOWNSTREAM_WATERMARK")
