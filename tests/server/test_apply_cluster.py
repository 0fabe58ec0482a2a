"""apply_changes on a standalone cluster of two one-core executors (a master and a worker
of this machine's PySpark): the client's plan splits the feed by key into as many tasks as
the cluster runs at once, and each executor resolves its keys' changes (the batch's commit
counts the tasks that resolved a share; each executor's log shows its data-writing tasks),
with the target equal to what the changes make: a batch call, and a stream whose
micro-batches bring late changes, deletes and keys back, equal to the model of the whole
feed, into a Delta target and an Iceberg one. The executors' Python workers share what they
read of a Delta state through their own executor's local folder (``shared_cache``), which
each executor has apart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_cdc import AppliedChanges, apply_changes
from spark_cdc.server_plugin.sinks.apply.delta.tables import OUTCOME_KEY
from spark_cdc.server_plugin.sinks.apply.iceberg import tables as iceberg_tables
from spark_cdc.testing.local_server import start_local_server

from tests.support.apply_model import Change, scd1, scd2
from tests.support.apply_targets import read_table, sorted_rows
from tests.support.harness import TEST_SERVER_CONF
from tests.support.iceberg_tables import catalog_properties, sql_catalog
from tests.support.standalone import executor_logs, standalone_cluster

KEYS = 4_000
CLUSTER_CONF = {
    **TEST_SERVER_CONF,
    "spark.executor.cores": "1",
    "spark.executor.memory": "1g",
    "spark.cores.max": "2",
    # Both executors before the first query, and no task waiting for the other's shuffle
    # output: each free executor takes a task.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.locality.wait": "0",
}


pytestmark = pytest.mark.local_process  # a cluster and a server of its own


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkSession, Path]]:
    """A session on a server whose master is the cluster, and the worker's folder."""
    folder = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(folder) as (master, work):
        conf = {**CLUSTER_CONF, "spark.master": master}
        server = start_local_server(conf=conf, log_path=folder / "server.log", driver_memory="1g")
        session = None
        try:
            session = SparkSession.builder.remote(server.url).create()
            yield session, work
        finally:
            if session is not None:
                session.stop()
            server.stop()


def _data_tasks(work: Path) -> list[int]:
    """How many data-writing tasks each executor has run."""
    return [log.count("Committed partition") for log in executor_logs(work)]


