"""A thin client: a virtualenv with PySpark's jar-free Connect client (``pyspark-client``)
and this package's wheel, as a client app installs them. Full PySpark is not pulled in,
``pip check`` passes, and reads give what full PySpark gives, on the test server.

First the wheel alone (no PySpark at all): the package names what to install. Needs PyPI
(for pyspark-client and the wheels it needs), as any install does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader

from tests.support.apply_targets import feed_changes, model_rows, read_table, sorted_rows
from tests.support.delta_tables import rows

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
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = pip(venv, "install", "-q", str(wheel))
    assert done.returncode == 0, done.stderr
    yield venv


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
    write_deltalake(path, rows(range(4)))
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 2")
    DeltaTable(path).delete("id = 3")
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
    """``apply_changes`` from a client with no deltalake and no Spark jars: the server
    applies, with delta-rs."""
    path, target = str(tmp_path / "orders"), str(tmp_path / "history")
    write_deltalake(path, rows(range(4)))
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 2")
    DeltaTable(path).delete("id = 3")
    done = python(
        thin,
        f"""
        from spark_cdc import apply_changes, connect, read
        spark = connect({spark_remote!r})
        feed = read(spark).option("rowId", "id").option("startingVersion", 0).load({path!r})
        print(apply_changes(feed, {target!r}, keys=["id"], sequence_by="_commit_version",
                            stored_as_scd_type=2))
        spark.stop()
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "deltalake" not in installed(thin)
    assert done.stdout.startswith("AppliedChanges("), done.stdout
    changes = feed_changes(spark, path)
    assert sorted_rows(read_table(target)) == model_rows(changes, 2)
