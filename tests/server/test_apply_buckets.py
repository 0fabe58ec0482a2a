"""The state's key buckets on a Spark Connect server: the plan's key hash is Spark's, so the
rows Spark's ``repartition`` gives one task are one bucket of the state (each task then
reads its own part of it), for keys of several types and several columns; and the state
``apply_changes`` makes is laid out in as many buckets as the server runs tasks."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_cdc import apply_changes
from spark_cdc.rewrite.apply_plan import plan_apply
from spark_cdc.rewrite.server_code import server_parallelism
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET, KEY_HASH

# Key columns of several types, as expressions over ``range``'s ``id`` (each row its own
# key), and the same keys as plain values: a collated string hashes as its plain string.
KEYS = {
    "long": ["id"],
    "string": ["cast(id as string) as id"],
    "collated string": ["collate(cast(id as string), 'UTF8_LCASE') as id"],
    "decimal": ["cast(id as decimal(20, 2)) as id"],
    "date and int": [
        "date_add(date'2020-01-01', cast(id % 700 as int)) as day",
        "cast(id div 700 as int) as n",
    ],
}
PLAIN = {**KEYS, "collated string": KEYS["string"]}


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_task_of_the_plan_holds_one_bucket(spark: SparkSession, kind: str) -> None:
    """Spark's repartition gives a task the keys whose hash is its number modulo the
    tasks: one bucket of a state made with as many; the hash is Spark's of the plain keys."""
    feed = spark.range(2000).selectExpr(*KEYS[kind], "id as seq")
    keys = [name for name in feed.columns if name != "seq"]
    plain = spark.range(2000).selectExpr(*PLAIN[kind]).select(F.hash(*keys).alias("h"))
    expected = sorted(plain.toArrow().column("h").to_pylist())
    for tasks in (2, 3):
        plan = plan_apply(feed, 1, keys, "seq", None, None, None, None, None, None, tasks)
        placed = plan.prepared.select(F.spark_partition_id().alias("task"), KEY_HASH).toArrow()
        hashes = placed.column(KEY_HASH).to_numpy().astype(np.int64)
        assert (np.mod(hashes, tasks) == placed.column("task").to_numpy()).all()
        assert sorted(placed.column(KEY_HASH).to_pylist()) == expected


@pytest.mark.parametrize("scd_type", [1, 2])
def test_the_state_is_laid_out_in_the_servers_tasks(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    """Two batches (the second through the tasks' staged files): every state file holds
    only rows whose key hashes to its bucket, Spark's hash of the key."""
    target = str(tmp_path / "target")
    for first in (0, 500):
        feed = spark.range(first, first + 1000).select("id", F.lit(first).alias("seq"))
        apply_changes(feed, target, keys=["id"], sequence_by="seq", stored_as_scd_type=scd_type)
    state = target + "__apply_changes_state"
    tasks = server_parallelism(spark)
    assert Layout.of(DeltaTable(state)) == Layout(True, tasks if tasks > 1 else None)
    adds = pa.RecordBatchReader.from_stream(
        DeltaTable(state).get_add_actions(flatten=True)
    ).read_all()
    expected = {
        row["id"]: row["h"]
        for row in spark.range(1500).select("id", F.hash("id").alias("h")).collect()
    }
    seen = 0
    for add in adds.to_pylist():
        rows = pq.read_table(os.path.join(state, add["path"]), columns=["id", KEY_HASH])
        for key, hashed in zip(
            rows.column("id").to_pylist(), rows.column(KEY_HASH).to_pylist(), strict=True
        ):
            assert hashed == expected[key]
            if tasks > 1:
                assert hashed % tasks == int(add[f"partition.{BUCKET}"])
            seen += 1
    assert seen >= 1500
