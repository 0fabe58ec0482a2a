"""``spark-cdc apply`` as an operator runs it: once from a scheduler (``--available-now``),
saying per micro-batch which source versions it covered, what it wrote and how far behind
the source it is; into a target named in the server's catalog; and stopped by any stop
signal in any phase (starting, mid-batch, idle) with exit 0, no traceback, in bounded time.
"""

from __future__ import annotations

import random
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from tests.support.apply_targets import feed_changes, model_rows, read_table, sorted_rows
from tests.support.delta_tables import committing
from tests.support.processes import Command
from tests.support.stopping import EXIT_BOUND_S, SIGNALS, assert_clean, stop


def _commit(source: str, ids: list[int], value: str) -> None:
    updates = pa.table({"id": ids, "v": [f"{value}{i}" for i in ids]})
    DeltaTable(source).merge(
        updates, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()


def _run_once(source: str, target: str, remote: str, *more: str) -> Command:
    command = Command(
        "apply",
        source,
        "--target",
        target,
        "--keys",
        "id",
        "--available-now",
        *more,
        "--remote",
        remote,
    )
    code = command.process.wait(300)
    command._reader.join(10)
    assert code == 0, command.output
    assert "Traceback" not in command.output
    return command


def _batch_lines(command: Command) -> list[str]:
    return [line for line in command.lines if line.startswith("batch ")]


def test_available_now_applies_what_is_there_reports_it_and_exits(
    spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    _commit(source, [2, 4], "u")  # version 1: one update, one insert

    first = _run_once(source, target, spark_remote, "--starting-version", "0")
    assert sorted_rows(read_table(target)) == model_rows(feed_changes(spark, source), 1)
    lines = _batch_lines(first)
    assert lines, first.output
    assert all(re.search(r"changes?, \d+ keys? and \d+ rows? written", line) for line in lines)
    # The source's newest commit is in the progress: after availableNow, nothing is behind.
    assert "caught up" in lines[-1], first.output
    assert re.search(r"\(up to version \d+|\(versions? \d", lines[0]), lines

    _commit(source, [1], "w")  # version 2
    _commit(source, [5], "x")  # version 3
    again = _run_once(source, target, spark_remote)  # continues from its checkpoint
    assert sorted_rows(read_table(target)) == model_rows(feed_changes(spark, source), 1)
    assert any("(versions 2-3)" in line or "(version 3)" in line for line in _batch_lines(again))
    # Nothing new: a run applies nothing and still exits.
    assert "written" not in " ".join(_batch_lines(_run_once(source, target, spark_remote)))


@pytest.fixture
def catalog_target(spark: SparkSession, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A catalog table over a Delta target's folder, on a server without Delta Lake's Spark
    catalog: registered as a parquet table, which records its location."""
    path = str(tmp_path / "mirror")
    write_deltalake(path, pa.schema([("id", pa.int64()), ("v", pa.string())]).empty_table())
    name = f"mirror_{uuid.uuid4().hex[:8]}"  # an empty folder: the schema is given
    spark.sql(f"CREATE TABLE {name} (id BIGINT, v STRING) USING parquet LOCATION '{path}'")
    try:
        yield name, path
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_target_named_in_the_catalog_is_applied_at_its_location(
    spark: SparkSession, spark_remote: str, tmp_path: Path, catalog_target: tuple[str, str]
) -> None:
    name, path = catalog_target
    source = str(tmp_path / "source")
    write_deltalake(source, pa.table({"id": [1, 2], "v": ["a", "b"]}))
    _run_once(source, name, spark_remote, "--starting-version", "0")
    assert sorted_rows(read_table(path)) == model_rows(feed_changes(spark, source), 1)
    assert Path(path + "__apply_changes_checkpoint").is_dir()  # beside the table, not cwd


def test_a_catalog_name_of_no_delta_table_is_refused_before_writing(
    spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    from pyspark.errors import PySparkException
    from spark_cdc import apply_changes

    folder = tmp_path / "plain"
    spark.range(2).write.parquet(str(folder))
    name = f"plain_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} USING parquet LOCATION '{folder}'")
    try:
        before = sorted(p.name for p in folder.iterdir())
        feed = spark.createDataFrame([(1, "a", 5)], "id long, v string, seq long")
        with pytest.raises(PySparkException) as refused:
            apply_changes(feed, name, keys=["id"], sequence_by="seq", except_column_list=["seq"])
        assert refused.value.getCondition() == "APPLY_CHANGES.TARGET_NOT_DELTA"
        assert name in str(refused.value)
        assert sorted(p.name for p in folder.iterdir()) == before
        assert not Path(f"{folder}__apply_changes_state").exists()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


LAG = re.compile(
    r"; lag (\d+ versions?( \(caught up\))?|unknown versions \(the source reports no newest "
    r"version\)), newest applied commit [\d,]+ s ago$"
)


def test_every_batch_line_gives_the_lag_in_numbers(spark_remote: str, tmp_path: Path) -> None:
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": [1, 2], "v": ["a", "b"]}))
    for step in range(3):
        _commit(source, [step], "u")
    lines = _batch_lines(_run_once(source, target, spark_remote, "--starting-version", "0"))
    assert lines and all(LAG.search(line) for line in lines), lines


def test_an_iceberg_target_takes_its_catalog_from_a_file_and_the_environment(
    spark: SparkSession, spark_remote: str, tmp_path: Path, server_log: Callable[[], str | None]
) -> None:
    """Exactly what the API writes from the same feed; the catalog's secret (from the
    environment) in no process's command line, the command's output or the server's log."""
    from spark_cdc import apply_changes

    from tests.support.apply_targets import read_iceberg
    from tests.support.iceberg_tables import catalog_properties
    from tests.support.processes import command_lines_holding

    source = str(tmp_path / "source")
    write_deltalake(source, pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
    _commit(source, [2, 4], "u")
    catalog = catalog_properties(tmp_path, "cli")
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    catalog_file = tmp_path / "catalog.properties"
    catalog_file.write_text(
        "# the test's catalog\n" + "".join(f"{k}={v}\n" for k, v in catalog.items() if k != "uri")
    )
    env = {
        "PYICEBERG_CATALOG__CLI__URI": catalog["uri"],
        "PYICEBERG_CATALOG__CLI__S3__SECRET_ACCESS_KEY": secret,
    }
    command = Command(
        "apply", source, "--target", "db.mirror", "--keys", "id", "--available-now",
        "--starting-version", "0", "--format", "iceberg", "--catalog", "cli",
        "--catalog-file", str(catalog_file), "--checkpoint", str(tmp_path / "checkpoint"),
        "--remote", spark_remote, env=env,
    )  # fmt: skip
    shown = []
    while command.process.poll() is None:
        shown += command_lines_holding(secret)
        time.sleep(0.2)
    assert command.finish() == 0, command.output
    assert not shown, "the catalog's secret was on a command line"
    assert secret not in command.output
    assert secret not in (server_log() or "")
    assert _batch_lines(command), command.output

    feed = spark.read.format("delta_changelog").option("startingVersion", 0).load(source)
    with_secret = {**catalog, "s3.secret-access-key": secret}
    apply_changes(feed, "db.api", keys=["id"], sequence_by="_commit_version",
                  format="iceberg", catalog=with_secret)  # fmt: skip
    got = sorted_rows(read_iceberg(catalog, "db.mirror"))
    assert got == sorted_rows(read_iceberg(catalog, "db.api"))
    assert got == model_rows(feed_changes(spark, source), 1)


def test_an_iceberg_target_without_a_catalog_is_refused_by_name(tmp_path: Path) -> None:
    command = Command(
        "apply", "/nowhere", "--target", "db.t", "--keys", "id", "--format", "iceberg",
        "--catalog", "absent", "--checkpoint", str(tmp_path / "cp"), "--remote", "sc://localhost:1",
    )  # fmt: skip
    assert command.finish(60) == 1
    assert command.lines[-1].startswith("spark-cdc: [SPARK_CDC_CLI.NO_CATALOG]"), command.output
    assert "PYICEBERG_CATALOG__ABSENT__URI" in command.lines[-1]


@pytest.fixture
def writing(tmp_path: Path) -> Iterator[str]:
    """A Delta table that gets a commit (an update and an insert) every 0.3 s."""
    path = str(tmp_path / "orders")
    write_deltalake(path, pa.table({"id": [0, 1, 2], "v": ["a", "b", "c"]}))
    with committing(lambda step: _commit(path, [step % 7, 3 + step], "s")):
        yield path


# Each phase with another signal: the three signals share one handler (each is tested on
# every phase of ``tail`` in test_cli_signals.py); what differs here is where it lands.
PHASES = {"starting": "SIGTERM", "mid-batch": "SIGINT", "idle": "SIGHUP"}


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_apply_stops_on_a_signal_in_each_phase(
    spark_remote: str, tmp_path: Path, writing: str, phase: str
) -> None:
    """Starting: before the stream runs; mid-batch: while a writer keeps committing;
    idle: the source quiet, the stream waiting for commits."""
    name = PHASES[phase]
    target = str(tmp_path / f"target-{phase}")
    source = writing if phase != "idle" else str(tmp_path / "quiet")
    if phase == "idle":
        write_deltalake(source, pa.table({"id": [0, 1], "v": ["a", "b"]}))
    command = Command("apply", source, "--target", target, "--keys", "id", "--remote", spark_remote)
    if phase == "starting":  # connecting, checking the table, starting the stream
        time.sleep(random.uniform(1.5, 4.0))
    else:
        command.wait_for("batch 0 ")
        time.sleep(2.0 if phase == "idle" else 0.7)
    code, took = stop(command, SIGNALS[name])
    assert_clean(command, code, set())
    assert "Stopped." in command.output, command.output
    assert "release unlocked lock" not in command.output
    assert took < EXIT_BOUND_S


def test_apply_snapshot_applies_what_the_table_holds_now_once_per_version(
    spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    """A scheduled snapshot job: the source's content is the next version, a line says
    what it wrote, a version again writes nothing, and a bad one exits non-zero with one
    sentence."""
    source, target = str(tmp_path / "dump"), str(tmp_path / "history")
    write_deltalake(source, pa.table({"id": [1, 2], "v": ["a", "b"]}))

    def run(*more: str) -> Command:
        command = Command(
            "apply-snapshot",
            source,
            "--target",
            target,
            "--keys",
            "id",
            "--scd",
            "2",
            *more,
            "--remote",
            spark_remote,
        )
        command.process.wait(300)
        command._reader.join(10)
        assert "Traceback" not in command.output
        return command

    first = run()
    assert first.process.returncode == 0, first.output
    assert f"snapshot 1: 2 changes, 2 keys and 2 rows written to {target}" in first.lines
    write_deltalake(source, pa.table({"id": [1], "v": ["A"]}), mode="overwrite")
    second = run("--version", "7")
    assert f"snapshot 7: 2 changes, 2 keys and 3 rows written to {target}" in second.lines
    again = run("--version", "7")
    assert "snapshot 7: applied already, nothing written" in again.lines
    older = run("--version", "3")
    assert older.process.returncode != 0
    assert "APPLY_CHANGES.SNAPSHOT_VERSION_NOT_NEWER" in older.output
    assert sorted_rows(read_table(target)) == [
        {"id": 1, "v": "A", "__START_AT": 7, "__END_AT": None},
        {"id": 1, "v": "a", "__START_AT": 1, "__END_AT": 7},
        {"id": 2, "v": "b", "__START_AT": 1, "__END_AT": 7},
    ]

    # A folder of CSV dumps, read as Spark reads CSV with the options given; a misspelt key
    # named in our words, not the comparison's.
    dumps = tmp_path / "csv-dump"
    dumps.mkdir()
    (dumps / "part-0.csv").write_text("id,v\n1,x\n2,y\n")
    csv = ["--source-format", "csv", "-o", "header=true", "-o", "inferSchema=true"]
    source, target = str(dumps), str(tmp_path / "from-csv")
    from_csv = run(*csv)
    assert f"snapshot 1: 2 changes, 2 keys and 2 rows written to {target}" in from_csv.lines
    assert sorted_rows(read_table(target)) == [
        {"id": 1, "v": "x", "__START_AT": 1, "__END_AT": None},
        {"id": 2, "v": "y", "__START_AT": 1, "__END_AT": None},
    ]
    misspelt = run("--keys", "idd", *csv)  # the last --keys is the one taken
    assert misspelt.process.returncode != 0
    assert misspelt.lines[-1] == (
        "spark-cdc: [APPLY_CHANGES.UNKNOWN_COLUMN] keys names column idd, which the snapshot "
        "does not have; its columns are id, v."
    ), misspelt.output
    assert "__spark_cdc" not in misspelt.output
