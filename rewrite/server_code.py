"""Which code runs the server-side work a client starts: the server's installed copy of
this package, by name, or code this client ships (pickled), and the refusal when neither
can run.

PySpark refuses to run pickled code in a Python worker of another minor version than the
client's (``PYTHON_VERSION_MISMATCH``), and a user cannot choose a shared server's Python.
So server-side work runs the server's installed code whenever the server has this package
at the same ``PROTOCOL``: sources and sinks started by name, the net changes operator
referenced by name (``rewrite.net_changes``). A server without it gets the code shipped,
which works only on the client's own Python minor version; otherwise the work is refused
before it starts, naming both Pythons and both fixes. Learning this costs one round trip
per session (``server_facts``), taken when a stream starts, a sink is first used or a
source is registered: never while a plan is built.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.server_plugin.server_info import INFO_SOURCE, PROTOCOL

_MISMATCH = re.compile(r"Python in worker has different version:?\s*\(?(\d+)[.,]\s*(\d+)")


@dataclass(frozen=True)
class ServerFacts:
    """The server's Python minor version, and its installed package's protocol and release
    (None: not installed)."""

    python: str
    protocol: int | None = None
    package: str | None = None

    @property
    def runs_installed_code(self) -> bool:
        return self.protocol == PROTOCOL


_FACTS: dict[str, ServerFacts] = {}


def client_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def server_facts(spark: Any) -> ServerFacts:
    """What the server has, asked once per session."""
    key = str(getattr(spark, "session_id", id(spark)))
    if key not in _FACTS:
        _FACTS[key] = _asked(spark)
    return _FACTS[key]


def uses_installed_code(spark: Any, feature: str) -> bool:
    """True when the server's installed package runs ``feature``; False when code shipped
    from this client must (the server lacks the package, or has another protocol of it) and
    can (same Python minor version). Refused by name otherwise."""
    return runs_installed_code(server_facts(spark), feature)


def runs_installed_code(facts: ServerFacts, feature: str) -> bool:
    """``uses_installed_code``'s decision, for a server with ``facts``."""
    if facts.runs_installed_code:
        return True
    if facts.python == client_python():
        return False
    if facts.protocol is not None:
        raise cdc_error(
            "SPARK_CDC.SERVER_PACKAGE_MISMATCH",
            feature=feature,
            server=facts.package,
            serverProtocol=facts.protocol,
            protocol=PROTOCOL,
        )
    raise cdc_error(
        "SPARK_CDC.SERVER_PYTHON_MISMATCH",
        feature=feature,
        serverPython=facts.python,
        clientPython=client_python(),
    )


def _asked(spark: Any) -> ServerFacts:
    from pyspark.errors import PySparkException

    try:
        row = spark.read.format(INFO_SOURCE).load().first()
    except PySparkException as problem:
        # An AnalysisException on 4.1+; 4.0 sends an UnknownException naming the condition.
        if "DATA_SOURCE_NOT_FOUND" not in f"{problem.getCondition()} {problem}":
            raise
        return ServerFacts(python=_worker_python(spark))
    return ServerFacts(python=row[0], protocol=int(row[1]), package=row[2])


def _worker_python(spark: Any) -> str:
    """The Python minor version of the server's workers, from a one-row UDF (its code
    travels by value: the server has nothing of ours). A worker of another version refuses
    it with PySpark's ``PYTHON_VERSION_MISMATCH``, which names its version."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    version = F.udf(lambda: ".".join(map(str, __import__("sys").version_info[:2])), "string")
    try:
        return str(spark.range(1).select(version()).first()[0])
    except PySparkException as problem:
        found = _MISMATCH.search(str(problem))
        if found is None:
            raise
        return f"{found.group(1)}.{found.group(2)}"


_PARALLELISM: dict[str, int] = {}


def server_parallelism(spark: Any) -> int:
    """How many tasks the server runs at once (its default parallelism: the cores of its
    executors), asked once per session: a range without a partition count is split into
    that many."""
    from pyspark.sql import functions as F

    key = str(getattr(spark, "session_id", id(spark)))
    if key not in _PARALLELISM:
        ids = spark.range(1 << 16).select(F.spark_partition_id().alias("task"))
        row = ids.agg(F.max("task")).first()
        _PARALLELISM[key] = max(1, int(row[0]) + 1)
    return _PARALLELISM[key]


def make_available(spark: Any, plugin: type, feature: str) -> None:
    """Make the source or sink ``plugin`` usable by its name on the server: the installed
    one when the server has it (shipping ours would shadow it on 4.1+, with code only this
    client's Python runs), else ours registered by value, refused by name when the
    server's Python cannot run it."""
    from spark_cdc.server_plugin.registration import register_by_value

    if not uses_installed_code(spark, feature):
        register_by_value(spark, plugin)
