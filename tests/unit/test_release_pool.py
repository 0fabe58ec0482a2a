"""Closing a session while a query of the same thread submits to the release pool all
sessions share (what a garbage-collected session's ``__del__`` does) returns at once, and
the pool is still stopped: PySpark 4.0 and 4.1 deadlock there (``compat.release_pool``);
4.2 on stop the pool only when idle. Run in each Spark version's virtualenv."""

from __future__ import annotations

import threading

import pyspark.sql.connect.client.reattach as reattach
import spark_cdc  # noqa: F401 - arranges the patch
from spark_cdc.rewrite import pyspark_internals


def test_closing_a_session_inside_a_submit_does_not_deadlock() -> None:
    iterator = pyspark_internals.release_pool_shutdown(reattach)
    if iterator is None:  # PySpark's own fix (4.2 on): nothing to patch
        assert hasattr(
            reattach.ExecutePlanResponseReattachableIterator, "shutdown_threadpool_if_idle"
        )
        return
    pool = iterator._get_or_create_release_thread_pool()  # type: ignore[attr-defined]
    returned = threading.Event()

    def close_inside_a_submit() -> None:
        with pool._shutdown_lock:  # held by ThreadPoolExecutor.submit
            iterator.shutdown()  # type: ignore[attr-defined]  # what client.close() calls
            returned.set()

    threading.Thread(target=close_inside_a_submit, daemon=True).start()
    assert returned.wait(10), "closing the session deadlocked"
    assert iterator._release_thread_pool_instance is None  # type: ignore[attr-defined]
    for _ in range(100):
        if pool._shutdown:
            break
        threading.Event().wait(0.05)
    assert pool._shutdown
