"""Reaching a Spark Connect server from a user's own code: within seconds, or a named error.

Three things PySpark's Connect client does that a script cannot live with (issue 27):

- An unreachable server is retried for about twenty minutes (its default retry policy),
  silently, and then raised as a gRPC repr with no condition. ``connect()`` probes the
  address first (a TCP connection, then one RPC under a short retry policy) and says in
  seconds which of the two failed.
- A wrong or missing token is raised as a gRPC repr with no condition and no hint. Once
  ``spark_cdc`` is imported, every session's UNAUTHENTICATED and (retries spent)
  UNAVAILABLE errors carry a condition of ours and the fix (``patch_grpc_errors``), whether
  or not the session came from ``connect()``.
- The first session of a process stays PySpark's active session even when the server
  refused it, and PySpark's column functions read a setting through the active session on
  their first call: every ``F.col`` then failed with UNAUTHENTICATED, on good sessions too.
  ``rewrite.column_functions`` reads that setting through the session at hand instead,
  and ``connect()`` takes a refused session out of PySpark's active and default slots.

And one that a session which has been working cannot live with (issue 58): a server that
goes away (killed, its machine gone) was not noticed for minutes. A ``collect()`` and a
stream's ``awaitTermination()`` were still waiting 150 s after the server was SIGKILLed,
as PySpark's retries of a lost connection add up to about ten minutes. Every session's
retries of a lost connection now give up ``$SPARK_CDC_SERVER_GONE_AFTER`` seconds (30)
after the connection was first lost, with ``SPARK_CDC_CONNECTION.SERVER_GONE`` naming the
address (``bound_lost_connection_retries``). A server back within that time is not noticed
at all. Other retries (a server's own "retry later") keep PySpark's policy.

The 30 s are for a host that does not answer. A port that refuses connections has no server
behind it, which waiting does not change (issue 77: a SIGKILLed server's port refused from
the first second, and was named after 30 s): between retries the address is probed, and a
port refusing for ``REFUSED_FOR_S`` ends the call at once. A session whose server is gone
then says so on its next lost connection without waiting again, so ``stop()`` (its
ReleaseSession, its operations' releases) returns at once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlparse

import pyspark.errors
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from spark_cdc.connection_defaults import DEFAULT_PORT, SERVER_GONE_AFTER_ENV, TOKEN_ENV
from spark_cdc.rewrite import pyspark_internals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
from spark_cdc.server_plugin.conditions import format_message

# What 4.0 raises when retries are spent, past ``_handle_rpc_error`` (4.1+ have no such class).
_RETRIES_EXCEEDED: tuple[type, ...] = tuple(
    c for c in [getattr(pyspark.errors, "RetriesExceeded", None)] if c is not None
)


class ConnectionProblem(SparkConnectGrpcException):
    """The server could not be reached or refused the session. A
    ``SparkConnectGrpcException``, as PySpark raises for these, so existing ``except``
    clauses keep working; with a condition of ours and one sentence with the fix.

    Examples
    --------
    >>> import spark_cdc
    >>> try:
    ...     spark = spark_cdc.connect("sc://localhost:15999")
    ... except spark_cdc.ConnectionProblem as e:
    ...     print(e.getCondition())  # doctest: +SKIP
    SPARK_CDC_CONNECTION.UNREACHABLE
    """

    def __init__(self, condition: str, /, **parameters: object) -> None:
        values = {name: str(value) for name, value in parameters.items()}
        super().__init__(
            message=f"[{condition}] {format_message(condition, values)}",
            errorClass=condition,
            messageParameters=values,
        )


def address(url: str) -> tuple[str, int]:
    """Host and port of an ``sc://host:port/;...`` URL."""
    parsed = urlparse(url.split(";")[0].replace("sc://", "http://", 1))
    return parsed.hostname or "localhost", parsed.port or DEFAULT_PORT


def unreachable(
    host: str, port: int, reason: str = "nothing accepts connections there"
) -> ConnectionProblem:
    return ConnectionProblem(
        "SPARK_CDC_CONNECTION.UNREACHABLE", host=host, port=port, reason=reason
    )


def unauthenticated(host: str, port: int, said: str = "") -> ConnectionProblem:
    """``said``: the server's own reason ("No authentication token provided", "Invalid
    authentication token"; it never repeats the token)."""
    return ConnectionProblem(
        "SPARK_CDC_CONNECTION.UNAUTHENTICATED",
        host=host,
        port=port,
        reason=said or "no reason given",
    )


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """A TCP connection to the URL's address, or ``SPARK_CDC_CONNECTION.UNREACHABLE``."""
    host, port = address(url)
    try:
        with socket.create_connection((host, port), timeout):
            pass
    except OSError:
        raise unreachable(host, port) from None


