"""A server whose Python lacks what the source needs says so: the package, why, and the
``pip install`` for that Python, under ``DELTA_CHANGELOG.MISSING_DEPENDENCY``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib
from deltalake import write_deltalake
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader, apply_changes
from spark_cdc.server_plugin.dependencies import DELTALAKE, PYICEBERG
from spark_cdc.testing.local_server import start_local_server

from tests.support import harness
from tests.support.delta_tables import rows
from tests.support.processes import without

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.plan_only
def test_the_server_extra_asks_for_what_the_check_requires() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in (DELTALAKE, PYICEBERG):
        assert requirement.specifier in project["optional-dependencies"]["server"]


@pytest.mark.plan_only
def test_a_server_without_numpy_still_lists_the_source_and_names_the_package(
    tmp_path: Path,
) -> None:
    """The discovery module's imports fail (numpy, which pyarrow needs, is missing): Spark
    still finds ``delta_changelog``, and reading it names numpy."""
    script = (
        "import pyspark_delta_changelog as m\n"
        "print(m.DefaultSource.name())\n"
        "try:\n"
        "    m.DefaultSource(options={'path': '/t'}).schema()\n"
        "except Exception as error:\n"
        "    print(error.condition, error.parameters['package'])\n"
    )
    env = without("numpy", tmp_path / "shadow")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.splitlines() == [
        "delta_changelog",
        "DELTA_CHANGELOG.MISSING_DEPENDENCY numpy",
    ]


@pytest.fixture(scope="module")
def no_deltalake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("no-deltalake")
    python_path = without("deltalake", folder / "shadow")["PYTHONPATH"].split(":")[:1]
    server = start_local_server(conf=harness.TEST_SERVER_CONF, extra_python_path=python_path)
    try:
        yield server.url
    finally:
        server.stop()
    # Started without a log path, it made its own folder, and removed it when stopped.
    assert not server.log_path.parent.exists()


@pytest.mark.local_process
@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_a_server_without_deltalake_names_it(
    no_deltalake_server: str, tmp_path: Path, streaming: bool
) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    spark = SparkSession.builder.remote(no_deltalake_server).create()
    try:
        with pytest.raises(PySparkException) as caught:
            feed = ChangelogReader(spark, streaming=streaming).option("rowId", "id").changes(path)
            if streaming:
                query = feed.writeStream.format("noop").start()
                try:
                    query.processAllAvailable()
                finally:
                    query.stop()
            else:
                feed.collect()
    finally:
        spark.stop()
    error = caught.value
    assert error.getCondition() == "DELTA_CHANGELOG.MISSING_DEPENDENCY", str(error)
    assert error.getMessageParameters()["package"] == "deltalake"
    assert "pip install 'deltalake>=1.4.2'" in str(error)
    assert "Traceback" not in str(error)


@pytest.mark.local_process
@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_apply_changes_on_a_server_without_deltalake_names_it(
    no_deltalake_server: str, tmp_path: Path, streaming: bool
) -> None:
    """The process that makes a stream's writer only looks for delta-rs (``sink``); here it
    is found and cannot be imported, so the tasks that load it name it, as the writer does
    where it is not installed at all."""
    source = tmp_path / "changes"
    write_deltalake(str(source), rows(range(3)))
    spark = SparkSession.builder.remote(no_deltalake_server).create()
    try:
        feed = (spark.readStream if streaming else spark.read).format("parquet")
        feed = feed.schema("id long, name string").load(str(source))
        with pytest.raises(PySparkException) as caught:
            done = apply_changes(
                feed,
                str(tmp_path / "target"),
                keys=["id"],
                sequence_by="id",
                **({"checkpoint_location": str(tmp_path / "cp")} if streaming else {}),
                **({"trigger": {"availableNow": True}} if streaming else {}),
            )
            if streaming:
                done.awaitTermination()
    finally:
        spark.stop()
    error = caught.value
    assert error.getCondition() == "DELTA_CHANGELOG.MISSING_DEPENDENCY", str(error)
    assert error.getMessageParameters()["package"] == "deltalake"
    assert "Traceback" not in str(error)
