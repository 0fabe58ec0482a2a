"""Spark's refusal of an ``apply_changes`` batch whose tasks' results pass
``spark.driver.maxResultSize`` (what the tasks resolved travels to the driver), named
``APPLY_CHANGES.BATCH_TOO_LARGE`` with both fixes: raised by a batch DataFrame's write, and
by a stream's waits and ``exception()`` for the queries ``apply_changes`` started (their
ids are in Spark's text: another query's failure keeps Spark's own condition)."""

from __future__ import annotations

import re

from spark_cdc.rewrite.errors import CdcAnalysisException, cdc_error
from spark_cdc.server_plugin.conditions import format_message
from spark_cdc.server_plugin.errors import ErrorText

CONDITION = "APPLY_CHANGES.BATCH_TOO_LARGE"

_RESULT_SIZE = re.compile(
    r"Total size of serialized results of \d+ tasks \(([^)]+)\) is bigger than "
    r"spark\.driver\.maxResultSize \(([^)]+)\)"
)

# The ids of the streaming queries apply_changes started in this process.
_APPLYING: set[str] = set()


def applying(query_id: str) -> None:
    """``query_id`` is an apply_changes stream: its result-size failure is named."""
    _APPLYING.add(query_id)


def _sizes(message: str) -> dict[str, str] | None:
    """The sizes Spark's result-size refusal names (None: another error)."""
    found = _RESULT_SIZE.search(message)
    return None if found is None else {"size": found.group(1), "limit": found.group(2)}


def batch_too_large(message: str) -> CdcAnalysisException | None:
    """A batch DataFrame's write refused for its result size, as our condition; None for
    any other error."""
    found = _sizes(message)
    return None if found is None else cdc_error(CONDITION, **found)


def stream_too_large(message: str) -> ErrorText | None:
    """Our error, when ``message`` is an apply_changes stream's result-size failure."""
    found = _sizes(message)
    if found is None or not any(query in message for query in _APPLYING):
        return None
    return ErrorText(CONDITION, format_message(CONDITION, found), found)
