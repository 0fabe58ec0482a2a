"""A thin client that is not the server: a virtualenv on another Python minor version than
the server's (``tests.support.other_python``), with PySpark's jar-free Connect client
(``pyspark-client``) and this package's wheel, as a client app installs them. Full PySpark
is not pulled in, ``pip check`` passes, and every client-facing feature (reads batch and
streaming with each pass, catalog-name and Iceberg reads, ``apply_changes`` batch and
streaming, ``spark-cdc tail`` and ``apply`` with ``--remote``) gives what a client on the
server's own Python gets, on the test server: the server runs its installed code, by name.

First the wheel alone (no PySpark at all): the package names what to install. Needs PyPI
(for pyspark-client and the wheels it needs), as any install does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader

from tests.support import harness
from tests.support.apply_targets import (
    feed_changes,
    model_rows,
    read_iceberg,
    read_table,
    sorted_rows,
)
from tests.support.delta_tables import rows
from tests.support.iceberg_tables import catalog_properties
from tests.support.other_python import other_python

THIN_CLIENT = "pyspark-client>=4.0,<5"
# Builds virtualenvs. Three of the four tests need no harness server, but they stay here
# with the fourth: they share one virtualenv, built once and then given the jar-free client,
# which would otherwise be built twice or tie the tests to their order.
pytestmark = pytest.mark.slow


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def python(venv: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run from a file, as a user's script is (under ``python -c`` the jar-free
    client takes itself for a doctest run and looks for a Spark installation)."""
    file = venv / "script.py"
    file.write_text(textwrap.dedent(script))
    return subprocess.run(
        [str(venv / "bin" / "python"), str(file)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[Path]:
    """A virtualenv with the wheel and its dependencies, and no PySpark of any kind."""
    venv = tmp_path_factory.mktemp("thin") / "venv"
    subprocess.run([str(other_python()), "-m", "venv", str(venv)], check=True, timeout=300)
    done = pip(venv, "install", "-q", str(wheel))
    assert done.returncode == 0, done.stderr
    yield venv


def three_commits(path: str) -> None:
    """A Delta table of three commits: an insert, an update, a delete."""
    write_deltalake(path, rows(range(4)))
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 2")
    DeltaTable(path).delete("id = 3")


def installed(venv: Path) -> set[str]:
    listed = pip(venv, "list", "--format", "json")
    return {entry["name"].lower() for entry in json.loads(listed.stdout)}


def test_without_pyspark_the_package_says_what_to_install(bare: Path) -> None:
    assert not {"pyspark", "pyspark-client"} & installed(bare)
    done = python(
        bare,
        """
        import spark_cdc
        try:
            spark_cdc.ChangelogReader
        except ImportError as error:
            print(error.getCondition()); print(error)
        """,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "SPARK_CDC.MISSING_PYSPARK", done.stdout + done.stderr
    assert "pip install 'spark-cdc-connect[client]'" in lines[1]
    command = subprocess.run(
        [str(bare / "bin" / "spark-cdc"), "tail", "/t", "--row-id", "id"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert command.returncode == 1
    assert command.stderr.startswith("spark-cdc: [SPARK_CDC.MISSING_PYSPARK]"), command.stderr
    assert "Traceback" not in command.stderr


@pytest.fixture(scope="module")
def thin(bare: Path) -> Path:
    """The same virtualenv with the jar-free Connect client added."""
    done = pip(bare, "install", "-q", THIN_CLIENT)
    assert done.returncode == 0, done.stderr
    return bare


def test_a_thin_client_keeps_its_client_and_pip_check_passes(thin: Path) -> None:
    names = installed(thin)
    assert "pyspark-client" in names and "pyspark" not in names, sorted(names)
    check = pip(thin, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert not list(thin.glob("lib/python*/site-packages/pyspark/jars")), "Spark's jars came"


def test_a_thin_client_reads_what_full_pyspark_reads(
    thin: Path, spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    path = str(tmp_path / "orders")
    three_commits(path)
    options = {"rowId": "id", "computeUpdates": True, "startingVersion": 0}
    here = ChangelogReader(spark).options(**options).changes(path)
    done = python(
        thin,
        f"""
        import json
        from spark_cdc import ChangelogReader, connect
        spark = connect({spark_remote!r})
        feed = ChangelogReader(spark).options(**{options!r}).changes({path!r})
        print(feed.schema.json())
        print(json.dumps(sorted([list(map(str, r)) for r in feed.collect()])))
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr
    schema, got = done.stdout.splitlines()
    assert json.loads(schema) == json.loads(here.schema.json())
    assert json.loads(got) == sorted([list(map(str, r)) for r in here.collect()])


def test_a_thin_client_cannot_start_a_server_and_says_why(thin: Path) -> None:
    command = subprocess.run(
        [str(thin / "bin" / "spark-cdc"), "serve", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert command.returncode == 1
    assert "needs full PySpark" in command.stderr and "--remote" in command.stderr
    assert len(command.stderr.splitlines()) == 1, command.stderr


def test_a_thin_client_applies_changes(
    thin: Path, spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    """``apply_changes`` from a client with no deltalake, no pyiceberg and no Spark jars:
    the server applies, with delta-rs into a Delta history and with pyiceberg into an
    Iceberg mirror."""
    path, target = str(tmp_path / "orders"), str(tmp_path / "history")
    catalog = catalog_properties(tmp_path)
    three_commits(path)
    done = python(
        thin,
        f"""
        from spark_cdc import apply_changes, connect, read
        spark = connect({spark_remote!r})
        feed = read(spark).option("rowId", "id").option("startingVersion", 0).load({path!r})
        print(apply_changes(feed, {target!r}, keys=["id"], sequence_by="_commit_version",
                            stored_as_scd_type=2))
        print(apply_changes(feed, "db.mirror", keys=["id"], sequence_by="_commit_version",
                            format="iceberg", catalog={catalog!r}))
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert not {"deltalake", "pyiceberg"} & installed(thin)
    assert done.stdout.startswith("AppliedChanges("), done.stdout
    changes = feed_changes(spark, path)
    assert sorted_rows(read_table(target)) == model_rows(changes, 2)
    assert sorted_rows(read_iceberg(catalog, "db.mirror")) == model_rows(changes, 1)


def test_a_thin_client_applies_snapshots(
    thin: Path, spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    """``snapshot_changes`` and ``apply_changes_from_snapshot`` from a client on another
    Python with no deltalake, no pyiceberg and no Spark jars: the diff is a plan, and the
    server's installed sink reads the target and applies, into a Delta history and an
    Iceberg mirror."""
    target, catalog = str(tmp_path / "history"), catalog_properties(tmp_path)
    done = python(
        thin,
        f"""
        from spark_cdc import apply_changes_from_snapshot, connect, snapshot_changes
        spark = connect({spark_remote!r})
        first = spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string")
        second = spark.createDataFrame([(1, "A"), (3, "c")], "id int, v string")
        diff = snapshot_changes(first, second, ["id"], 2, options={{"computeUpdates": True}})
        print(sorted((r.id, r.v, r._change_type) for r in diff.collect()))
        snapshots = {{1: first, 2: second}}
        def next_snapshot(last):
            number = 1 if last is None else last + 1
            return (snapshots[number], number) if number in snapshots else None
        print(apply_changes_from_snapshot({target!r}, next_snapshot, ["id"],
                                          stored_as_scd_type=2, spark=spark))
        print(apply_changes_from_snapshot("db.mirror", next_snapshot, ["id"], spark=spark,
                                          format="iceberg", catalog={catalog!r}))
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert not {"deltalake", "pyiceberg"} & installed(thin)
    lines = done.stdout.splitlines()
    assert lines[0] == str(
        [
            (1, "A", "update_postimage"),
            (1, "a", "update_preimage"),
            (2, "b", "delete"),
            (3, "c", "insert"),
        ]
    )
    assert [int(v) for v in re.findall(r"version=(\d+)", lines[1])] == [1, 2]
    assert sorted_rows(read_table(target)) == [
        {"id": 1, "v": "A", "__START_AT": 2, "__END_AT": None},
        {"id": 1, "v": "a", "__START_AT": 1, "__END_AT": 2},
        {"id": 2, "v": "b", "__START_AT": 1, "__END_AT": 2},
        {"id": 3, "v": "c", "__START_AT": 2, "__END_AT": None},
    ]
    assert sorted_rows(read_iceberg(catalog, "db.mirror")) == [
        {"id": 1, "v": "A"},
        {"id": 3, "v": "c"},
    ]


# Each read a client can make, as Python source over `spark` (a session), `path` (a Delta
# table written by three commits) and `iceberg` (an Iceberg table's folder); a stream is
# run to its end through a memory sink named by `sink`.
READS = {
    "batch, rowId + computeUpdates": (
        "read(spark).option('rowId', 'id').option('computeUpdates', True)"
        ".option('startingVersion', 0).load(path)"
    ),
    "batch, netChanges": (
        "read(spark).option('rowId', 'id').option('deduplicationMode', 'netChanges')"
        ".option('computeUpdates', True).option('startingVersion', 0).load(path)"
    ),
    "batch, a catalog table's name": (
        "read(spark).option('rowId', 'id').option('startingVersion', 0).changes(table)"
    ),
    "batch, Iceberg": "read(spark).format('iceberg').option('rowId', 'id').load(iceberg)",
    "stream, rowId + computeUpdates": (
        "readStream(spark).option('rowId', 'id').option('computeUpdates', True)"
        ".option('startingVersion', 0).load(path)"
    ),
    "stream, netChanges": (
        "readStream(spark).option('rowId', 'id').option('deduplicationMode', 'netChanges')"
        ".option('startingVersion', 0).load(path)"
    ),
}

_RUN_READS = """
def rows(df):
    return sorted(json.dumps([str(v) for v in r]) for r in df.collect())

def run(name, code):
    feed = eval(code)
    if not feed.isStreaming:
        return rows(feed)
    sink = sink_prefix + str(abs(hash(name)))
    query = feed.writeStream.format("memory").queryName(sink).start()
    query.processAllAvailable()
    query.stop()
    return rows(spark.table(sink))
"""


def _delta_and_iceberg(spark: SparkSession, tmp_path: Path) -> dict[str, str]:
    from tests.support.iceberg_tables import sql_catalog, table_folder

    path = str(tmp_path / "orders")
    three_commits(path)
    table = f"orders_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} USING parquet LOCATION '{path}'")
    (tmp_path / "iceberg").mkdir()
    catalog = sql_catalog(tmp_path / "iceberg")
    catalog.create_namespace("db")
    iceberg = catalog.create_table("db.orders", schema=rows([0]).schema)
    iceberg.append(rows(range(3)))
    iceberg.append(rows([7]))
    return {"path": path, "table": table, "iceberg": table_folder(iceberg)}


def test_every_read_from_a_client_on_another_python(
    thin: Path, spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    """The six reads of READS give a client on another Python minor version than the
    server's what they give a client on the server's own (the streaming net changes
    operator is the server's installed one, referenced by name)."""
    names = _delta_and_iceberg(spark, tmp_path)
    setup = "\n".join(f"{k} = {v!r}" for k, v in names.items())
    here: dict[str, list[str]] = {}
    scope = {"json": json, "spark": spark, "sink_prefix": "here_", **names}
    exec("from spark_cdc import read, readStream\n" + _RUN_READS, scope)
    for name, code in READS.items():
        here[name] = scope["run"](name, code)  # type: ignore[operator]
    done = python(
        thin,
        f"""
        import json, sys
        from spark_cdc import connect, read, readStream
        spark = connect({spark_remote!r})
        sink_prefix = "thin_"
        {textwrap.indent(setup, "        ").strip()}
        {textwrap.indent(_RUN_READS, "        ").strip()}
        got = {{name: run(name, code) for name, code in {READS!r}.items()}}
        print("%d.%d" % sys.version_info[:2])
        print(json.dumps(got))
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    version, got = done.stdout.splitlines()[-2:]
    assert version != f"{sys.version_info[0]}.{sys.version_info[1]}"
    spark.sql(f"DROP TABLE {names['table']}")
    assert json.loads(got) == here
    assert all(here.values()), here


def test_apply_changes_streams_from_a_client_on_another_python(
    thin: Path, spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    path, target = str(tmp_path / "orders"), str(tmp_path / "history")
    three_commits(path)
    done = python(
        thin,
        f"""
        from spark_cdc import apply_changes, connect, readStream
        spark = connect({spark_remote!r})
        feed = readStream(spark).option("rowId", "id").option("computeUpdates", True)
        feed = feed.option("startingVersion", 0).load({path!r})
        query = apply_changes(feed, {target!r}, keys=["id"], sequence_by="_commit_version",
                              stored_as_scd_type=2, checkpoint_location={target + "_chk"!r})
        query.processAllAvailable()
        query.stop()
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted_rows(read_table(target)) == model_rows(feed_changes(spark, path), 2)


def test_a_postgres_table_mirrored_from_a_client_on_another_python(
    thin: Path, spark_remote: str, server_host: str, tmp_path: Path
) -> None:
    """The postgres source is the server's (ADBC's driver there, none on the client): a
    stream from a client on another Python copies the table, then, started again from its
    checkpoint, follows the log; apply_changes' mirror equals the table."""
    from spark_cdc.testing.postgres import start_postgres

    target = str(tmp_path / "mirror")
    with start_postgres(server_host) as pg:
        pg.sql(
            "CREATE TABLE orders (id int PRIMARY KEY, v text);"
            "INSERT INTO orders SELECT i, 'v' || i FROM generate_series(1, 50) i;"
            "CREATE PUBLICATION spark_cdc_public_orders FOR TABLE orders;"
            "SELECT pg_create_logical_replication_slot('spark_cdc_public_orders', 'pgoutput');"
        )
        script = f"""
            from spark_cdc import apply_changes, connect, readStream
            spark = connect({spark_remote!r})
            feed = readStream(spark).format("postgres").options(**{pg.options()!r})
            query = apply_changes(feed.load("public.orders"), {target!r}, keys=["id"],
                                  sequence_by="_commit_version",
                                  checkpoint_location={target + "_chk"!r})
            query.processAllAvailable()
            query.stop()
            spark.stop()
            """
        first = python(thin, script)  # the first copy
        assert first.returncode == 0, first.stderr[-3000:]
        pg.sql("UPDATE orders SET v = 'x' WHERE id < 5; DELETE FROM orders WHERE id > 45;")
        again = python(thin, script)  # from the checkpoint: the log
        assert again.returncode == 0, again.stderr[-3000:]
        assert "adbc-driver-postgresql" not in installed(thin)
        want = [
            {"id": int(i), "v": v}
            for i, v in (line.split("|") for line in pg.sql("SELECT id, v FROM orders").split())
        ]
    assert sorted_rows(read_table(target)) == sorted_rows(pa.Table.from_pylist(want))


def test_the_command_line_from_a_client_on_another_python(
    thin: Path, spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    """``spark-cdc tail`` and ``spark-cdc apply`` with ``--remote``."""
    from tests.support.processes import Command

    path, target = str(tmp_path / "orders"), str(tmp_path / "mirror")
    write_deltalake(path, rows(range(3)))
    client = thin / "bin" / "python"
    tail = Command("tail", path, "--row-id", "id", "--remote", spark_remote, python=client)
    try:
        tail.wait_for("commit 0 ")
        DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 1")
        tail.wait_for("commit 1 ")
    finally:
        assert tail.interrupt() == 0, tail.output
    assert "update_postimage" in tail.output and "Traceback" not in tail.output
    apply = Command(
        "apply", path, "--target", target, "--keys", "id", "--remote", spark_remote, python=client
    )
    try:
        apply.wait_for("batch 0 ")
    finally:
        assert apply.interrupt() == 0, apply.output
    assert sorted_rows(read_table(target)) == model_rows(feed_changes(spark, path), 1)


def test_a_client_on_another_python_learns_the_servers(
    thin: Path, spark: SparkSession, spark_remote: str
) -> None:
    """The server's Python as a server with the package tells it, and as a server without
    it gives it away: by refusing a shipped function with ``PYTHON_VERSION_MISMATCH``."""
    from spark_cdc.rewrite.server_code import server_facts
    from spark_cdc.server_plugin.server_info import PROTOCOL

    facts = server_facts(spark)
    assert facts.protocol == PROTOCOL
    done = python(
        thin,
        f"""
        from spark_cdc import connect
        from spark_cdc.rewrite.server_code import _worker_python, server_facts
        spark = connect({spark_remote!r})
        print(server_facts(spark).python, _worker_python(spark))
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [facts.python, facts.python]


@pytest.fixture(scope="module")
def server_without_the_package(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A local server whose Spark discovers none of this package's sources and sinks: what
    a server without the package shows its clients."""
    import importlib.util
    import site

    from spark_cdc.testing.local_server import start_local_server

    spec = importlib.util.find_spec("pyspark_spark_cdc_server")
    assert spec is not None and spec.origin
    if str(Path(spec.origin).parent) in site.getsitepackages():
        pytest.skip("the package is installed where Spark discovers it (not editable)")
    log = tmp_path_factory.mktemp("bare-server") / "server.log"
    server = start_local_server(conf=harness.TEST_SERVER_CONF, log_path=log, discover=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.local_process
@pytest.mark.timeout(300)  # 10 s on a quiet machine: a hang fails with its server's log
def test_a_server_without_the_package_refuses_another_python_up_front(
    thin: Path, server_without_the_package: str, tmp_path: Path
) -> None:
    """Where only code shipped from the client could do the work, a client on another
    Python is refused by name before anything starts: streaming net changes over any
    DataFrame (``post_process``), ``apply_changes``, registering a source."""
    done = python(
        thin,
        f"""
        from pyspark.sql import functions as F
        from spark_cdc import ChangelogSpec, apply_changes, connect, post_process
        from spark_cdc import register_delta_changelog
        spark = connect({server_without_the_package!r})
        rate = spark.readStream.format("rate").load().select(
            (F.col("value") % 3).alias("id"), F.lit("insert").alias("_change_type"),
            F.col("value").alias("_commit_version"), F.col("timestamp").alias("_commit_timestamp"))
        feed = spark.range(3).select(F.col("id"), F.lit(1).alias("v"))
        attempts = {{
            "netChanges": lambda: post_process(rate, ChangelogSpec(row_id=["id"]),
                {{"deduplicationMode": "netChanges"}}).writeStream.format("noop").start(),
            "apply_changes": lambda: apply_changes(feed, {str(tmp_path / "t")!r}, keys=["id"],
                                                   sequence_by="v"),
            "register": lambda: register_delta_changelog(spark),
        }}
        for name, attempt in attempts.items():
            try:
                attempt()
                print(name, "ran")
            except Exception as error:
                print(name, error.getCondition(), error.getMessageParameters()["serverPython"])
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert done.stdout.split("\n")[:3] == [
        f"{name} SPARK_CDC.SERVER_PYTHON_MISMATCH {here}"
        for name in ("netChanges", "apply_changes", "register")
    ], done.stdout
    assert not (tmp_path / "t").exists()


@pytest.mark.local_process
@pytest.mark.timeout(300)  # 16 s on a quiet machine
def test_a_server_without_the_package_gets_it_from_a_client_on_its_python(
    server_without_the_package: str, tmp_path: Path
) -> None:
    """The source and the apply sink, shipped by value."""
    from spark_cdc import AppliedChanges, apply_changes, register_delta_changelog

    path, target = str(tmp_path / "t"), str(tmp_path / "mirror")
    write_deltalake(path, rows(range(2)))
    DeltaTable(path).delete("id = 1")
    session = SparkSession.builder.remote(server_without_the_package).create()
    try:
        register_delta_changelog(session)
        got = ChangelogReader(session).options(startingVersion=1).changes(path)
        assert [(r.id, r._change_type) for r in got.collect()] == [(1, "delete")]
        feed = ChangelogReader(session).options(startingVersion=0).changes(path)
        done = apply_changes(feed, target, keys=["id"], sequence_by="_commit_version")
        assert done == AppliedChanges(changes=3, keys=2, rows=1)
    finally:
        session.stop()
    assert sorted_rows(read_table(target)) == sorted_rows(rows([0]))
