"""A batch whose resolved changes pass the server's ``spark.driver.maxResultSize`` (what the
tasks resolve travels to the driver) is refused as ``APPLY_CHANGES.BATCH_TOO_LARGE``, naming
the sizes and both fixes, with nothing written; Spark's own text is recognized on every
version this package supports."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_cdc import apply_changes
from spark_cdc.apply import batch_too_large
from spark_cdc.testing.local_server import start_local_server

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


@pytest.mark.timeout(600)  # a server of its own
def test_a_batch_past_max_result_size_is_refused_by_name_with_nothing_written(
    tmp_path: Path,
) -> None:
    conf = {**TEST_SERVER_CONF, "spark.driver.maxResultSize": "1m"}
    server = start_local_server(conf=conf, log_path=tmp_path / "server.log", driver_memory="1g")
    session = None
    try:
        session = SparkSession.builder.remote(server.url).create()
        feed = session.range(300_000).select(
            "id", F.sha2(F.col("id").cast("string"), 256).alias("value"), F.lit(1).alias("seq")
        )
        target = tmp_path / "target"
        with pytest.raises(PySparkException) as refused:
            apply_changes(feed, str(target), keys=["id"], sequence_by="seq")
        assert refused.value.getCondition() == "APPLY_CHANGES.BATCH_TOO_LARGE"
        assert refused.value.getMessageParameters()["limit"] == "1024.0 KiB"
        assert not target.exists()
    finally:
        if session is not None:
            session.stop()
        server.stop()