@pytest.mark.timeout(900)  # a cluster and a server start
@pytest.mark.parametrize("target_format", ["delta", "iceberg"])
def test_each_executor_resolves_its_share_of_the_keys(
    cluster: tuple[SparkSession, Path], tmp_path: Path, target_format: str
) -> None:
    session, work = cluster
    before = _data_tasks(work) or [0, 0]
    iceberg = target_format == "iceberg"
    target = "db.history" if iceberg else str(tmp_path / "history")
    where = {"format": "iceberg", "catalog": catalog_properties(tmp_path)} if iceberg else {}
    first = session.range(KEYS).select("id", (F.col("id") % 7).alias("value"))
    later = session.range(0, KEYS, 2).select("id", (F.col("id") % 7 + 1).alias("value"))
    for sequence, feed in enumerate([first, later], start=1):
        done = apply_changes(
            feed.withColumn("seq", F.lit(sequence)),
            target,
            **where,
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
    found = _iceberg_rows(tmp_path, target) if iceberg else read_table(target)
    assert sorted_rows(found) == sorted_rows(rows)
    # Each batch's commits say two tasks resolved it, and each executor ran one of each.
    for outcomes in _outcomes(tmp_path, target, iceberg):
        assert [json.loads(o)["tasks"] for o in outcomes] == [2, 2]
    ran = [after - earlier for after, earlier in zip(_data_tasks(work), before, strict=True)]
    assert ran == [2, 2], executor_logs(work)[0][-2000:]


STREAM_KEYS, STREAM_FILES, STREAM_CHANGES = 4_000, 3, 3_000


@pytest.mark.timeout(900)
@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize("target_format", ["delta", "iceberg"])
def test_a_stream_on_the_cluster_equals_the_model(
    cluster: tuple[SparkSession, Path], tmp_path: Path, scd_type: int, target_format: str
) -> None:
    """Three micro-batches of changes over keys spread across both executors' shares
    (updates, deletes, new keys, keys back after a delete, changes that come late): the
    target is the model's of the whole feed, and every micro-batch was committed once to
    the target and once to the state, each commit with its marker. A Delta target's
    micro-batches are resolved by two tasks, one in each executor; an Iceberg target's by
    the commit, from the rows the micro-batch's task hands back (one file: one task)."""
    session, work = cluster
    before = _data_tasks(work) or [0, 0]
    source = tmp_path / "changes"
    source.mkdir()
    rng = np.random.default_rng(scd_type)
    changes: list[Change] = []
    for number in range(STREAM_FILES):
        ids = rng.choice(STREAM_KEYS, STREAM_CHANGES, replace=False)
        # Sequences mostly after the earlier files' (a stream's usual order), some before
        # them (late): each key's sequences stay distinct, its file's number in the units.
        late = rng.random(STREAM_CHANGES) < 0.1
        seq = np.where(late, rng.integers(0, 10 * number + 1, STREAM_CHANGES), 10 * (number + 1))
        seq = seq * 10 + number
        deleted = rng.random(STREAM_CHANGES) < 0.15
        values = rng.integers(0, 3, STREAM_CHANGES)  # few values: some changes open no version
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "value": pa.array(values, pa.int64()),
                "seq": pa.array(seq, pa.int64()),
                "op": pa.array(np.where(deleted, "D", "U")),
            }
        )
        pq.write_table(table, source / f"changes-{number:02d}.parquet")
        for row in table.to_pylist():
            kind = "delete" if row["op"] == "D" else "upsert"
            values_set = {"value": row["value"], "seq": row["seq"]} if kind == "upsert" else {}
            changes.append(Change((row["id"],), (row["seq"],), kind, values_set))
    feed = session.readStream.schema("id long, value long, seq long, op string")
    feed = feed.option("maxFilesPerTrigger", 1).parquet(str(source))
    iceberg = target_format == "iceberg"
    target = "db.target" if iceberg else str(tmp_path / "target")
    where = {"format": "iceberg", "catalog": catalog_properties(tmp_path)} if iceberg else {}
    query = apply_changes(
        feed,
        target,
        **where,
        keys=["id"],
        sequence_by="seq",
        apply_as_deletes="op = 'D'",
        except_column_list=["op"],
        stored_as_scd_type=scd_type,
        checkpoint_location=str(tmp_path / "checkpoint"),
        trigger={"availableNow": True},
    )
    assert not isinstance(query, AppliedChanges)
    query.awaitTermination(600)
    assert query.exception() is None
    assert len(query.recentProgress) == STREAM_FILES
    if scd_type == 1:
        rows = [{"id": k[0], **v} for k, v in scd1(changes).items()]
    else:
        rows = [
            {"id": k[0], **v.values, "__START_AT": v.start[0], "__END_AT": v.end and v.end[0]}
            for k, versions in scd2(changes, ["value", "seq"]).items()
            for v in versions
        ]
    found = _iceberg_rows(tmp_path, target) if iceberg else read_table(target)
    assert sorted_rows(found) == sorted_rows(pa.Table.from_pylist(rows))
    for outcomes in _outcomes(tmp_path, target, iceberg):
        batches = [json.loads(outcome) for outcome in outcomes]
        assert sorted(b["batch"] for b in batches) == list(range(STREAM_FILES))
        assert all(b["tasks"] == 2 for b in batches), batches
    ran = [after - earlier for after, earlier in zip(_data_tasks(work), before, strict=True)]
    assert ran == [STREAM_FILES, STREAM_FILES], ran


def _iceberg_rows(folder: Path, name: str) -> pa.Table:
    return sql_catalog(folder).load_table(name).scan().to_arrow()


def _outcomes(folder: Path, target: str, iceberg: bool) -> list[list[str]]:
    """What the target's and the state's commits say they did (the latest first)."""
    if iceberg:
        catalog = sql_catalog(folder)
        names = (target, target + "__apply_changes_state")
        return [list(iceberg_tables.every_outcome(catalog.load_table(n))) for n in names]
    tables = (target, target + "__apply_changes_state")
    return [[c[OUTCOME_KEY] for c in DeltaTable(t).history() if c.get(OUTCOME_KEY)] for t in tables]
