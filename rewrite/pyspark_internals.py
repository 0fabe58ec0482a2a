"""Every private attribute of PySpark this package reads or replaces, in one place.

PySpark's Connect client has no public way to do a few things this package must do: read
the plan a DataFrame holds without a server round trip, wrap the one method every stream
start goes through, give a server error back its own condition, remove a listener without
PySpark's deadlock, take a refused session out of PySpark's slots. Each of those touches an
attribute PySpark may rename in any release; they are all here, behind small named
accessors, and ``INTERNALS`` lists each one with the kind it must have, so that
``tests/unit/test_pyspark_internals.py`` checks them against the installed PySpark (run it
in each Spark version's virtualenv: no server is needed).

This module imports no part of PySpark's Connect client at import time: the package's
patches (``spark_cdc.compat``) call it while that client is still loading. It lives in
``spark_cdc.rewrite`` so that both the rewrite layer and the client above it can use it;
``spark_cdc.server_plugin`` never does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn, cast

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql import SparkSession as ClassicSparkSession
    from pyspark.sql.connect.plan import LogicalPlan
    from pyspark.sql.connect.session import SparkSession as ConnectSparkSession
    from pyspark.sql.connect.streaming.query import StreamingQuery, StreamingQueryListenerBus
    from pyspark.sql.connect.streaming.readwriter import DataStreamWriter
    from pyspark.sql.streaming.listener import StreamingQueryListener

    # What a user holds: ``SparkSession.builder.remote(...).getOrCreate()`` is typed as
    # PySpark's classic session and is a Connect session at run time.
    SparkSession = ClassicSparkSession | ConnectSparkSession


@dataclass(frozen=True)
class Internal:
    """One private attribute: ``owner`` (a module, or ``module:Class``) has ``name``, of
    ``kind``: "function" (a callable on the class or module), "property", "attribute" (set
    on each instance by ``__init__``, so only the source can show it), "class attribute",
    or "module attribute"."""

    owner: str
    name: str
    kind: str


INTERNALS: tuple[Internal, ...] = (
    # Plans held by the client (reads_a_stream, NetChangesRelation, the stream guard).
    Internal("pyspark.sql.connect.dataframe:DataFrame", "_plan", "attribute"),
    Internal("pyspark.sql.connect.plan:LogicalPlan", "_child", "attribute"),
    Internal("pyspark.sql.connect.plan:LogicalPlan", "_plan_id", "property"),
    Internal("pyspark.sql.connect.plan:Read", "_is_streaming", "attribute"),
    Internal("pyspark.sql.connect.plan:DataSource", "_is_streaming", "attribute"),
    # Stream starts (the guard) and started queries (late_rows).
    Internal(
        "pyspark.sql.connect.streaming.readwriter:DataStreamWriter", "_start_internal", "function"
    ),
    Internal(
        "pyspark.sql.connect.streaming.readwriter:DataStreamWriter", "_write_stream", "attribute"
    ),
    Internal(
        "pyspark.sql.connect.streaming.readwriter:DataStreamWriter", "_write_proto", "attribute"
    ),
    Internal("pyspark.sql.connect.streaming.readwriter:DataStreamWriter", "_session", "attribute"),
    Internal("pyspark.sql.connect.streaming.query:StreamingQuery", "_session", "attribute"),
    # The listener bus (compat.listener_bus).
    Internal("pyspark.sql.connect.streaming.query:StreamingQueryManager", "_sqlb", "attribute"),
    Internal("pyspark.sql.connect.streaming.query:StreamingQueryListenerBus", "_lock", "attribute"),
    Internal(
        "pyspark.sql.connect.streaming.query:StreamingQueryListenerBus",
        "_listener_bus",
        "attribute",
    ),
    Internal(
        "pyspark.sql.connect.streaming.query:StreamingQueryListenerBus",
        "_execution_thread",
        "attribute",
    ),
    # The release thread pool all sessions share (compat.release_pool).
    Internal(
        "pyspark.sql.connect.client.reattach:ExecutePlanResponseReattachableIterator",
        "_lock",
        "class attribute",
    ),
    Internal(
        "pyspark.sql.connect.client.reattach:ExecutePlanResponseReattachableIterator",
        "_release_thread_pool_instance",
        "class attribute",
    ),
    # Sessions (connection._discard) and the client's RPC errors (connection).
    Internal("pyspark.sql.connect.session:SparkSession", "_lock", "class attribute"),
    Internal("pyspark.sql.connect.session:SparkSession", "_default_session", "class attribute"),
    Internal("pyspark.sql.connect.session:SparkSession", "_active_session", "class attribute"),
    Internal("pyspark.sql.connect.client.core:SparkConnectClient", "_handle_rpc_error", "function"),
    Internal("pyspark.sql.connect.client.core:SparkConnectClient", "_builder", "attribute"),
    Internal("pyspark.sql.connect.client.core", "convert_exception", "function"),
    # Errors (compat.server_errors).
    Internal("pyspark.errors.exceptions.base:PySparkException", "_message", "attribute"),
    Internal("pyspark.errors.exceptions.base:PySparkException", "_errorClass", "attribute"),
    Internal("pyspark.errors.exceptions.base:PySparkException", "_messageParameters", "attribute"),
    Internal("pyspark.errors.exceptions.base:PySparkException", "_log_exception", "function"),
    Internal(
        "pyspark.errors.exceptions.connect:SparkConnectGrpcException",
        "_display_stacktrace",
        "attribute",
    ),
    # Column functions' one-time setting (column_functions).
    Internal("pyspark.errors.utils", "_enable_debugging_cache", "module attribute"),
)


# --- plans --------------------------------------------------------------------------------


def plan_of(df: DataFrame) -> LogicalPlan:
    """The plan a Connect DataFrame holds (``df._plan``): reading it makes no round trip."""
    return cast("LogicalPlan", df._plan)  # typed as a column: DataFrame.__getattr__


def child_of(plan: LogicalPlan) -> LogicalPlan | None:
    """A plan node's input (``_child``), None for a leaf."""
    return plan._child


