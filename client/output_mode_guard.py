"""Refuse stream starts that a client-side CDC rewrite cannot serve correctly.

Update/Complete output modes, and a ``withWatermark`` applied after the rewrite. The same
hook gives a net changes stream the state store it needs, and hands back a query watched
for rows dropped behind the watermark (client/late_rows.py).

Spark rejects them for its native CDC plans, but a 4.0/4.1 server accepts
``outputMode("update")`` on any streaming aggregation, so nothing there would stop a
client-built plan from re-emitting revised groups. The check runs in the client right
before the start command is sent: no query ever exists on the server.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.sql.connect.streaming.readwriter import DataStreamWriter

from client.errors import downstream_watermark, unsupported_output_mode
from client.late_rows import watch
from rewrite.net_changes import uses_transform_with_state
from rewrite.plan_tree import contains_streaming_rewrite, watermark_above_streaming_rewrite

_APPEND = "append"
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_STATE = "org.apache.spark.sql.execution.streaming.state."
DEFAULT_STATE_STORE = _STATE + "HDFSBackedStateStoreProvider"
ROCKSDB_STATE_STORE = _STATE + "RocksDBStateStoreProvider"


def check_output_mode(writer: DataStreamWriter, output_mode: str | None) -> None:
    mode = (output_mode or writer._write_proto.output_mode or _APPEND).lower()
    if mode != _APPEND and contains_streaming_rewrite(writer._write_stream):
        raise unsupported_output_mode(mode)
    if watermark_above_streaming_rewrite(writer._write_stream):
        raise downstream_watermark()


@contextmanager
def state_store_for(writer: DataStreamWriter) -> Iterator[None]:
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


def install_output_mode_guard() -> None:
    """Wrap the one method every streaming start goes through (start, toTable, foreach*)."""
    start: Callable[..., Any] = DataStreamWriter._start_internal
    if getattr(start, "_spark_cdc_guarded", False):
        return

    @functools.wraps(start)
    def guarded_start(self: DataStreamWriter, *args: Any, **kwargs: Any) -> Any:
        check_output_mode(self, kwargs.get("outputMode"))
        with state_store_for(self):
            query = start(self, *args, **kwargs)
        return watch(query) if contains_streaming_rewrite(self._write_stream) else query

    guarded_start._spark_cdc_guarded = True  # type: ignore[attr-defined]
    DataStreamWriter._start_internal = guarded_start  # type: ignore[method-assign]
