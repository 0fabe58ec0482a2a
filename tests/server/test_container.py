"""The server container as users get it: the pytest fixtures (``spark_cdc.testing.pytest_plugin``),
its security, and the compose stack started the way the README says.

Runs wherever the harness runs the container (CI makes it mandatory); on a machine without a
Docker engine these tests are skipped, saying why, and the rest of the suite uses a local
server.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyspark
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from spark_cdc import ChangelogReader, read
from spark_cdc.testing.idle_daemons import DEFAULT_IDLE_SECONDS
from spark_cdc.testing.local_server import free_port

from tests.support import harness
from tests.support.delta_tables import rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def _container_harness(spark_remote: str) -> None:
    """Session-scoped, so it runs before the plugin's session fixtures build an image."""
    if harness.kind != "container":
        pytest.skip(f"the harness runs no server container here ({harness.fallback_reason})")


def _updated_table(path: str) -> None:
    write_deltalake(path, rows(range(4)))
    DeltaTable(path).update({"amount": "amount * 10"}, predicate="id = 1")


def _assert_reads_the_update(spark: SparkSession, path: str) -> None:
    """A token-authenticated read of a table in the shared folder, checked whole."""
    df = ChangelogReader(spark).options(rowId="id", computeUpdates=True).changes(path)
    assert df.schema == StructType(
        [
            StructField("id", LongType()),
            StructField("name", StringType()),
            StructField("amount", DoubleType()),
            StructField("part", StringType()),
            StructField("_change_type", StringType()),  # relabelled by update detection
            StructField("_commit_version", LongType(), False),
            StructField("_commit_timestamp", TimestampType(), False),
        ]
    )
    stamps = {
        h["version"]: datetime.fromtimestamp(h["timestamp"] / 1000, timezone.utc)
        for h in DeltaTable(path).history()
    }
    got = sorted((*r[:-1], r[-1].astimezone(timezone.utc)) for r in df.collect())
    want = sorted(
        [(i, f"a{i}", float(i), "even" if i % 2 == 0 else "odd", "insert", 0) for i in range(4)]
        + [
            (1, "a1", 1.0, "odd", "update_preimage", 1),
            (1, "a1", 10.0, "odd", "update_postimage", 1),
        ]
    )
    assert [r[:-1] for r in got] == want
    assert all(r[-1] == stamps[r[-2]] for r in got)


# -- the pytest fixtures users get ---------------------------------------------------------


def test_the_fixtures_give_a_server_that_reads_a_shared_table(
    spark_cdc_session: SparkSession, spark_cdc_shared: Path
) -> None:
    path = str(spark_cdc_shared / "orders")
    _updated_table(path)
    _assert_reads_the_update(spark_cdc_session, path)
    assert spark_cdc_session.version == pyspark.__version__  # the client's Spark


def test_the_postgres_fixture_is_a_database_the_containers_server_reads(
    spark_cdc_session: SparkSession, spark_cdc_postgres: Any
) -> None:
    """``spark_cdc_postgres`` listens where the container reaches this machine, and its
    ``options()`` say so: a table's logged insert reads back through the server."""
    pg = spark_cdc_postgres
    pg.sql(
        "CREATE TABLE fixture_orders (id int PRIMARY KEY, v text);"
        "CREATE PUBLICATION spark_cdc_public_fixture_orders FOR TABLE fixture_orders;"
        "SELECT pg_create_logical_replication_slot('spark_cdc_public_fixture_orders', "
        "'pgoutput');"
        "INSERT INTO fixture_orders VALUES (1, 'a');"
    )
    feed = (
        read(spark_cdc_session)
        .format("postgres")
        .options(**pg.options(), startingVersion=0)
        .load("public.fixture_orders")
    )
    assert [(r.id, r.v, r._change_type) for r in feed.collect()] == [(1, "a", "insert")]
    assert pg.options()["host"] == pg.reached_at != "127.0.0.1"  # the bridge's gateway


# -- security ------------------------------------------------------------------------------


def _refused(url: str) -> str:
    session = SparkSession.builder.remote(url).create()
    session.release_session_on_close = False
    try:
        with pytest.raises(SparkConnectGrpcException) as refused:
            session.range(1).collect()
        return str(refused.value)
    finally:
        session.stop()


