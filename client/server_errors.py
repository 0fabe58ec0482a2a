"""Errors raised by this package inside the server, given back their own condition.

What the server sends for them is Spark's wrapper (``PYTHON_DATA_SOURCE_ERROR``,
``USER_RAISED_EXCEPTION``, ``PYTHON_EXCEPTION``, ``STREAM_FAILED``) around a server
traceback with our ``[CONDITION] sentence`` somewhere inside. The client rebuilds the
exception the way Delta Connect maps its server errors, by wrapping PySpark's conversion:
same class as PySpark chose (``except AnalysisException`` still catches it), our condition,
parameters and sentence. The server's error stays reachable as ``e.server_error`` (not as
``__cause__``: PySpark raises with ``from None``, and a chained cause would print the
server's traceback again) and ``getStackTrace()``. Errors that are not ours pass through
untouched.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, TypeVar

from pyspark.errors import PySparkException
from spark_cdc.server_plugin.errors import parse_error_text

E = TypeVar("E", bound=BaseException)


def with_our_condition(error: E) -> E:
    """``error`` as the error of ours it carries, or ``error`` itself if it carries none."""
    if not isinstance(error, PySparkException) or _is_converted(error):
        return error
    found = parse_error_text(str(error))
    if found is None:
        return error
    ours = type(error).__new__(type(error))
    ours.__dict__.update(error.__dict__)
    message = f"[{found.condition}] {found.message}"
    ours.args = (message,)
    ours._message = message  # type: ignore[attr-defined]
    ours._errorClass = found.condition  # type: ignore[attr-defined]
    ours._messageParameters = found.parameters  # type: ignore[attr-defined]
    ours._display_stacktrace = False  # type: ignore[attr-defined]
    ours._spark_cdc_converted = True  # type: ignore[attr-defined]
    ours.server_error = error  # type: ignore[attr-defined]
    return ours


def _is_converted(error: BaseException) -> bool:
    return bool(getattr(error, "_spark_cdc_converted", False))


def patch_convert_exception(core: ModuleType) -> None:
    """Every error the Connect client raises from a server response goes through
    ``convert_exception`` in ``pyspark.sql.connect.client.core``."""
    convert = core.convert_exception
    if _is_converted(convert):
        return

    @functools.wraps(convert)
    def convert_exception(*args: Any, **kwargs: Any) -> Any:
        return with_our_condition(convert(*args, **kwargs))

    convert_exception._spark_cdc_converted = True  # type: ignore[attr-defined]
    core.convert_exception = convert_exception


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
