"""The test harness: one real Spark Connect server per session, never a mock.

``SPARK_REMOTE`` if set; else, by ``SPARK_CDC_TEST_SERVER`` (``tests/support/harness.py``), the
server container when a Docker engine answers, or a local server from the installed pyspark
on 127.0.0.1 and a free port. A failing test gets the tail of the server's log in its report.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.connect.streaming.query import StreamingQuery
from pyspark.sql.connect.streaming.readwriter import DataStreamWriter
from spark_cdc.late_rows import first_drop
from spark_cdc.testing.local_server import RUNNING, start_local_server
from spark_cdc.testing.postgres import PostgresServer, server_binaries, start_postgres

from tests.support import harness
from tests.support.processes import Command

ROOT = Path(__file__).resolve().parents[1]
_server: harness.Server | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="run the long variants of the reliability suite (more kills, longer writers)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """The commands a test starts begin as from a terminal: a runner that started pytest in
    the background or under ``nohup`` (SIGINT, SIGHUP ignored, which children inherit and
    ``spark-cdc`` then leaves ignored) must not turn the stop-signal tests into no-ops."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in (signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(name) is signal.SIG_IGN:
            signal.signal(name, signal.SIG_DFL)


# The modules that take longest in CI (their summed test times, measured), longest first.
# ``./dev test`` hands modules to its workers in collection order (``--dist loadfile
# --no-loadscope-reorder``), so these start first and the run does not end on one worker
# finishing a four-minute module while the other waits: xdist's own order (most tests first)
# put the single-test modules of minutes last.
_LONGEST_FIRST = (  # by their seconds in a whole run on a loaded machine (CI, 2026-12-06)
    "server/test_iceberg_source.py",
    "server/test_apply_kills.py",
    "server/test_source_post_processing.py",
    "server/test_reliability.py",
    "server/test_apply_changes.py",
    "server/test_postgres_kills.py",
    "server/test_thin_client.py",
    "server/test_apply_cluster.py",
    "server/test_apply_cli.py",
    "server/test_dead_server.py",
    "server/test_apply_snapshots.py",
    "server/test_cli.py",
    "server/test_long_lived_server.py",
    "server/test_apply_hand_edits.py",
    "server/test_postgres_source.py",
    "server/test_refusals.py",
    "unit/test_cli_signals_own_server.py",
    "server/test_net_changes.py",
    "server/test_model.py",
    "server/test_delta_stream.py",
    "server/test_apply_iceberg.py",
    "server/test_object_store.py",
    "server/test_live_feed.py",
    "server/test_decode_changes.py",
    "server/test_cli_signals.py",
    "server/test_shared_workers.py",
    "server/test_apply_result_size.py",
    "server/test_postgres_cli.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark what needs the harness server and what is slow, so ``-m "not server and not slow"``
    (``./dev test --fast``) selects the quick loop without a list kept by hand: ``server`` for
    every test whose fixtures reach ``spark_remote`` (directly or through ``spark`` and the
    like), ``slow`` for every ``local_process`` test (it starts a Spark Connect server of its
    own). Other slow tests carry ``slow`` in their module. Then the longest modules go first
    (``_LONGEST_FIRST``), the others after them in their own order."""
    for item in items:
        if "spark_remote" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.server)
        if item.get_closest_marker("local_process") is not None:
            item.add_marker(pytest.mark.slow)
    rank = {ROOT / "tests" / module: place for place, module in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))


@pytest.fixture(scope="session")
def long_run(request: pytest.FixtureRequest) -> bool:
    """True under ``--long``: reliability tests scale their rounds up."""
    return bool(request.config.getoption("--long"))


def _say(request: pytest.FixtureRequest, line: str) -> None:
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n[spark-cdc-connect harness] {line}", flush=True)


def _container(request: pytest.FixtureRequest, basetemp: Path) -> harness.Server | None:
    """The server container, or None (said why) when the mode allows a local server."""
    from spark_cdc.testing.container import SparkConnectContainerError

    mode = harness.mode()
    reason = harness.container_unavailable()
    server = None
    if reason is None:
        try:
            server = harness.start_container([basetemp])
        except SparkConnectContainerError as error:
            reason = str(error).splitlines()[0]
    if server is not None:
        return server
    if mode == "container":
        pytest.exit(f"SPARK_CDC_TEST_SERVER=container, but {reason}.", returncode=3)
    harness.fallback_reason = str(reason)
    _say(request, f"{reason}: using a local Spark Connect server")
    return None


@pytest.fixture(scope="session")
def spark_remote(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    global _server
    url = os.environ.get("SPARK_REMOTE")
    if url:
        harness.fallback_reason = "SPARK_REMOTE is set"
        _say(request, f"using SPARK_REMOTE={url.split(';')[0]}")
        yield url
        return
    basetemp = tmp_path_factory.getbasetemp()
    if harness.mode() != "local":
        _server = _container(request, basetemp)
    if _server is not None:
        harness.kind = "container"
        _say(request, f"using the server container at {_server.url.split('/;')[0]}")
    else:
        log_path = tmp_path_factory.mktemp("server") / "server.log"
        _server = start_local_server(
            conf=harness.TEST_SERVER_CONF,
            log_path=log_path,
        )
        _say(request, f"using a local Spark Connect server at {_server.url}")
    try:
        yield _server.url
    finally:
        _server.stop()
        _server = None


@pytest.fixture(scope="session")
def spark(spark_remote: str) -> Iterator[SparkSession]:
    from spark_cdc import register_delta_changelog, register_iceberg_changelog
    from spark_cdc.server_plugin.changefeed.sample_changelog import register

    session = SparkSession.builder.remote(spark_remote).getOrCreate()
    register(session)
    if os.environ.get("SPARK_REMOTE"):
        # A server we did not start may lack the plugin; the local one discovers it.
        register_delta_changelog(session)
        register_iceberg_changelog(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def server_host(spark_remote: str) -> str:
    """This machine's address as the harness server reaches it: 127.0.0.1 for a local
    server, the Docker bridge's gateway for the container (a service a test starts here
    listens there too)."""
    if isinstance(_server, harness.ContainerServer):
        return str(_server.container.host_address)
    return "127.0.0.1"


@pytest.fixture(scope="module")
def pg(server_host: str) -> Iterator[PostgresServer]:
    """A real PostgreSQL the Spark server reaches, one per test module (as every service
    the tests start)."""
    if server_binaries() is None:
        pytest.fail("PostgreSQL's server binaries are missing: apt-get install postgresql")
    with start_postgres(server_host) as server:
        yield server


@pytest.fixture
def server_log(spark_remote: str) -> Callable[[], str | None]:
    """The harness server's whole log so far, for what it must not hold; None on a server
    the harness did not start (``SPARK_REMOTE``)."""
    return lambda: None if _server is None else _server.log_tail(1_000_000)


@pytest.fixture
def commands() -> Iterator[list[Command]]:
    """Commands a test starts; any still running when it ends (a failed wait) is killed
    with its process group, so no test leaves a stream running on the shared server."""
    started: list[Command] = []
    yield started
    for command in started:
        if command.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(command.process.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project's wheel, built once per session (tests/unit/test_packaging.py reads it,
    tests/server/test_thin_client.py installs it)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("spark_cdc_connect-*.whl")
    return built


@pytest.fixture
def seed() -> int:
    """A random seed for tests that make random choices, printed so a failure replays."""
    value = int(os.environ.get("RELIABILITY_SEED") or random.randrange(2**32))
    print(f"reliability seed: {value} (RELIABILITY_SEED={value} replays the same choices)")
    return value


@pytest.fixture
def query_name() -> str:
    return f"q_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


_started: list[StreamingQuery] = []


def _record_starts() -> None:
    """Note every query a test starts, through the method all streaming starts go through."""
    start = DataStreamWriter._start_internal

    @functools.wraps(start)
    def recorded(self: DataStreamWriter, *args: Any, **kwargs: Any) -> Any:
        query = start(self, *args, **kwargs)
        _started.append(query)
        return query

    DataStreamWriter._start_internal = recorded  # type: ignore[method-assign]


_record_starts()


def _on_harness_server(query: StreamingQuery, remote: str) -> bool:
    """Whether the query's session is open on the harness server (a test may start and kill
    servers of its own; asking a dead one would retry for minutes)."""
    session = query._session
    endpoint = remote.removeprefix("sc://").split("/")[0]
    return not session.is_stopped and session.client._builder.endpoint == endpoint


@pytest.fixture(autouse=True)
def _streams_drop_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every stream a test runs on the harness server drops no row behind the watermark
    (Spark's silent loss), checked on the progress Spark keeps for it, and no query outlives
    its test (a leftover stream holds a Python worker on the server)."""
    _started.clear()
    yield
    started, _started[:] = list(_started), []
    if "spark_remote" not in request.fixturenames:
        return
    remote: str = request.getfixturevalue("spark_remote")
    watched = [q for q in started if _on_harness_server(q, remote)]
    if request.node.get_closest_marker("drops_late_rows") is None:
        for query in watched:
            drop = first_drop(query.recentProgress)
            assert drop is None, (
                f"query {query.name or query.id}: micro-batch {drop[0]} dropped {drop[1]} "
                "row(s) behind the watermark"
            )
    for query in watched:
        if query.isActive:
            query.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    if _server is not None:
        report.sections.append(("Spark Connect server log (tail)", _log_tail(_server)))
    for server in RUNNING - {_server}:  # servers the test's own fixtures started
        report.sections.append(
            (f"log of its own server on port {server.port} (tail)", _log_tail(server))
        )


def _log_tail(server: harness.Server) -> str:
    """The server's last lines, or why there are none: a report hook that raises ends the
    whole session (pytest's INTERNALERROR), as a Docker engine too loaded to answer within
    its timeout once did in CI."""
    try:
        return server.log_tail(120)
    except Exception as error:  # any failure here must not end the run
        return f"(the server's log could not be read: {type(error).__name__}: {error})"