def test_clients_without_the_token_or_with_a_wrong_one_are_refused(spark_cdc_server: Any) -> None:
    base = spark_cdc_server.url.split("/;")[0]
    assert "No authentication token provided" in _refused(base)
    assert "Invalid authentication token" in _refused(f"{base}/;token=not-the-token")


def _host_addresses() -> set[str]:
    """This machine's non-loopback IPv4 addresses."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    return {a for a in out.split() if "." in a and not a.startswith("127.")}


def test_the_port_is_published_on_loopback_only(spark_cdc_server: Any) -> None:
    container = spark_cdc_server.get_wrapped_container()
    container.reload()
    bindings = container.attrs["NetworkSettings"]["Ports"]["15002/tcp"]
    assert [b["HostIp"] for b in bindings] == ["127.0.0.1"]
    port = int(bindings[0]["HostPort"])
    addresses = _host_addresses()
    assert addresses, "no non-loopback address to try"
    for address in addresses:
        with socket.socket() as sock:
            sock.settimeout(5)
            assert sock.connect_ex((address, port)) != 0, f"{address}:{port} accepts connections"


def test_the_token_is_in_no_log_command_line_or_repr(
    spark_cdc_server: Any, spark_cdc_session: SparkSession
) -> None:
    assert spark_cdc_session.range(3).count() == 3  # the server has logged a session
    # Spark's foreachBatch worker prints its session URL, token and all, to the log.
    stream = spark_cdc_session.readStream.format("rate").load().writeStream
    query = stream.foreachBatch(lambda batch, batch_id: None).start()
    query.processAllAvailable()
    query.stop()
    token = spark_cdc_server.url.split(";token=")[1]
    container = spark_cdc_server.get_wrapped_container()
    container.reload()
    logs = container.logs().decode(errors="replace")
    assert token not in logs
    if "ForeachBatch worker is starting" in logs:  # it prints the URL (4.3)
        assert "token=***" in logs
    assert token not in repr(spark_cdc_server)
    config = container.attrs["Config"]
    assert token not in " ".join([*(config["Entrypoint"] or []), *(config["Cmd"] or [])])
    _, processes = harness.container_processes(container)
    commands = " ".join(" ".join(argv) for _, argv in processes.values())
    assert "SparkConnectServer" in commands and token not in commands


def test_the_daemon_reaper_runs_beside_the_server(spark_cdc_server: Any) -> None:
    """The entry point starts ``spark_cdc.testing.idle_daemons`` (tested on a real server
    in tests/unit/test_idle_daemons.py) on the server's process, PID 1, which exec keeps."""
    container = spark_cdc_server.get_wrapped_container()
    first, processes = harness.container_processes(container)
    (reaper,) = [item for item in processes.values() if "spark_cdc.testing.idle_daemons" in item[1]]
    assert "org.apache.spark.deploy.SparkSubmit" in processes[first][1]
    assert reaper[0] == first and reaper[1][-2:] == ["1", f"{DEFAULT_IDLE_SECONDS:g}"]


def test_python_workers_load_pysparks_bytecode_from_its_zip(
    spark_cdc_session: SparkSession,
) -> None:
    """The image's pyspark.zip, first on every Python worker's path, holds bytecode
    (compose/precompile_zips.py): a worker imports PySpark from it without compiling."""
    from collections.abc import Iterable

    import pyarrow as pa

    def where(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        import pyspark as worker_pyspark

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"file": [worker_pyspark.__file__]})

    rows = spark_cdc_session.range(4).mapInArrow(where, "file string").collect()  # a row a task
    assert {row.file for row in rows} == {"/opt/spark/python/lib/pyspark.zip/pyspark/__init__.pyc"}


