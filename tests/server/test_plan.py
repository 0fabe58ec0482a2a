"""The plan is built on the client alone: zero RPCs, and a protobuf of the expected shape."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.connect.proto import Relation
from spark_cdc import (
    ChangelogReader,
    ChangelogSpec,
    DeduplicationMode,
    post_process,
    read,
    readStream,
)
from spark_cdc.rewrite.names import EVENTS
from spark_cdc.rewrite.plan_tree import reads_a_stream
from spark_cdc.server_plugin.cdc_options import NULLABLE_SCHEMA

from tests.support.feeds import feed, row
from tests.support.rpc_count import CountingStub, counting_rpcs


@pytest.fixture
def rpcs(spark: SparkSession) -> Iterator[CountingStub]:
    with counting_rpcs(spark) as counting:
        yield counting


WIDE = ", ".join(f"c{i} int" for i in range(200))
SPEC = ChangelogSpec(row_id=["c0"], row_version="c1")
FULL_ROW = ChangelogSpec(row_id=["c0"])
SCHEMA = f"{WIDE}, _change_type string, _commit_version long, _commit_timestamp timestamp"


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize("spec", [SPEC, FULL_ROW], ids=["row version", "full row"])
@pytest.mark.parametrize("mode", ["dropCarryovers", "netChanges"])
def test_post_process_makes_no_server_round_trip(
    spark: SparkSession, rpcs: CountingStub, streaming: bool, spec: ChangelogSpec, mode: str
) -> None:
    source = feed(spark, [row(1, "a", "insert", 1)], schema=SCHEMA, streaming=streaming)
    options = {
        "deduplicationMode": mode,
        "computeUpdates": True,
        "startingTimestamp": "2024-01-01",
        "endingTimestamp": "2025-01-01",
    }
    post_process(source, spec, options)  # first call: pyspark's own one-time config fetch
    rpcs.calls.clear()
    out = post_process(source, spec, options)
    out.writeStream if streaming else out.where("c0 > 0")
    assert rpcs.calls == []


def _relation_types(df: DataFrame, spark: SparkSession) -> list[str]:
    """Relation kinds from the root down the first-child chain of the plan protobuf."""
    relation: Relation = df._plan.plan(spark.client)
    kinds = []
    while True:
        kind = relation.WhichOneof("rel_type")
        kinds.append(kind)
        child = getattr(relation, kind)
        if "input" not in child.DESCRIPTOR.fields_by_name or not child.HasField("input"):
            return kinds
        relation = child.input


def test_streaming_plan_shape(spark: SparkSession) -> None:
    out = post_process(feed(spark, [], streaming=True), SPEC, {"computeUpdates": True})
    kinds = _relation_types(out, spark)
    assert kinds[0] == "with_columns"  # _commit_timestamp without watermark metadata
    assert kinds[1] == "drop"  # helpers
    assert kinds[2] == "with_columns"  # relabel
    assert kinds[3] == "project"  # inline
    assert kinds[4] == "filter"  # carry-overs
    assert kinds[5] == "aggregate"
    assert kinds[6] == "with_watermark"
    assert kinds[7] == "filter"  # NULL _commit_timestamp guard
    assert kinds[-1] == "read"
    aggregate = out._plan._child._child._child._child._child.plan(spark.client).aggregate
    names = [e.alias.name[0] for e in aggregate.aggregate_expressions]
    assert names[-1] == EVENTS
    assert reads_a_stream(out)


def test_batch_plan_shape_is_a_window(spark: SparkSession) -> None:
    out = post_process(feed(spark, []), SPEC, {"computeUpdates": True})
    kinds = _relation_types(out, spark)
    assert "aggregate" not in kinds and "with_watermark" not in kinds
    assert str(out._plan.plan(spark.client)).count("window {") >= 1
    assert not reads_a_stream(out)


@pytest.mark.parametrize("where", ["source", "client"])
@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_changelog_reader_makes_no_server_round_trip(
    spark: SparkSession, rpcs: CountingStub, streaming: bool, where: str
) -> None:
    reader = ChangelogReader(spark, streaming=streaming).options(
        rowId="id",
        computeUpdates=True,
        startingVersion=2,
        maxFilesPerTrigger=5,
        postProcessing=where,
    )
    reader.changes("/data/orders")
    rpcs.calls.clear()
    out = reader.changes("/data/orders")
    read = str(out._plan.plan(spark.client))
    assert rpcs.calls == []
    assert reads_a_stream(out) == streaming
    # The source gets the range (to skip commits), its own options and the row id (to name
    # a column the table lacks while Spark resolves the relation).
    for sent in ('"delta_changelog"', '"startingVersion"', '"maxFilesPerTrigger"', '"rowId"'):
        assert sent in read
    if where == "client":  # the client plans the passes: a window or a watermarked aggregate
        assert '"computeUpdates"' not in read and '"deduplicationMode"' not in read
        assert ("window {" in read) != ("with_watermark" in read)
    else:  # the source resolves them: no window, aggregate or watermark in the plan
        for sent in ('"rowId"', '"computeUpdates"', '"deduplicationMode"', f'"{NULLABLE_SCHEMA}"'):
            assert sent in read
        assert "window {" not in read and "aggregate {" not in read
        assert "with_watermark" not in read


def test_changelog_reader_widens_a_zone_less_timestamp_for_the_source(
    spark: SparkSession,
) -> None:
    reader = ChangelogReader(spark).options(
        startingTimestamp="2024-05-01 12:00:00", endingTimestamp="2024-05-02T00:00:00Z"
    )
    plan = str(reader.changes("/t")._plan.plan(spark.client))
    assert '"2024-04-30T18:00:00+00:00"' in plan  # 18 h earlier: any session time zone
    assert '"2024-05-02T00:00:00+00:00"' in plan  # explicit zone: as given


@pytest.mark.parametrize(
    "reader",
    [
        lambda spark: read(spark),
        lambda spark: readStream(spark),
        lambda spark: read(spark).format("delta"),
        lambda spark: ChangelogReader(spark, streaming=True),
    ],
    ids=["read", "readStream", "format", "ChangelogReader(streaming=True)"],
)
def test_load_makes_no_server_round_trip(
    spark: SparkSession, rpcs: CountingStub, reader: Callable[[SparkSession], Any]
) -> None:
    def build() -> DataFrame:
        return (
            reader(spark)
            .options(rowId="id", computeUpdates=True, startingVersion=2)
            .option("deduplicationMode", DeduplicationMode.DROP_CARRYOVERS)
            .load("/data/orders")
        )

    build()
    rpcs.calls.clear()
    out = build()
    assert '"delta_changelog"' in str(out._plan.plan(spark.client))
    assert rpcs.calls == []
