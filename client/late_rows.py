"""Turn rows dropped behind the watermark into a loud failure instead of a silent loss.

The streaming rewrite keys its state on ``_commit_timestamp`` under a zero-delay watermark.
A feed that delivers a commit whose timestamp is not above what earlier micro-batches saw
breaks the changelog contract, and Spark then drops those rows without an error: the only
trace is ``numRowsDroppedByWatermark`` in the query's progress. No expression can see the
watermark, so the check lives in the client: a stream holding a rewrite comes back from
``start()`` as a :class:`WatchedQuery`, and a per-session listener watches its progress.
On the first dropped row the query is stopped and every later ``awaitTermination``,
``processAllAvailable`` and ``exception`` call reports
``CHANGELOG_CONTRACT_VIOLATION.ROWS_BEHIND_WATERMARK``. The micro-batch that dropped the
rows has committed by then, so the error names it: the rows are reported, not recovered.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql.connect.streaming.query import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryListener
from spark_cdc.compat.listener_bus import add_listener, remove_listener
from spark_cdc.rewrite import pyspark_internals
from spark_cdc.server_plugin.conditions import format_message

ROWS_BEHIND_WATERMARK = "CHANGELOG_CONTRACT_VIOLATION.ROWS_BEHIND_WATERMARK"


class RowsBehindWatermark(StreamingQueryException):
    """The feed delivered rows at or below the watermark and Spark dropped them."""

    def __init__(self, query_id: str, batch_id: int, dropped: int) -> None:
        parameters = {"queryId": query_id, "batchId": str(batch_id), "droppedRows": str(dropped)}
        super().__init__(
            message=format_message(ROWS_BEHIND_WATERMARK, parameters),
            errorClass=ROWS_BEHIND_WATERMARK,
            messageParameters=parameters,
        )


def dropped_rows(progress: Mapping[str, Any]) -> int:
    """Rows a micro-batch's stateful operators dropped behind the watermark."""
    return sum(op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators", []))


def first_drop(progresses: Iterable[Mapping[str, Any]]) -> tuple[int, int] | None:
    """``(batchId, rows)`` of the first micro-batch that dropped rows, if any did."""
    for progress in progresses:
        if dropped := dropped_rows(progress):
            return int(progress.get("batchId", -1)), dropped
    return None


class WatchedQuery(StreamingQuery):
    """A streaming query whose waits fail with :class:`RowsBehindWatermark` once it dropped
    rows; otherwise exactly the query ``start()`` returned."""

    _error: RowsBehindWatermark | None = None

    def _dropped(self, batch_id: int, rows: int) -> None:
        if self._error is None:
            self._error = RowsBehindWatermark(self.id, batch_id, rows)

    def _check(self) -> None:
        """Raise if the listener saw a drop, or if the progress Spark keeps shows one (the
        listener's events arrive asynchronously; a wait that just returned must not race)."""
        if self._error is None and (drop := first_drop(self.recentProgress)):
            self._dropped(*drop)
        if self._error is not None:
            super().stop()  # the listener stops it too, but on its own thread: maybe not yet
            raise self._error

    def awaitTermination(self, timeout: int | None = None) -> bool | None:
        try:
            result = super().awaitTermination(timeout)
        except StreamingQueryException:
            self._check()
            raise
        self._check()
        return result

    def processAllAvailable(self) -> None:
        try:
            super().processAllAvailable()
        except StreamingQueryException:
            self._check()
            raise
        self._check()

    def exception(self) -> StreamingQueryException | None:
        return self._error or super().exception()

    def stop(self) -> None:
        super().stop()
        session = pyspark_internals.query_session(self)
        _unwatch(session, self.id, remove_now=True)
        removal = _removals.pop(session, None)
        if removal is not None:  # the bus's event came first: let its removal finish
            removal.join(timeout=30)


class _DropListener(StreamingQueryListener):
    """One per session while it has watched queries running: stops a watched query at its
    first micro-batch that dropped rows."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.watched: dict[str, WatchedQuery] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        query = self.watched.get(str(progress.id))
        if query is None or query._error is not None:
            return
        rows = sum(op.numRowsDroppedByWatermark for op in progress.stateOperators)
        if rows:
            query._dropped(progress.batchId, rows)
            # Not from the listener's own thread: stop() waits for the query to end.
            threading.Thread(target=StreamingQuery.stop, args=(query,), daemon=True).start()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        _unwatch(self.session, str(event.id), remove_now=False)


_listeners: weakref.WeakKeyDictionary[Any, _DropListener] = weakref.WeakKeyDictionary()
_removals: weakref.WeakKeyDictionary[Any, threading.Thread] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _unwatch(session: Any, query_id: str, remove_now: bool) -> None:
    """Forget a query that ended. The listener bus keeps a server call and a thread open
    while it has listeners; they go with the last watched query. After ``stop()`` they go
    at once, in the caller's thread: left to the bus's event, a script that ends right
    after ``stop()`` removed the listener during interpreter shutdown, and pyspark warned
    twice ("cannot schedule new futures after shutdown"). From the bus's own callback the
    removal runs on another thread (removing joins the bus's thread)."""
    with _lock:
        listener = _listeners.get(session)
        if listener is None:
            return
        listener.watched.pop(query_id, None)
        if listener.watched:
            return
        del _listeners[session]
        if not remove_now:
            removal = threading.Thread(
                target=remove_listener, args=(session, listener), daemon=True
            )
            _removals[session] = removal
            removal.start()
    if remove_now:
        remove_listener(session, listener)


def watch(query: StreamingQuery) -> WatchedQuery:
    """The same query, watched for rows dropped behind the watermark."""
    session = pyspark_internals.query_session(query)
    watched = WatchedQuery(session, query.id, query.runId, query.name)
    with _lock:
        listener = _listeners.get(session)
        fresh = listener is None
        if listener is None:
            listener = _listeners[session] = _DropListener(session)
        listener.watched[watched.id] = watched
    if fresh:  # outside the lock: adding waits for a removal that may be under way
        add_listener(session, listener)
    return watched
