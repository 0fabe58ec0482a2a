"""A batch whose rows travel to the driver (a feed with truncates, resolved whole there) and
pass the server's ``spark.driver.maxResultSize`` is refused as
``APPLY_CHANGES.BATCH_TOO_LARGE``, naming the sizes and both fixes, with nothing written;
Spark's own text is recognized on every version this package supports. A first load, whose
tasks write the tables' files themselves, is not bounded by it."""

from __future__ import annotations

from collections.abc import Iterator
from hashlib import sha256
from pathlib import Path

import pytest
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_cdc import apply_changes
from spark_cdc.result_size import batch_too_large
from spark_cdc.testing.local_server import start_local_server

from tests.support.apply_targets import read_table
from tests.support.harness import TEST_SERVER_CONF

# Spark's message, as 4.3 words it (measured: a 40M-row batch under the default 1 GiB).
SPARK_MESSAGE = (
    "Job aborted due to stage failure: Total size of serialized results of 2 tasks "
    "(1082.6 MiB) is bigger than spark.driver.maxResultSize (1024.0 MiB)"
)


def test_sparks_result_size_refusal_is_named_with_its_sizes() -> None:
    named = batch_too_large(SPARK_MESSAGE)
    assert named is not None
    assert named.getCondition() == "APPLY_CHANGES.BATCH_TOO_LARGE"
    assert named.getMessageParameters() == {"size": "1082.6 MiB", "limit": "1024.0 MiB"}
    assert batch_too_large("Job aborted due to stage failure: something else") is None


@pytest.fixture(scope="module")
def small_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A session on a server of its own, whose driver takes 1 MB of task results."""
    folder = tmp_path_factory.mktemp("server")
    conf = {**TEST_SERVER_CONF, "spark.driver.maxResultSize": "1m"}
    server = start_local_server(conf=conf, log_path=folder / "server.log", driver_memory="1g")
    session = None
    try:
        session = SparkSession.builder.remote(server.url).create()
        yield session
    finally:
        if session is not None:
            session.stop()
        server.stop()


def _rows(session: SparkSession) -> DataFrame:
    """300k changes of distinct keys with 64-character values: past 1 MB resolved."""
    return session.range(300_000).select(
        "id", F.sha2(F.col("id").cast("string"), 256).alias("value"), F.lit(1).alias("seq")
    )


# A feed with truncates is resolved whole by the commit: its rows travel to the driver.
TRUNCATES = "id < 0"


@pytest.mark.local_process
@pytest.mark.timeout(600)
def test_a_first_load_past_max_result_size_is_written_by_the_tasks(
    small_results: SparkSession, tmp_path: Path
) -> None:
    """The same 300k changes into a new target: the tasks write both tables' files and
    only their add actions reach the driver, so the whole batch is applied."""
    target = tmp_path / "target"
    done = apply_changes(_rows(small_results), str(target), keys=["id"], sequence_by="seq")
    assert (done.changes, done.keys, done.rows) == (300_000, 300_000, 300_000)
    found = read_table(str(target)).sort_by("id")  # the feed's rows, made here as Spark does
    fed = [
        {"id": i, "value": sha256(str(i).encode()).hexdigest(), "seq": 1} for i in range(300_000)
    ]
    assert found.to_pylist() == fed


@pytest.mark.local_process
@pytest.mark.timeout(600)  # a server of its own
def test_a_batch_past_max_result_size_is_refused_by_name_with_nothing_written(
    small_results: SparkSession, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    with pytest.raises(PySparkException) as refused:
        apply_changes(
            _rows(small_results),
            str(target),
            keys=["id"],
            sequence_by="seq",
            apply_as_truncates=TRUNCATES,
        )
    assert refused.value.getCondition() == "APPLY_CHANGES.BATCH_TOO_LARGE"
    assert refused.value.getMessageParameters()["limit"] == "1024.0 KiB"
    assert not target.exists()


@pytest.mark.local_process
@pytest.mark.timeout(600)
def test_a_micro_batch_past_max_result_size_fails_the_stream_by_name(
    small_results: SparkSession, tmp_path: Path
) -> None:
    """A micro-batch with truncates travels to the driver: the stream fails with our
    condition from its wait and from ``exception()``, still a StreamingQueryException,
    with nothing written; another query's failure keeps Spark's condition."""
    source = tmp_path / "source"
    _rows(small_results).write.parquet(str(source))
    feed = small_results.readStream.schema("id long, value string, seq int").parquet(str(source))
    target = tmp_path / "target"
    query = apply_changes(
        feed,
        str(target),
        keys=["id"],
        sequence_by="seq",
        apply_as_truncates=TRUNCATES,
        checkpoint_location=str(tmp_path / "checkpoint"),
        trigger={"availableNow": True},
    )
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination()
    assert failed.value.getCondition() == "APPLY_CHANGES.BATCH_TOO_LARGE"
    assert failed.value.getMessageParameters()["limit"] == "1024.0 KiB"
    assert "maxBytesPerTrigger" in str(failed.value)
    stored = query.exception()
    assert stored is not None and stored.getCondition() == "APPLY_CHANGES.BATCH_TOO_LARGE"
    assert not target.exists()

    other = feed.writeStream.foreachBatch(lambda batch, _: batch.collect())
    other = other.option("checkpointLocation", str(tmp_path / "other")).trigger(availableNow=True)
    started = other.start()
    with pytest.raises(StreamingQueryException) as spark_own:
        started.awaitTermination()
    assert spark_own.value.getCondition() != "APPLY_CHANGES.BATCH_TOO_LARGE"
    assert "maxResultSize" in str(spark_own.value)
