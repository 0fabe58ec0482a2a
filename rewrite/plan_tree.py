"""Reading the client-side plan tree: no server round trip, ever.

``df.isStreaming`` and ``df.schema`` are AnalyzePlan RPCs in Spark Connect. Everything a
rewrite needs to know about its input (is it a stream? does it already hold one of our
rewrites?) is in the plan objects the client holds, so we read those instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import DataFrame
from pyspark.sql.connect.plan import LogicalPlan, WithWatermark
from spark_cdc.rewrite import pyspark_internals
from spark_cdc.rewrite.pyspark_internals import plan_of

# Set on the root plan node of every streaming rewrite; survives any later transformation
# because derived DataFrames hold that node as a descendant.
_STREAMING_REWRITE_MARK = "_spark_cdc_streaming_rewrite"


def _children(node: LogicalPlan) -> Iterator[LogicalPlan]:
    for value in vars(node).values():
        if isinstance(value, LogicalPlan):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, LogicalPlan))


def walk(root: LogicalPlan) -> Iterator[LogicalPlan]:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(_children(node))


def reads_a_stream(df: DataFrame) -> bool:
    """What ``df.isStreaming`` answers, without asking the server."""
    return any(pyspark_internals.reads_as_stream(node) for node in walk(plan_of(df)))


def mark_streaming_rewrite(df: DataFrame) -> DataFrame:
    setattr(plan_of(df), _STREAMING_REWRITE_MARK, True)
    return df


def contains_streaming_rewrite(root: LogicalPlan) -> bool:
    return any(getattr(node, _STREAMING_REWRITE_MARK, False) for node in walk(root))


def watermark_above_streaming_rewrite(root: LogicalPlan) -> bool:
    """True if a ``withWatermark`` was applied to a stream after a rewrite.

    Spark keeps one global watermark, the minimum over all watermark nodes. A node above
    the rewrite sees rows only once the rewrite's own watermark has released them, and
    until it sees rows its watermark is 0: the query would stall and never emit.
    """
    stack: list[tuple[LogicalPlan, bool]] = [(root, False)]
    seen: set[tuple[int, bool]] = set()
    while stack:
        node, below_watermark = stack.pop()
        if (id(node), below_watermark) in seen:
            continue
        seen.add((id(node), below_watermark))
        if below_watermark and getattr(node, _STREAMING_REWRITE_MARK, False):
            return True
        below = below_watermark or isinstance(node, WithWatermark)
        stack.extend((child, below) for child in _children(node))
    return False
