"""How many partitions a stream's state gets on a server left at Spark's defaults.

Spark fixes a stateful stream's partitions at the query's first run, from
``spark.sql.shuffle.partitions`` (200 unless someone set it), and every micro-batch then
runs that many state-store tasks, however few rows it holds and however few cores the
server has. On a laptop that is most of a micro-batch's time: streaming net changes over
20 commits took 98.5 s at 200 and 12.9 s at 4 (issue 58, 2 cores).

So a stream holding one of our rewrites (they keep state: ``rewrite.streaming``,
``rewrite.net_state``), started on a session where nobody set the setting, neither the
session nor the server, starts with twice the server's parallelism instead
(``chosen_partitions``). The setting is the session's for the start command only: the
query keeps its own copy of the session's settings from its start, and the session is
given back as it was. A value anyone set is theirs and kept.

A query restarted from a checkpoint keeps the partitions its first run recorded: Spark
reads them from the checkpoint's offset log and ignores the session's (it must: the state
is laid out in that many partitions). A stream first started at 200 keeps 200 until it
starts over in a new checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spark_cdc.rewrite.server_code import server_parallelism

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SPARK_DEFAULT = 200
PER_TASK_SLOT = 2  # partitions per task the server runs at once: a slow one is not waited on


def chosen_partitions(spark: Any) -> int | None:
    """The partitions for a stateful stream's first run; None when someone set them.

    ``conf.get(key, None)`` answers None only for a setting neither the session nor the
    server's own configuration holds (``conf.get(key)`` would answer Spark's default)."""
    if spark.conf.get(SHUFFLE_PARTITIONS, None) is not None:
        return None
    return min(SPARK_DEFAULT, PER_TASK_SLOT * server_parallelism(spark))


@contextmanager
def partitions_for_start(spark: Any) -> Iterator[int | None]:
    """Inside, the session's partitions are ``chosen_partitions`` (when it chose any);
    afterwards unset again."""
    chosen = chosen_partitions(spark)
    if chosen is None:
        yield None
        return
    spark.conf.set(SHUFFLE_PARTITIONS, str(chosen))
    try:
        yield chosen
    finally:
        spark.conf.unset(SHUFFLE_PARTITIONS)