def plan_id_of(plan: LogicalPlan) -> int:
    """The id Spark Connect gives a plan node (``_plan_id``), kept when a node is replaced."""
    return plan._plan_id


def reads_as_stream(node: LogicalPlan) -> bool:
    """Whether a read node reads a stream (``_is_streaming``; False for other nodes)."""
    return bool(getattr(node, "_is_streaming", False))


def dataframe(plan: LogicalPlan, session: Any) -> DataFrame:
    """A Connect DataFrame over ``plan`` (its constructor is internal API)."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

    return ConnectDataFrame(plan, session)


# --- stream starts and queries ---------------------------------------------------------


def stream_start(writer_class: type) -> Callable[..., Any]:
    """``DataStreamWriter._start_internal``: start, toTable and foreach* all go through it."""
    start: Callable[..., Any] = writer_class._start_internal  # type: ignore[attr-defined]
    return start


def replace_stream_start(writer_class: type, start: Callable[..., Any]) -> None:
    writer_class._start_internal = start  # type: ignore[attr-defined]


def writer_plan(writer: DataStreamWriter) -> LogicalPlan:
    """The plan a stream writer will start (``_write_stream``)."""
    return writer._write_stream


def writer_session(writer: DataStreamWriter) -> Any:
    """The session a stream writer will start its query in (``_session``)."""
    return writer._session


def writer_output_mode(writer: DataStreamWriter) -> str:
    """The output mode set on a stream writer, "" when none was (``_write_proto``)."""
    return str(writer._write_proto.output_mode)


def query_session(query: StreamingQuery) -> Any:
    """The session a started query belongs to (``_session``)."""
    return query._session


# --- the listener bus ---------------------------------------------------------------------


def listener_bus(session: Any) -> StreamingQueryListenerBus:
    """The session's client-side listener bus (``streams._sqlb``)."""
    bus: StreamingQueryListenerBus = session.streams._sqlb
    return bus


def bus_lock(bus: StreamingQueryListenerBus) -> Any:
    """The lock the bus's event thread takes to deliver an event (``_lock``)."""
    return bus._lock


def bus_listeners(bus: StreamingQueryListenerBus) -> list[StreamingQueryListener]:
    """The bus's listeners, the list itself (``_listener_bus``): callers mutate it."""
    return bus._listener_bus


def take_bus_thread(bus: StreamingQueryListenerBus) -> threading.Thread | None:
    """The bus's event thread (``_execution_thread``), cleared on the bus as PySpark's own
    removal of the last listener clears it."""
    thread, bus._execution_thread = bus._execution_thread, None
    return thread


# --- the release thread pool (compat.release_pool) ---------------------------------------


