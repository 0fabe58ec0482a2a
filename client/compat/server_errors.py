"""Errors raised by this package inside the server, given back their own condition.

What the server sends for them is Spark's wrapper (``PYTHON_DATA_SOURCE_ERROR``,
``USER_RAISED_EXCEPTION``, ``PYTHON_EXCEPTION``, ``STREAM_FAILED``) around a server
traceback with our ``[CONDITION] sentence`` somewhere inside. The client rebuilds the
exception the way Delta Connect maps its server errors, by wrapping PySpark's conversion:
same class as PySpark chose (``except AnalysisException`` still catches it), our condition,
parameters and sentence. The server's error stays reachable as ``e.server_error`` (not as
``__cause__``: PySpark raises with ``from None``, and a chained cause would print the
server's traceback again) and ``getStackTrace()``. Spark's own errors about a plan we
built (an unresolved ``rowId`` column, say) keep their condition and parameters but lose
the plan Spark prints after the sentence: it is full of our ``__spark_cdc_`` helpers and says
nothing about the user's columns (measured: 13.7k characters for a missing row id). Other
errors pass through untouched.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, TypeVar

from pyspark.errors import PySparkException
from spark_cdc.result_size import stream_too_large
from spark_cdc.rewrite import pyspark_internals
from spark_cdc.server_plugin.errors import parse_error_text

E = TypeVar("E", bound=BaseException)


def with_our_condition(error: E) -> E:
    """``error`` as the error of ours it carries, or ``error`` itself if it carries none."""
    if not isinstance(error, PySparkException) or _is_converted(error):
        return error
    text = str(error)
    found = parse_error_text(text) or stream_too_large(text)
    if found is not None:
        message = f"[{found.condition}] {found.message}"
        return _copy(error, message, found.condition, found.parameters)
    if _shows_our_plan(text):  # Spark's error, printing a plan of ours after its sentence
        sentence = text.split(";\n", 1)[0].split("\n", 1)[0]
        if str(error.getCondition()).startswith("UNRESOLVED_COLUMN"):
            sentence += (
                " (a column the change feed's post-processing was told to use, by rowId or "
                "rowVersion: name columns of the feed)"
            )
        return _copy(error, sentence, error.getCondition(), error.getMessageParameters())
    return error


def _shows_our_plan(text: str) -> bool:
    # Imported here: the patches run while PySpark's Connect client is still loading, and
    # ``spark_cdc.rewrite`` imports it.
    from spark_cdc.rewrite.names import HELPER_PREFIX

    return HELPER_PREFIX in text


def _copy(error: E, message: str, condition: Any, parameters: Any) -> E:
    ours = type(error).__new__(type(error))
    ours.__dict__.update(error.__dict__)
    pyspark_internals.set_error_fields(ours, message, condition, parameters)
    ours._spark_cdc_converted = True  # type: ignore[attr-defined]
    ours.server_error = error  # type: ignore[attr-defined]
    return ours


def patch_error_log(connect_errors: ModuleType) -> None:
    """PySpark logs a server error with a DataFrame context as one JSON line on stderr when
    it builds the exception; for a plan of ours that line holds the whole plan (measured:
    about 14 KB for a missing row id). Those are not logged; the exception says it all."""
    grpc_error = connect_errors.SparkConnectGrpcException
    log = pyspark_internals.error_logger(grpc_error)
    if log is None or _is_converted(log):
        return

    @functools.wraps(log)
    def log_exception(self: Any) -> None:
        if not _shows_our_plan(pyspark_internals.error_message(self)):
            log(self)

    log_exception._spark_cdc_converted = True  # type: ignore[attr-defined]
    pyspark_internals.replace_error_logger(grpc_error, log_exception)


def _is_converted(error: object) -> bool:
    return bool(getattr(error, "_spark_cdc_converted", False))


def patch_convert_exception(core: ModuleType) -> None:
    """Every error the Connect client raises from a server response goes through
    ``convert_exception`` in ``pyspark.sql.connect.client.core``."""
    convert = pyspark_internals.convert_exception(core)
    if _is_converted(convert):
        return

    @functools.wraps(convert)
    def convert_exception(*args: Any, **kwargs: Any) -> Any:
        return with_our_condition(convert(*args, **kwargs))

    convert_exception._spark_cdc_converted = True  # type: ignore[attr-defined]
    pyspark_internals.replace_convert_exception(core, convert_exception)


def patch_query_exception(query_module: ModuleType) -> None:
    """``StreamingQuery.exception()`` builds its exception from the query's text itself."""
    query_class = query_module.StreamingQuery
    exception = query_class.exception
    if _is_converted(exception):
        return

    @functools.wraps(exception)
    def converted_exception(self: Any) -> Any:
        error = exception(self)
        return None if error is None else with_our_condition(error)

    converted_exception._spark_cdc_converted = True  # type: ignore[attr-defined]
    query_class.exception = converted_exception
