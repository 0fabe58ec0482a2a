"""Close a session without PySpark 4.0's and 4.1's release-pool deadlock.

Every session's client shares one thread pool for its ``ReleaseExecute`` calls, and
closing any client stops it, waiting, under the pool's own lock. A session dropped
without ``stop()`` is closed by its ``__del__`` when the garbage collector runs, which may
be in the middle of another query's ``submit`` to that pool on the same thread, holding
that lock: the thread then waits for itself forever, and no timeout can end it
(exceptions in ``__del__`` are ignored). The suite on Spark 4.0 met it as a ``collect()``
that never returned. PySpark 4.2 stops the pool only when no query uses it; here the pool
is taken off the class at once (the next query makes a new one) and stopped by a thread
of its own, which waits for the lock instead of holding it.
"""

from __future__ import annotations

import threading
from types import ModuleType

from spark_cdc.rewrite import pyspark_internals


def patch(module: ModuleType) -> None:
    """Replace the iterator class's ``shutdown`` in ``pyspark...client.reattach``."""
    iterator = pyspark_internals.release_pool_shutdown(module)
    if iterator is None or getattr(iterator.shutdown, "_spark_cdc", False):  # type: ignore[attr-defined]
        return
    pyspark_internals.replace_release_pool_shutdown(iterator, shutdown)
    iterator.shutdown.__func__._spark_cdc = True  # type: ignore[attr-defined]


def shutdown(iterator: type) -> None:
    pool = pyspark_internals.take_release_pool(iterator)
    if pool is not None:
        threading.Thread(target=pool.shutdown, name="spark-cdc-release-pool", daemon=True).start()
