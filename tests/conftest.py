"""The test harness: one real Spark Connect server per session, never a mock.

Order: ``SPARK_REMOTE`` if set; else the compose stack (compose/) when a Docker engine is
reachable; else a local server from the installed pyspark, on 127.0.0.1 and a free port,
stopped by its PID at the end. A failing test gets the tail of
the local server's log in its report.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from client.local_server import LocalServer, start_local_server

# Small shuffle width: the streaming aggregate runs a task per partition each micro-batch.
TEST_SERVER_CONF = {"spark.sql.shuffle.partitions": "4"}

_local_server: LocalServer | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="run the long variants of the reliability suite (more kills, longer writers)",
    )


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    """True under ``--long``: reliability tests scale their rounds up."""
    return bool(request.config.getoption("--long"))


@functools.lru_cache(maxsize=1)
def docker_engine_reachable() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=30)
    return probe.returncode == 0


def server_choice() -> str:
    """Which server the session uses, in words (never with a token)."""
    url = os.environ.get("SPARK_REMOTE")
    if url:
        return f"using SPARK_REMOTE={url.split(';')[0]}"
    if not docker_engine_reachable():
        return "no Docker engine reachable: using a local Spark Connect server"
    return "Docker engine found: building and starting the compose stack (compose/)"


@pytest.fixture(scope="session")
def spark_remote(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    global _local_server
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n[spark-cdc-connect harness] {server_choice()}", flush=True)
    url = os.environ.get("SPARK_REMOTE")
    if url:
        yield url
        return
    if docker_engine_reachable():
        from tests.compose_server import compose_server

        with compose_server(tmp_path_factory.getbasetemp()) as url:
            yield url
        return
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    _local_server = start_local_server(conf=TEST_SERVER_CONF, log_path=log_path)
    try:
        yield _local_server.url
    finally:
        _local_server.stop()
        _local_server = None


@pytest.fixture(scope="session")
def spark(spark_remote: str) -> Iterator[SparkSession]:
    from server_plugin.delta_changelog import register as register_delta_changelog
    from server_plugin.sample_changelog import register

    session = SparkSession.builder.remote(spark_remote).getOrCreate()
    register(session)
    if os.environ.get("SPARK_REMOTE"):
        # A server we did not start may lack the plugin; the local one discovers it.
        register_delta_changelog(session)
    yield session
    session.stop()


@pytest.fixture
def query_name() -> str:
    return f"q_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


@pytest.fixture(autouse=True)
def _stop_streams(request: pytest.FixtureRequest) -> Iterator[None]:
    """No query outlives its test: a leftover stream holds a Python worker on the server."""
    yield
    if "spark" in request.fixturenames:
        session: SparkSession = request.getfixturevalue("spark")
        for query in session.streams.active:
            query.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and _local_server is not None:
        report.sections.append(("Spark Connect server log (tail)", _local_server.log_tail(120)))
