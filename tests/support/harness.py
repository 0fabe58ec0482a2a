"""Which real Spark Connect server the tests run against, and servers of their own.

``SPARK_CDC_TEST_SERVER`` chooses: ``auto`` (default) runs the server container
(``spark_cdc.testing.container``, built from ``compose/Dockerfile``) when a Docker engine
answers and the container starts, else a local server from the installed pyspark, saying in
one line why; ``container`` makes the container mandatory (CI: the run fails, saying why, if
it cannot start); ``local`` never uses Docker. ``SPARK_REMOTE`` overrides all three.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spark_cdc.testing.local_server import LocalServer, start_local_server

MODES = ("auto", "container", "local")
# Small shuffle width: the streaming aggregate runs a task per partition each micro-batch.
# A Python worker (UDF, data source planner or reader) busy or waiting for over two minutes
# writes its stack and the JVM's view of its socket to the server log: a hang under a loaded
# CI machine is then diagnosable from the log a failure attaches (4.1+; 4.0 ignores them).
TEST_SERVER_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.python.worker.tracebackDumpIntervalSeconds": "120",
    "spark.sql.execution.pyspark.udf.tracebackDumpIntervalSeconds": "120",
    "spark.python.worker.idleTimeoutSeconds": "120",
    "spark.sql.execution.pyspark.udf.idleTimeoutSeconds": "120",
}


class Server(Protocol):
    """What a test needs of a server it owns: where it is, and how to kill it."""

    @property
    def url(self) -> str: ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    def stop(self) -> None: ...

    def log_tail(self, lines: int = 80) -> str: ...


def mode() -> str:
    chosen = os.environ.get("SPARK_CDC_TEST_SERVER", "auto")
    if chosen not in MODES:
        raise ValueError(f"SPARK_CDC_TEST_SERVER={chosen!r}: use one of {', '.join(MODES)}.")
    return chosen


@functools.lru_cache(maxsize=1)
def container_unavailable() -> str | None:
    """Why the server container cannot be used here, or None."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30)
    if probe.returncode != 0:
        return "no Docker engine answers (`docker info` failed)"
    try:
        import testcontainers  # noqa: F401
    except ImportError:
        return "testcontainers is not installed (the package's container extra)"
    return None


@dataclass(eq=False)
class ContainerServer:
    """A started ``SparkConnectContainer`` seen through ``Server``."""

    container: Any

    @property
    def url(self) -> str:
        return str(self.container.url)

    def alive(self) -> bool:
        wrapped = self.container.get_wrapped_container()
        wrapped.reload()
        return bool(wrapped.status == "running")

    def kill(self) -> None:
        self.container.kill()
        self.container.get_wrapped_container().wait(timeout=60)

    def stop(self) -> None:
        self.container.stop()

    def log_tail(self, lines: int = 80) -> str:
        logs: bytes = self.container.get_wrapped_container().logs(tail=lines)
        return logs.decode(errors="replace")


def start_container(
    shared: list[Path], conf: Mapping[str, str] = TEST_SERVER_CONF, **options: Any
) -> Server:
    """``options``: ``SparkConnectContainer``'s (a token, shared Python workers)."""
    from spark_cdc.testing.container import SparkConnectContainer

    container = SparkConnectContainer(shared=shared, conf=conf, **options)
    container.start()
    return ContainerServer(container)


# The kind of server the session's harness uses ("container" or "local") and, when it is no
# container, why; set by conftest.
kind = "local"
fallback_reason = "SPARK_CDC_TEST_SERVER=local"


@contextmanager
def dedicated_server(tmp_path: Path, name: str, **options: Any) -> Iterator[Server]:
    """A server of the test's own, of the harness's kind (a container when the harness
    runs one, so kill tests kill a container), always stopped. ``options``: a ``token``,
    ``shared_python_workers``, which both kinds take."""
    server: Server
    if kind == "container":
        server = start_container([tmp_path], **options)
    else:
        local: LocalServer = start_local_server(
            conf=TEST_SERVER_CONF,
            log_path=tmp_path / f"{name}.log",
            driver_memory="2g",
            **options,
        )
        server = local
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def dedicated_session(tmp_path: Path, name: str) -> Iterator[tuple[Server, Any]]:
    """A server of our own (``dedicated_server``) and a session on it, both always ended.
    A session whose server is gone is dropped without ReleaseSession: pyspark retries an
    unreachable server for minutes, and there is nothing left to release."""
    from pyspark.sql import SparkSession

    session: Any = None
    with dedicated_server(tmp_path, name) as server:
        try:
            session = SparkSession.builder.remote(server.url).create()
            yield server, session
        finally:
            if session is not None:
                session.release_session_on_close = server.alive()
                session.stop()


def container_processes(wrapped: Any) -> tuple[int, dict[int, tuple[int, list[str]]]]:
    """A running container's first process (its PID 1) as this machine numbers it, and all its
    processes, each pid to its parent and argv (docker-py's container:
    ``get_wrapped_container()``). Read from this machine's ``/proc`` under the first process
    the Docker engine names: the engine runs here, so its containers' processes are this
    machine's. Not through ``docker exec``, whose output came back empty once in CI under
    load."""
    wrapped.reload()
    root = int(wrapped.attrs["State"]["Pid"])
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def inside(pid: int) -> bool:
        while pid > 1 and pid != root:
            pid = parents.get(pid, 0)
        return pid == root

    found: dict[int, tuple[int, list[str]]] = {}
    for pid, parent in parents.items():
        if inside(pid):
            try:
                argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            found[pid] = (parent, [arg.decode(errors="replace") for arg in argv if arg])
    assert root in found, f"the container's first process {root} is not seen from here"
    return root, found
