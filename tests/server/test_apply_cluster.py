"""apply_changes on a standalone cluster of two one-core executors (a master and a worker
of this machine's PySpark): the client's plan splits the feed by key into as many tasks as
the cluster runs at once, and each executor resolves its keys' changes (the batch's commit
counts the tasks that resolved a share; each executor's log shows its data-writing tasks),
with the target equal to what the changes make."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_cdc import AppliedChanges, apply_changes
from spark_cdc.server_plugin.sinks.apply.tables import OUTCOME_KEY
from spark_cdc.testing.local_server import start_local_server

from tests.support.apply_targets import read_table, sorted_rows
from tests.support.harness import TEST_SERVER_CONF
from tests.support.standalone import executor_logs, standalone_cluster

KEYS = 20_000


@pytest.mark.timeout(900)  # a cluster and a server start
def test_each_executor_resolves_its_share_of_the_keys(tmp_path: Path) -> None:
    with standalone_cluster(tmp_path) as (master, work):
        conf = {
            **TEST_SERVER_CONF,
            "spark.master": master,
            "spark.executor.cores": "1",
            "spark.executor.memory": "1g",
            "spark.cores.max": "2",
            # Both executors before the first query, and no task waiting for the other's
            # shuffle output: each free executor takes a task.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.locality.wait": "0",
        }
        server = start_local_server(conf=conf, log_path=tmp_path / "server.log", driver_memory="1g")
        session = None
        try:
            session = SparkSession.builder.remote(server.url).create()
            target = str(tmp_path / "history")
            first = session.range(KEYS).select("id", (F.col("id") % 7).alias("value"))
            later = session.range(0, KEYS, 2).select("id", (F.col("id") % 7 + 1).alias("value"))
            for sequence, feed in enumerate([first, later], start=1):
                done = apply_changes(
                    feed.withColumn("seq", F.lit(sequence)),
                    target,
                    keys=["id"],
                    sequence_by="seq",
                    stored_as_scd_type=2,
                )
            assert done == AppliedChanges(changes=KEYS // 2, keys=KEYS // 2, rows=KEYS)
            expected = []
            for key in range(KEYS):
                if key % 2:
                    expected.append((key, key % 7, 1, 1, None))
                else:
                    expected += [(key, key % 7, 1, 1, 2), (key, key % 7 + 1, 2, 2, None)]
            names = ["id", "value", "seq", "__START_AT", "__END_AT"]
            rows = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in expected])
            assert sorted_rows(read_table(target)) == sorted_rows(rows)
            # The batch's commit says two tasks resolved it, and each executor ran one.
            assert _outcome(target)["tasks"] == 2
            logs = executor_logs(work)
            assert len(logs) == 2
            assert all(log.count("Committed partition") == 2 for log in logs), logs[0][-2000:]
        finally:
            if session is not None:
                session.stop()
            server.stop()


def _outcome(target: str) -> dict[str, Any]:
    """What the last batch did, as the state's last commit records it."""
    history = DeltaTable(target + "__apply_changes_state").history(1)
    return dict(json.loads(history[0][OUTCOME_KEY]))