def connect(url: str, *, token: str | None = None, timeout: float = 10.0) -> SparkSession:
    """A Spark Connect session on ``url``, checked: it answered, and took the token.

    ``token`` (else the URL's ``;token=``, else ``$SPARK_CDC_TOKEN``) is sent as PySpark
    sends it; it appears in no error. The refused session is closed without waiting on the
    server, and no later session inherits it.

    Parameters
    ----------
    url : str
        ``sc://host:port`` (PySpark's form; ``/;token=...`` may follow).
    token : str, optional
        The server's authentication token.
    timeout : float, default 10.0
        About how many seconds to wait for the server to answer.

    Returns
    -------
    SparkSession
        A Spark Connect session (typed as PySpark types ``builder.remote(...).create()``).

    Raises
    ------
    ConnectionProblem
        ``SPARK_CDC_CONNECTION.UNREACHABLE`` when the address does not answer, or does not
        answer as a Spark Connect server, within about ``timeout`` seconds;
        ``SPARK_CDC_CONNECTION.UNAUTHENTICATED`` when the server refuses the token.

    Examples
    --------
    >>> import spark_cdc
    >>> spark = spark_cdc.connect("sc://localhost:15002", token="...")  # doctest: +SKIP
    >>> spark_cdc.read(spark).load("/data/orders").count()  # doctest: +SKIP
    """
    from pyspark.sql import SparkSession
    from spark_cdc.rewrite.column_functions import settle_column_functions

    check_reachable(url, timeout)
    token = token or (None if ";token=" in url else os.environ.get(TOKEN_ENV))
    remote = f"{url.rstrip('/')}/;token={token}" if token else url
    session: Any = SparkSession.builder.remote(remote).create()
    client = session.client
    policies = client.get_retry_policies()
    client.set_retry_policies([_probe_policy(timeout)])
    try:
        settle_column_functions(session)
    except BaseException as error:
        _discard(session)
        if isinstance(error, _RETRIES_EXCEEDED):
            host, port = address(url)
            reason = "it accepts connections, but does not answer as a Spark Connect server"
            raise unreachable(host, port, reason) from None
        raise
    finally:
        client.set_retry_policies(policies)
    return session


def _probe_policy(timeout: float) -> Any:
    """Retries that give up after about ``timeout`` seconds (PySpark's default: minutes)."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(
        max_retries=4,
        initial_backoff=200,
        backoff_multiplier=2.0,
        max_backoff=max(int(timeout * 250), 200),
        jitter=100,
    )


def _discard(session: Any) -> None:
    """Close a session the server refused or never answered, without the release request
    ``stop()`` would retry, and take it out of PySpark's active and default slots."""
    with contextlib.suppress(Exception):
        session.client.close()
    pyspark_internals.forget_session(session)


def patch_grpc_errors(core: ModuleType) -> None:
    """Give PySpark's UNAUTHENTICATED and final UNAVAILABLE errors our conditions and the
    fix (``pyspark.sql.connect.client.core``; idempotent)."""
    import grpc

    client_class = core.SparkConnectClient
    original = pyspark_internals.rpc_error_handler(client_class)
    if getattr(original, "_spark_cdc", False):
        return

    def handle_rpc_error(self: Any, rpc_error: Any) -> NoReturn:
        code = rpc_error.code() if callable(getattr(rpc_error, "code", None)) else None
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAVAILABLE):
            host, port = address(f"sc://{pyspark_internals.client_endpoint(self)}")
            if code == grpc.StatusCode.UNAUTHENTICATED:
                said = rpc_error.details() if callable(getattr(rpc_error, "details", None)) else ""
                raise unauthenticated(host, port, str(said or "").strip()) from None
            raise unreachable(host, port, "retried until PySpark's retries ran out") from None
        original(self, rpc_error)  # raises

    handle_rpc_error._spark_cdc = True  # type: ignore[attr-defined]
    pyspark_internals.replace_rpc_error_handler(client_class, handle_rpc_error)


SERVER_GONE_AFTER_S = 30.0
# How long a lost server's port must refuse connections to be named gone: long enough for a
# port between two servers (a restart's), short enough to be named in a few seconds.
REFUSED_FOR_S = 2.0