def test_starts_at_once_remove_the_same_orphans_without_failing(spark_cdc_server: Any) -> None:
    """Two test workers starting together each remove the containers a killed run left
    (their owner process gone): the one that comes second finds them gone or being removed
    (Docker's 404 or 409), which is no failure. CI's two workers failed every test of one of
    them on that 409 once. The running server, whose owner lives, is kept."""
    import threading

    from spark_cdc.testing.container import _remove_orphans
    from spark_cdc.testing.owners import LABEL, owner_label

    client = spark_cdc_server.get_docker_client().client
    server = spark_cdc_server.get_wrapped_container()
    ended = subprocess.Popen(["sleep", "60"])
    label = {LABEL: owner_label(ended.pid)}
    ended.kill()
    ended.wait()
    orphans = [
        client.containers.create(server.image.id, labels=label, command=["true"]) for _ in range(4)
    ]
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def remove() -> None:
        barrier.wait()
        try:
            _remove_orphans(client)
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=remove) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    left = {c.id for c in client.containers.list(all=True, filters={"label": LABEL})}
    assert left.isdisjoint(o.id for o in orphans) and server.id in left


# -- the compose stack, started the way the README says ------------------------------------


def _compose_commands() -> list[list[str]]:
    commands = []
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        commands.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        commands.append(["docker-compose"])
    return commands


@pytest.fixture
def compose_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The stack up with the documented variables only; always taken down again."""
    compose: list[str] = request.param
    env = {
        **os.environ,
        "SPARK_CDC_TOKEN": secrets.token_urlsafe(24),
        "SPARK_CDC_PORT": str(free_port()),
        "SPARK_CDC_DATA": str(tmp_path),
        "SPARK_CDC_DATA_IN_CONTAINER": str(tmp_path),
        "SPARK_CDC_UID": str(os.getuid()),
        "SPARK_CDC_GID": str(os.getgid()),
        # The client's Spark, as the harness's image: Docker's layer cache serves both.
        "SPARK_CDC_SPARK_VERSION": pyspark.__version__,
    }
    env.pop("SPARK_CDC_CA_CERTS", None)  # compose takes them from compose/ca-certs
    project = [
        "-p",
        f"sparkcdc{secrets.token_hex(4)}",
        "-f",
        str(ROOT / "compose/docker-compose.yml"),
    ]
    up = ["up", "--build", "--wait"] if compose[0] == "docker" else ["up", "-d", "--build"]
    try:
        started = subprocess.run([*compose, *project, *up], env=env, capture_output=True, text=True)
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        _wait_healthy(compose, project, env)
        yield env
    finally:
        # --rmi local: the image is tagged with this run's project name, so each run would
        # otherwise leave a 1.6 GB tag behind (ten CI runs held 16 GB here).
        subprocess.run(
            [*compose, *project, "down", "-v", "--rmi", "local"], env=env, capture_output=True
        )


def _wait_healthy(compose: list[str], project: list[str], env: dict[str, str]) -> None:
    ids = subprocess.run(
        [*compose, *project, "ps", "-q"], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        status = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", *ids],
            capture_output=True,
            text=True,
        ).stdout.split()
        if status == ["healthy"]:
            return
        time.sleep(1)
    raise AssertionError(f"the compose stack is not healthy after 240s: {status}")


@pytest.mark.parametrize(
    "compose_stack",
    [pytest.param(c, id=" ".join(c)) for c in _compose_commands()]
    or [pytest.param(None, marks=pytest.mark.skip(reason="no docker compose or docker-compose"))],
    indirect=True,
)
def test_the_compose_stack_serves_a_token_authenticated_read(
    compose_stack: dict[str, str], tmp_path: Path
) -> None:
    path = str(tmp_path / "orders")
    _updated_table(path)
    url = f"sc://localhost:{compose_stack['SPARK_CDC_PORT']}/;token={compose_stack['SPARK_CDC_TOKEN']}"
    session = SparkSession.builder.remote(url).create()
    try:
        _assert_reads_the_update(session, path)
    finally:
        session.stop()


def test_the_readme_example_test_passes(
    spark_cdc_session: SparkSession, spark_cdc_shared: Path, tmp_path: Path
) -> None:
    """The docs' integration test example (docs/containers.md), run as written with the
    fixtures."""
    readme = (ROOT / "docs" / "containers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    example = next(b for b in blocks if "def test_an_update_comes_out" in b)
    scope: dict[str, Any] = {}
    exec(compile(example, "docs/containers.md", "exec"), scope)
    shared = spark_cdc_shared / tmp_path.name  # a folder of its own inside the shared one
    shared.mkdir()
    scope["test_an_update_comes_out_as_pre_and_post_image"](spark_cdc_session, shared)