def release_pool_shutdown(module: ModuleType) -> type | None:
    """The iterator class whose ``shutdown`` classmethod stops the release thread pool all
    sessions share (``_lock``, ``_release_thread_pool_instance``): PySpark 4.0 and 4.1;
    None where that pool is stopped only when idle (4.2 on)."""
    iterator = module.ExecutePlanResponseReattachableIterator
    if hasattr(iterator, "shutdown_threadpool_if_idle") or not hasattr(iterator, "shutdown"):
        return None
    return cast(type, iterator)


def take_release_pool(iterator: type) -> Any:
    """The shared release pool, taken off the class (the next session makes a new one)."""
    with iterator._lock:  # type: ignore[attr-defined]
        pool = iterator._release_thread_pool_instance  # type: ignore[attr-defined]
        iterator._release_thread_pool_instance = None  # type: ignore[attr-defined]
    return pool


def replace_release_pool_shutdown(iterator: type, shutdown: Callable[[type], None]) -> None:
    iterator.shutdown = classmethod(shutdown)  # type: ignore[attr-defined]


# --- sessions and the client's RPC errors -----------------------------------------------


def forget_session(session: Any) -> None:
    """Take ``session`` out of PySpark's default and active session slots (``_lock``,
    ``_default_session``, ``_active_session`` of its class), so no later session inherits
    it."""
    session_class = type(session)
    with session_class._lock:
        if session_class._default_session is session:
            session_class._default_session = None
    if getattr(session_class._active_session, "session", None) is session:
        session_class._active_session.session = None


def rpc_error_handler(client_class: type) -> Callable[[Any, Any], NoReturn]:
    """``SparkConnectClient._handle_rpc_error``: every failed RPC goes through it."""
    handler: Callable[[Any, Any], NoReturn] = client_class._handle_rpc_error  # type: ignore[attr-defined]
    return handler


def replace_rpc_error_handler(client_class: type, handler: Callable[[Any, Any], NoReturn]) -> None:
    client_class._handle_rpc_error = handler  # type: ignore[attr-defined]


def convert_exception(core: ModuleType) -> Callable[..., Any]:
    """``convert_exception`` of ``pyspark.sql.connect.client.core``."""
    convert: Callable[..., Any] = core.convert_exception
    return convert


def replace_convert_exception(core: ModuleType, convert: Callable[..., Any]) -> None:
    """Replace ``convert_exception`` of ``pyspark.sql.connect.client.core``: every error the
    Connect client raises from a server response is built by it."""
    core.convert_exception = convert  # type: ignore[attr-defined]


def client_endpoint(client: Any) -> str:
    """``host:port`` of the server a Connect client talks to (``_builder.endpoint``)."""
    return str(client._builder.endpoint)


# --- errors ---------------------------------------------------------------------------------


def set_error_fields(
    error: BaseException, message: str, condition: Any, parameters: Mapping[str, Any] | None
) -> None:
    """Give a PySpark exception a new message, condition and parameters, and no server
    stack trace on display (``_message``, ``_errorClass``, ``_messageParameters``,
    ``_display_stacktrace``): what ``getCondition()`` and friends read."""
    error.args = (message,)
    error._message = message  # type: ignore[attr-defined]
    error._errorClass = condition  # type: ignore[attr-defined]
    error._messageParameters = parameters  # type: ignore[attr-defined]
    error._display_stacktrace = False  # type: ignore[attr-defined]


def error_message(error: BaseException) -> str:
    """The message a PySpark exception holds (``_message``), "" when it has none yet."""
    return str(getattr(error, "_message", ""))


def error_logger(error_class: type) -> Callable[[Any], None] | None:
    """``_log_exception`` of a PySpark exception class (what logs a server error with a
    DataFrame context), None where this PySpark has none."""
    log: Callable[[Any], None] | None = getattr(error_class, "_log_exception", None)
    return log


def replace_error_logger(error_class: type, log: Callable[[Any], None]) -> None:
    error_class._log_exception = log  # type: ignore[attr-defined]


# --- column functions -----------------------------------------------------------------------


def debugging_setting_unread() -> bool:
    """Whether PySpark's column functions have yet to read their debugging setting
    (``pyspark.errors.utils._enable_debugging_cache`` is None until they do)."""
    from pyspark.errors import utils

    return getattr(utils, "_enable_debugging_cache", False) is None


def settle_debugging_setting(enabled: bool) -> None:
    """Store the setting where PySpark's column functions look for it, so they never read
    it through the process's active session."""
    from pyspark.errors import utils

    utils._enable_debugging_cache = enabled  # type: ignore[assignment]