def server_gone_after(environ: Any = os.environ) -> float:
    """How long a session's retries of a lost connection go on: ``$SPARK_CDC_SERVER_GONE_AFTER``
    seconds, else 30; a value that is not a positive number is refused by name."""
    given = environ.get(SERVER_GONE_AFTER_ENV)
    if given is None or not given.strip():
        return SERVER_GONE_AFTER_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ConnectionProblem(
            "SPARK_CDC_CONNECTION.INVALID_SERVER_GONE_AFTER",
            variable=SERVER_GONE_AFTER_ENV,
            value=given,
        )
    return seconds


def bound_lost_connection_retries(core: ModuleType) -> None:
    """Every new Connect client's default retry policy gives up on a lost connection
    ``server_gone_after()`` seconds after it was first lost, in each call
    (``pyspark.sql.connect.client.core``; idempotent). Policies a user sets later are theirs."""
    from pyspark.sql.connect.client.retries import DefaultPolicy, RetryPolicyState

    client_class = core.SparkConnectClient
    original_init = client_class.__init__
    if getattr(original_init, "_spark_cdc", False):
        return

    class LostConnectionState(RetryPolicyState):
        """One call's retries: PySpark's waits, up to the call's deadline for a lost
        connection. ``next_attempt`` takes the exception from 4.1 on; 4.0 passes it to
        ``can_retry`` just before."""

        def __init__(self, policy: Any) -> None:
            super().__init__(policy)
            self._session_policy = policy
            self._seen: BaseException | None = None
            self._lost_since: float | None = None
            self._refused_since: float | None = None

        def can_retry(self, exception: BaseException) -> bool:
            self._seen = exception
            return bool(super().can_retry(exception))

        def next_attempt(self, *args: Any) -> int | None:
            exception = args[0] if args else self._seen
            wait = super().next_attempt(*args)
            if not _connection_lost(exception):
                return wait
            policy = self._session_policy
            now = time.monotonic()
            self._lost_since = self._lost_since if self._lost_since is not None else now
            deadline = self._lost_since + policy.gone_after
            refused = _refuses(policy.host, policy.port)
            if refused:
                self._refused_since = self._refused_since or now
                deadline = min(deadline, self._refused_since + REFUSED_FOR_S)
            else:
                self._refused_since = None
            if wait is None or now >= deadline or policy.gone:
                policy.gone = True  # the session's later calls do not wait for it again
                raise ConnectionProblem(
                    "SPARK_CDC_CONNECTION.SERVER_GONE",
                    host=policy.host,
                    port=policy.port,
                    seconds=f"{now - self._lost_since:.0f}",
                    reason="its port refuses connections" if refused else "no answer",
                    variable=SERVER_GONE_AFTER_ENV,
                ) from None
            return int(min(wait, (deadline - now) * 1000))

    class LostConnectionPolicy(DefaultPolicy):
        """PySpark's default policy, its settings kept, with a deadline for a lost
        connection."""

        def __init__(self, default: Any, endpoint: str, gone_after: float) -> None:
            super().__init__()
            self.__dict__.update(default.__dict__)
            self.host, self.port = address(f"sc://{endpoint}")
            self.gone_after = gone_after
            self.gone = False  # a call of this session found its server gone

        def to_state(self) -> Any:
            return LostConnectionState(self)

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        # Read first: a value refused after PySpark made the client would leave a client with
        # PySpark's own retries, whose exit hook then retried a stopped server for minutes.
        gone_after = server_gone_after()
        original_init(self, *args, **kwargs)
        endpoint = pyspark_internals.client_endpoint(self)
        self.set_retry_policies(
            [
                LostConnectionPolicy(p, endpoint, gone_after) if type(p) is DefaultPolicy else p
                for p in self.get_retry_policies()
            ]
        )

    init._spark_cdc = True  # type: ignore[attr-defined]
    client_class.__init__ = init


def _refuses(host: str, port: int) -> bool:
    """Whether ``host`` answers at once that nothing listens on ``port`` (a host that does
    not answer, or something listening, is not a refusal)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def _connection_lost(exception: BaseException | None) -> bool:
    """A gRPC UNAVAILABLE: the connection could not be made or was cut."""
    import grpc

    code = getattr(exception, "code", None)
    return (
        isinstance(exception, grpc.RpcError)
        and callable(code)
        and code() == grpc.StatusCode.UNAVAILABLE
    )
