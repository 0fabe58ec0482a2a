"""Bad input, one case each: a clear error and no partial output.

Clear: the error's condition leads its message (``[CONDITION.SUB] ...``; a refusal on the
client is an ``AnalysisException`` whose ``getCondition()`` is that condition), and the
message names what is wrong (the option, the version, the file, the column) and the fix.

No partial output:

- a refusal on the client happens while the DataFrame is built: no query exists (none
  active, no checkpoint folder, no output folder);
- a failing batch write (``df.write.parquet(out)``) leaves no data file at ``out``;
- a failing stream into a parquet sink (transactional: its ``_spark_metadata`` log is what
  it committed) holds whole commits from before the bad one and nothing of the micro-batch
  that failed. When the source refuses a commit (damaged, gone, a new schema), every
  commit before it is delivered first, the last one included (a post-processed stream
  releases a commit one micro-batch after it arrives: the source answers "no new data"
  once, so Spark's no-data micro-batch runs, and fails on the next trigger). When bad rows
  are found inside a micro-batch (the contract violations), a stream that had caught up
  has delivered every commit before them; see ``test_contract_violation_in_a_burst`` for
  what a stream that had not yet caught up holds.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import AnalysisException, PySparkException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from spark_cdc import ChangelogReader, ChangelogSpec, post_process
from spark_cdc.rewrite.errors import CdcAnalysisException

from tests.support.delta_tables import commit_file, rows
from tests.support.feeds import SCHEMA, feed, row
from tests.support.spark_version import ADMISSION_CONTROL

STREAM_TIMEOUT_S = 180
# What the tests read back from a sink: enough to tell commits and rows apart.
DELTA_SINK = "id long, _change_type string, _commit_version long"
FEED_SINK = "id int, _change_type string, _commit_version long"
SNAPSHOT = [(i, "insert", 0) for i in range(3)]  # the tables' version 0, a stream's snapshot
# Spark's own analysis errors, which print the analyzed plan after their first line.
SPARKS_OWN = {"DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION"}


# ----------------------------------------------------------------------------------------
# Writing, failing, and what was left behind.
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a test writes: a batch output, or a stream's sink and its checkpoint."""

    out: Path
    checkpoint: Path


@pytest.fixture
def target(tmp_path: Path) -> Target:
    return Target(tmp_path / "out", tmp_path / "checkpoint")


def write(df: DataFrame, target: Target, streaming: bool) -> Any:
    """The write under test: parquet files, or a stream into a parquet sink."""
    if not streaming:
        df.write.parquet(str(target.out))
        return None
    writer = df.writeStream.format("parquet").option("checkpointLocation", str(target.checkpoint))
    return writer.start(str(target.out))


def stream_failure(query: Any) -> StreamingQueryException:
    """Run a stream until it fails. A source that refuses a commit fails one trigger after
    it reports "no new data", so the failure may come after processAllAvailable returns."""
    try:
        query.processAllAvailable()
        query.awaitTermination(STREAM_TIMEOUT_S)
    except StreamingQueryException as error:
        return error
    finally:
        query.stop()
    raise AssertionError("the stream did not fail")


def failure(df: DataFrame, target: Target, streaming: bool) -> Exception:
    """The error a write fails with: at once (refused when the server analyzed it; then no
    query ran) or while the stream runs."""
    try:
        query = write(df, target, streaming)
    except StreamingQueryException:
        raise
    except Exception as error:
        assert not target.checkpoint.exists(), "a refused stream must not leave a checkpoint"
        return error
    if query is None:
        raise AssertionError("the batch write succeeded")
    return stream_failure(query)


def assert_clear(error: BaseException, condition: str, *named: str) -> str:
    """The error carries ``condition`` as its own (``getCondition()``, on the server's
    errors too) and is one line that leads with it and names each of ``named``, with no
    server traceback in it."""
    assert isinstance(error, PySparkException), type(error)
    assert error.getCondition() == condition, f"{error.getCondition()}: {str(error)[:3000]}"
    text = str(error)
    assert text.startswith(f"[{condition}] "), text[:3000]
    if condition not in SPARKS_OWN:
        assert "Traceback" not in text and "JVM stacktrace" not in text, text[:3000]
    message = text.splitlines()[0]
    missing = [n for n in named if n not in message]
    assert not missing, f"{missing} not named in: {message}"
    return message


def assert_no_query(spark: SparkSession, target: Target) -> None:
    assert not spark.streams.active
    assert not target.checkpoint.exists()
    assert not target.out.exists()


def assert_nothing_written(target: Target) -> None:
    files = [p for p in target.out.rglob("*") if p.is_file()] if target.out.exists() else []
    assert files == [], f"a failed batch write left {files}"


def committed(spark: SparkSession, target: Target, schema: str) -> list[tuple[Any, ...]]:
    """What a parquet sink committed (its _spark_metadata log), as (id, change, version)."""
    if not target.out.exists():
        return []
    assert (target.out / "_spark_metadata").is_dir()
    df = spark.read.schema(schema).parquet(str(target.out))
    return sorted((r.id, r._change_type, r._commit_version) for r in df.collect())


# ----------------------------------------------------------------------------------------
# Delta tables, and commits that reach a running stream the way a writer makes them.
# ----------------------------------------------------------------------------------------


def delta_table(tmp_path: Path, name: str = "table") -> str:
    path = str(tmp_path / name)
    write_deltalake(path, rows(range(3)))
    return path


def put_atomically(file: Path, content: bytes) -> None:
    """A writer's put-if-absent: the file appears whole (written aside, renamed)."""
    aside = file.with_name(f".{file.name}.tmp")
    aside.write_bytes(content)
    os.replace(aside, file)


def staged(path: str) -> str:
    """A copy of the table where the next commits are written before they are published."""
    staging = f"{path}-staging"
    shutil.copytree(path, staging)
    return staging


def publish(
    staging: str, path: str, *, skip: int | None = None, damage: dict[int, bytes] | None = None
) -> None:
    """Make the commits written in ``staging`` appear in ``path``: data files first, then
    each commit file at once. ``skip``: a commit whose file is gone before a reader sees
    it; ``damage``: commit files that appear with this content instead."""
    source, live = Path(staging), Path(path)
    for file in sorted(source.rglob("*")):
        relative = file.relative_to(source)
        if file.is_file() and relative.parts[0] != "_delta_log" and not (live / relative).exists():
            (live / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, live / relative)
    for log_file in sorted((source / "_delta_log").glob("*.json")):
        version = int(log_file.stem)
        if version != skip and not commit_file(path, version).exists():
            content = (damage or {}).get(version, log_file.read_bytes())
            put_atomically(commit_file(path, version), content)


def commit_change_data(path: str, version: int, changes: pa.Table) -> None:
    """Commit ``version`` as a change data file holding ``changes`` (with its own
    ``_change_type``), the way a writer with the change data feed on records a change."""
    name = f"_change_data/cdc-{version}.parquet"
    (Path(path) / "_change_data").mkdir(exist_ok=True)
    pq.write_table(changes, Path(path) / name)
    cdc = {"path": name, "partitionValues": {}, "size": 1, "dataChange": False}
    info = {"timestamp": 1_900_000_000_000 + version, "operation": "MERGE"}
    lines = [json.dumps({"commitInfo": info}), json.dumps({"cdc": cdc})]
    put_atomically(commit_file(path, version), ("\n".join(lines) + "\n").encode())


def post_processed_stream(spark: SparkSession, path: str, **options: Any) -> DataFrame:
    reader = ChangelogReader(spark, streaming=True)
    return reader.options(rowId="id", computeUpdates=True, **options).changes(path)


def caught_up_stream(spark: SparkSession, path: str, target: Target) -> Any:
    """A post-processed stream of the table into a parquet sink, having taken everything."""
    query = write(post_processed_stream(spark, path), target, streaming=True)
    query.processAllAvailable()
    return query


# ----------------------------------------------------------------------------------------
# Invalid options refused on the client: before any query, any RPC, any table access.
# ----------------------------------------------------------------------------------------

ENTRIES = ("post_process batch", "post_process stream", "reader batch", "reader stream")


def _refusal(
    condition: str, options: dict[str, Any], *named: str, entries: tuple[str, ...] = ENTRIES
) -> list[Any]:
    """One case, tried through each entry point that has the option."""
    return [
        pytest.param(entry, condition, options, named, id=f"{entry}:{condition}:{options}")
        for entry in entries
    ]


CLIENT_REFUSALS = [
    *_refusal(
        "INVALID_CDC_OPTION.CONFLICTING_RANGE_TYPES",
        {"startingVersion": 1, "startingTimestamp": "2024-01-01"},
        "startingTimestamp",
    ),
    *_refusal(
        "INVALID_CDC_OPTION.MISSING_STARTING_VERSION",
        {"endingVersion": 3},
        "startingVersion",
        entries=ENTRIES[:3],
    ),
    *_refusal(
        "INVALID_CDC_OPTION.MISSING_STARTING_TIMESTAMP",
        {"endingTimestamp": "2024-01-01"},
        "startingTimestamp",
        entries=ENTRIES[:3],
    ),
    *_refusal(  # the end bound is the problem, not the missing start (issue 27)
        "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM",
        {"endingVersion": 3},
        "endingVersion",
        "availableNow",
        entries=("reader stream",),
    ),
    *_refusal(
        "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM",
        {"endingTimestamp": "2024-01-01"},
        "endingTimestamp",
        entries=("reader stream",),
    ),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_TIMESTAMP", {"startingTimestamp": "2024-13-45"}, "2024-13-45"
    ),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_TIMESTAMP",
        {"startingTimestamp": "2024-01-01", "endingTimestamp": "soon"},
        "endingTimestamp",
        "'soon'",
        entries=ENTRIES[:3],  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_refusal(  # a bound Spark reads but the source cannot be given as a hint
        "INVALID_CDC_OPTION.INVALID_TIMESTAMP",
        {"startingTimestamp": "2024-01"},
        "startingTimestamp",
        "2024-05-01 12:00:00Z",
        entries=("reader stream",),
    ),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE",
        {"deduplicationMode": "latest"},
        "'latest'",
        "netChanges",
    ),
    *_refusal(
        "INVALID_CDC_OPTION.UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL",
        {"deduplicationMode": "none", "computeUpdates": "true"},
        "dropCarryovers",
    ),
    *_refusal(  # ChangelogReader adds a suggestion: test_misspelt_option_on_changelog_reader...
        "INVALID_CDC_OPTION.UNKNOWN_OPTION",
        {"computeUpdate": "true"},
        "'computeUpdate'",
        "computeUpdates",
        entries=("post_process batch", "post_process stream"),
    ),
    *_refusal("INVALID_CDC_OPTION.INVALID_BOOLEAN", {"computeUpdates": "yes"}, "computeUpdates"),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_BOOLEAN",
        {"startingVersion": 0, "startingBoundInclusive": "1"},
        "startingBoundInclusive",
    ),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_BOOLEAN",
        {"startingVersion": 0, "endingVersion": 1, "endingBoundInclusive": "no"},
        "endingBoundInclusive",
        entries=ENTRIES[:3],  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_refusal("INVALID_CDC_OPTION.INVALID_VERSION", {"startingVersion": "-1"}, "startingVersion"),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_VERSION",
        {"startingVersion": 0, "endingVersion": "last"},
        "endingVersion",
        entries=ENTRIES[:3],  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_refusal(
        "INVALID_CDC_OPTION.INVALID_RANGE",
        {"startingVersion": 5, "endingVersion": 2},
        "endingVersion 2",
        "startingVersion 5",
        entries=ENTRIES[:3],  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_refusal(
        "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM",
        {"startingVersion": 0, "endingVersion": 1},
        "endingVersion",
        "availableNow",
        entries=("reader stream",),
    ),
    *_refusal(  # ChangelogReader's option
        "INVALID_CDC_OPTION.INVALID_ROW_ID",
        {"rowId": "id,"},
        "must name one or more columns",
        entries=ENTRIES[2:],
    ),
    *_refusal(  # post_process's ChangelogSpec(row_id=["id", ""])
        "INVALID_CHANGELOG_SCHEMA.INVALID_ROW_ID",
        {"rowId": "id,"},
        "must name one or more columns",
        entries=ENTRIES[:2],
    ),
    *_refusal(
        "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID",
        {"rowId": None, "computeUpdates": True},
        "computeUpdates",
        "rowId",
    ),
    *_refusal(
        "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID",
        {"rowId": None, "deduplicationMode": "netChanges"},
        "net changes",
        "rowId",
    ),
]


def _client_side(spark: SparkSession, entry: str, options: dict[str, Any], table: str) -> Any:
    cdc = {k: v for k, v in options.items() if k != "rowId"}
    row_id = options.get("rowId", "id")
    streaming = entry.endswith("stream")
    if entry.startswith("post_process"):
        spec = ChangelogSpec(row_id=None if row_id is None else row_id.split(","))
        return post_process(feed(spark, [], streaming=streaming), spec, cdc)
    reader = ChangelogReader(spark, streaming=streaming)
    if row_id is not None:
        reader.option("rowId", row_id)
    return reader.options(**cdc).changes(table)


@pytest.mark.parametrize(("entry", "condition", "options", "named"), CLIENT_REFUSALS)
def test_invalid_cdc_option_is_refused_before_any_query(
    spark: SparkSession,
    tmp_path: Path,
    target: Target,
    entry: str,
    condition: str,
    options: dict[str, Any],
    named: tuple[str, ...],
) -> None:
    table = tmp_path / "no-table-needed"  # refused before the table is looked at
    with pytest.raises(CdcAnalysisException) as caught:
        write(_client_side(spark, entry, options, str(table)), target, entry.endswith("stream"))
    assert caught.value.getCondition() == condition
    assert_clear(caught.value, condition, *named)
    assert_no_query(spark, target)
    assert not table.exists()


# ----------------------------------------------------------------------------------------
# Invalid delta_changelog options: refused by the source on the server.
# ----------------------------------------------------------------------------------------

BOTH = (False, True)


def _source(
    condition: str, options: dict[str, Any], *named: str, modes: tuple[bool, ...] = BOTH
) -> list[Any]:
    """One case, in batch and/or streaming."""
    return [
        pytest.param(
            streaming,
            condition,
            options,
            named,
            id=f"{'stream' if streaming else 'batch'}:{condition}:{options}",
        )
        for streaming in modes
    ]


SOURCE_REFUSALS = [
    *_source(  # Spark hands Python sources lower-cased keys; the message lists the right ones
        "INVALID_CDC_OPTION.UNKNOWN_OPTION",
        {"maxFilesPerTriger": "1"},
        "'maxfilespertriger'",
        "maxFilesPerTrigger",
    ),
    *_source("INVALID_CDC_OPTION.MISSING_PATH", {"path": None}, ".load('/path/to/table')"),
    *_source(
        "INVALID_CDC_OPTION.INVALID_VERSION",
        {"startingVersion": "first"},
        "'startingVersion'",
        "'first'",
    ),
    *_source(
        "INVALID_CDC_OPTION.LATEST_IN_BATCH",
        {"startingVersion": "latest"},
        "'latest' is for streams",
        modes=(False,),
    ),
    *_source(  # a batch read is not told to use 'latest', which it refuses (issue 27)
        "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST",
        {"startingVersion": "99"},
        "startingVersion 99",
        "latest version 1",
        "read the table as a stream with startingVersion 'latest'",
        modes=(False,),
    ),
    *_source(
        "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST",
        {"startingVersion": "99"},
        "startingVersion 99",
        "latest version 1",
        "or 'latest' to read only commits made from now on",
        modes=(True,),
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_VERSION",
        {"startingVersion": "0", "endingVersion": "x"},
        "'endingVersion'",
        modes=(False,),  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_source(
        "INVALID_CDC_OPTION.MISSING_STARTING_VERSION",
        {"endingVersion": "1"},
        "startingVersion",
        modes=(False,),
    ),
    *_source(
        "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM",
        {"endingVersion": "1"},
        "endingVersion",
        modes=(True,),
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_RANGE",
        {"startingVersion": "1", "endingVersion": "0"},
        "endingVersion 0",
        "startingVersion 1",
        modes=(False,),  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_source(
        "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM",
        {"startingVersion": "0", "endingVersion": "1"},
        "endingVersion",
        "availableNow",
        modes=(True,),
    ),
    *_source(
        "INVALID_CDC_OPTION.CONFLICTING_RANGE_TYPES",
        {"startingVersion": "0", "startingTimestamp": "2024-01-01"},
        "versions or by timestamps",
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_TIMESTAMP",
        {"startingTimestamp": "yesterday"},
        "'startingTimestamp'",
        "'yesterday'",
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_TIMESTAMP",
        {"startingTimestamp": "2024-01-01", "endingTimestamp": "2024-02-30"},
        "'endingTimestamp'",
        modes=(False,),  # a stream: ENDING_BOUND_IN_STREAM first
    ),
    *_source(
        "INVALID_CDC_OPTION.MISSING_STARTING_TIMESTAMP",
        {"endingTimestamp": "2024-01-01"},
        "startingTimestamp",
        modes=(False,),
    ),
    *_source(
        "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM",
        {"endingTimestamp": "2024-01-01"},
        "endingTimestamp",
        modes=(True,),
    ),
    *_source(  # a stream waits for the next commit instead
        "INVALID_CDC_OPTION.STARTING_TIMESTAMP_AFTER_LATEST",
        {"startingTimestamp": "2999-01-01 00:00:00Z"},
        "startingTimestamp",
        modes=(False,),
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_BOOLEAN",
        {"startingBoundInclusive": "maybe"},
        "'startingBoundInclusive'",
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_BOOLEAN",
        {"endingBoundInclusive": "maybe"},
        "'endingBoundInclusive'",
    ),
    *_source("INVALID_CDC_OPTION.INVALID_BOOLEAN", {"failOnDataLoss": "no"}, "'failOnDataLoss'"),
    *_source(
        "INVALID_CDC_OPTION.INVALID_NUMBER",
        {"maxFilesPerTrigger": "0"},
        "'maxFilesPerTrigger'",
        "'0'",
    ),
    *_source(
        "INVALID_CDC_OPTION.INVALID_SIZE",
        {"maxBytesPerTrigger": "lots"},
        "'maxBytesPerTrigger'",
        "'64m'",
    ),
]


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = delta_table(tmp_path_factory.mktemp("bad_input"))
    write_deltalake(path, rows([3]), mode="append")
    return path


@pytest.mark.parametrize(("streaming", "condition", "options", "named"), SOURCE_REFUSALS)
def test_invalid_source_option_is_refused_by_the_source(
    spark: SparkSession,
    target: Target,
    two_versions: str,
    streaming: bool,
    condition: str,
    options: dict[str, Any],
    named: tuple[str, ...],
) -> None:
    reader = (spark.readStream if streaming else spark.read).format("delta_changelog")
    options = dict(options)
    path = two_versions if options.pop("path", "") is not None else None
    df = reader.options(**options).load(path)
    assert_clear(failure(df, target, streaming), condition, *named)
    assert not spark.streams.active
    if streaming:
        assert committed(spark, target, DELTA_SINK) == []
    else:
        assert_nothing_written(target)


@pytest.mark.parametrize("streaming", BOTH, ids=["batch", "stream"])
def test_misspelt_option_on_changelog_reader_is_refused_before_any_query(
    spark: SparkSession, target: Target, two_versions: str, streaming: bool
) -> None:
    """Refused while the DataFrame is built, in the user's spelling, with the option meant."""
    reader = ChangelogReader(spark, streaming=streaming).options(rowId="id", computeUpdate=True)
    with pytest.raises(AnalysisException) as caught:
        write(reader.changes(two_versions), target, streaming)
    assert caught.value.getCondition() == "INVALID_CDC_OPTION.UNKNOWN_OPTION"
    assert_clear(
        caught.value, "INVALID_CDC_OPTION.UNKNOWN_OPTION", "'computeUpdate'", "'computeUpdates'?"
    )
    assert_no_query(spark, target)


SAME_MISTAKES = [
    {"startingVersion": "first"},
    {"startingBoundInclusive": "maybe"},
    {"deduplicationMode": "latest"},
    {"startingVersion": "1", "startingTimestamp": "2024-01-01"},
    {"endingVersion": "1"},
    {"startingVersion": "5", "endingVersion": "2"},
    {"startingTimestamp": "2024-13-45"},
    {"rowId": "id,"},
]


@pytest.mark.parametrize("options", SAME_MISTAKES, ids=str)
def test_the_client_and_the_source_word_a_mistake_alike(
    spark: SparkSession, target: Target, two_versions: str, options: dict[str, str]
) -> None:
    """ChangelogReader refuses on the client what the source refuses on the server: the
    same condition, parameters and sentence (one validator, one registry)."""
    with pytest.raises(AnalysisException) as on_client:
        ChangelogReader(spark).options(**options).changes(two_versions)
    source = spark.read.format("delta_changelog").options(**options).load(two_versions)
    on_server = failure(source, target, streaming=False)
    assert isinstance(on_server, PySparkException)
    client, server = on_client.value, on_server
    assert client.getCondition() == server.getCondition(), str(server)
    assert client.getMessageParameters() == server.getMessageParameters()
    assert str(client) == str(server).splitlines()[0]


# ----------------------------------------------------------------------------------------
# Tables that are not Delta tables, or whose columns collide with the change feed's.
# ----------------------------------------------------------------------------------------


def _not_a_table(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / kind
    if kind == "empty folder":
        path.mkdir()
    elif kind == "parquet folder":
        path.mkdir()
        pq.write_table(rows(range(3)), path / "part-0.parquet")
    elif kind == "partition folder":  # one level below a table's root
        write_deltalake(str(tmp_path / "table"), rows(range(3)), partition_by=["part"])
        path = tmp_path / "table" / "part=odd"
    return path


@pytest.mark.parametrize("kind", ["missing", "empty folder", "parquet folder", "partition folder"])
@pytest.mark.parametrize("streaming", BOTH, ids=["batch", "stream"])
def test_a_path_that_is_not_a_delta_table(
    spark: SparkSession, tmp_path: Path, target: Target, kind: str, streaming: bool
) -> None:
    path = _not_a_table(kind, tmp_path)
    df = ChangelogReader(spark, streaming=streaming).option("rowId", "id").changes(str(path))
    error = failure(df, target, streaming)
    assert_clear(error, "DELTA_CHANGELOG.NOT_A_DELTA_TABLE", f"'{path}'", "_delta_log")
    assert "   0: " not in str(error), "no native backtrace from delta-rs"
    assert_no_query(spark, target)


@pytest.mark.parametrize("streaming", BOTH, ids=["batch", "stream"])
@pytest.mark.parametrize(
    ("column", "condition"),
    [
        ("_change_type", "DELTA_CHANGELOG.RESERVED_COLUMN"),
        ("_commit_timestamp", "DELTA_CHANGELOG.RESERVED_COLUMN"),
        ("__spark_cdc_del_cnt", "DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION"),
    ],
)
def test_table_column_colliding_with_the_change_feed(
    spark: SparkSession,
    tmp_path: Path,
    target: Target,
    column: str,
    condition: str,
    streaming: bool,
) -> None:
    """Delta columns named like the feed's own are refused by the source; columns with the
    rewrite's reserved prefix fail analysis naming the column. Both before any query."""
    path = str(tmp_path / "table")
    write_deltalake(path, rows(range(2)).append_column(column, pa.array(["a", "b"])))
    df = ChangelogReader(spark, streaming=streaming).option("rowId", "id").changes(path)
    with pytest.raises(Exception) as caught:
        write(df, target, streaming)
    assert_clear(caught.value, condition, column)
    assert_no_query(spark, target)


# ----------------------------------------------------------------------------------------
# A damaged transaction log.
# ----------------------------------------------------------------------------------------

_ADD_WITHOUT_PATH = {"add": {"size": 1, "partitionValues": {}, "dataChange": True}}
DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda text: text[: len(text) // 2],  # a torn write
    "non-JSON line": lambda text: text.rstrip(b"\n") + b"\n<<<<<<< ours\n",
    "empty": lambda text: b"",
    "action without path": lambda text: (
        text.rstrip(b"\n") + b"\n" + json.dumps(_ADD_WITHOUT_PATH).encode() + b"\n"
    ),
}


def damage(path: str, version: int, how: str) -> None:
    file = commit_file(path, version)
    file.write_bytes(DAMAGES[how](file.read_bytes()))


def corrupt_commit_named(error: BaseException, path: str, version: int) -> str:
    file = str(commit_file(path, version))
    return assert_clear(
        error, "DELTA_CHANGELOG.CORRUPT_COMMIT", f"Commit {version} ", file, "Restore"
    )


@pytest.mark.parametrize("how", sorted(DAMAGES))
@pytest.mark.parametrize("where", ["latest commit", "commit under a checkpoint"])
def test_a_damaged_commit_file_fails_a_batch_read(
    spark: SparkSession, tmp_path: Path, target: Target, how: str, where: str
) -> None:
    """The latest commit: delta-rs cannot load the table; one a checkpoint covers: delta-rs
    loads the table, and the change feed reads the damaged file itself. Either way the
    error names the commit and its file, not "not a Delta table"."""
    path = delta_table(tmp_path)
    write_deltalake(path, rows([3]), mode="append")
    write_deltalake(path, rows([4]), mode="append")
    if where == "commit under a checkpoint":
        DeltaTable(path).create_checkpoint()
    version = 2 if where == "latest commit" else 1
    damage(path, version, how)
    df = ChangelogReader(spark).options(rowId="id", startingVersion=0).changes(path)
    message = corrupt_commit_named(failure(df, target, streaming=False), path, version)
    assert ("empty" in message) == (how == "empty")
    assert_nothing_written(target)


def test_a_damaged_commit_is_not_skipped_as_data_loss(
    spark: SparkSession, tmp_path: Path, target: Target
) -> None:
    """failOnDataLoss=false skips what is gone; a damaged commit's changes are unknown."""
    path = delta_table(tmp_path)
    write_deltalake(path, rows([3]), mode="append")
    DeltaTable(path).create_checkpoint()
    damage(path, 1, "truncated")
    df = ChangelogReader(spark).options(startingVersion=0, failOnDataLoss=False).changes(path)
    message = corrupt_commit_named(failure(df, target, streaming=False), path, 1)
    assert "failOnDataLoss=false does not skip it" in message
    assert_nothing_written(target)


def test_a_stream_does_not_start_on_a_table_whose_latest_commit_is_damaged(
    spark: SparkSession, tmp_path: Path, target: Target
) -> None:
    path = delta_table(tmp_path)
    write_deltalake(path, rows([3]), mode="append")
    damage(path, 1, "truncated")
    corrupt_commit_named(failure(post_processed_stream(spark, path), target, True), path, 1)
    assert_no_query(spark, target)


def test_unknown_actions_and_a_missing_commit_info_are_not_damage(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What Delta's readers accept is read: action types this reader does not know (a
    newer protocol's), and a commit without commitInfo (its file time is its time)."""
    path = delta_table(tmp_path)
    write_deltalake(path, rows([3]), mode="append")
    file = commit_file(path, 1)
    lines = [line for line in file.read_text().splitlines() if "commitInfo" not in line]
    lines.append(json.dumps({"checkpointMetadata": {"version": 1}}))
    lines.append(json.dumps({"someFutureAction": {"x": [1]}}))
    file.write_text("\n".join(lines) + "\n")
    df = ChangelogReader(spark).options(startingVersion=1).changes(path)
    assert [(r.id, r._change_type, r._commit_version) for r in df.collect()] == [(3, "insert", 1)]


# ----------------------------------------------------------------------------------------
# A bad commit under a running stream: the source refuses it after serving what came before.
# ----------------------------------------------------------------------------------------


def _bad_second_commit(case: str, staging: str) -> None:
    """Version 2 of a staged table, which version 3 follows."""
    if case == "schema change":
        wider = rows([6]).append_column("note", pa.array(["n"]))
        write_deltalake(staging, wider, mode="append", schema_mode="merge")
        more = rows([7]).append_column("note", pa.array(["m"]))
        write_deltalake(staging, more, mode="append", schema_mode="merge")
    else:
        write_deltalake(staging, rows([6]), mode="append")
        write_deltalake(staging, rows([7]), mode="append")


@pytest.mark.parametrize(
    ("case", "condition", "named"),
    [
        ("damaged", "DELTA_CHANGELOG.CORRUPT_COMMIT", ("Commit 2 ", "Restore the file")),
        (
            "removed",
            "DELTA_CHANGELOG.DATA_LOSS",
            ("Commit 2 ", "next available commit is 3", "failOnDataLoss=false"),
        ),
        (
            "schema change",
            "DELTA_CHANGELOG.SCHEMA_CHANGED",
            ("Version 2 ", "note:string", "Restart the query"),
        ),
    ],
)
def test_a_bad_commit_under_a_running_stream(
    spark: SparkSession,
    tmp_path: Path,
    target: Target,
    case: str,
    condition: str,
    named: tuple[str, ...],
) -> None:
    """Versions 1 (fine), 2 (bad) and 3 appear together under a caught-up stream: it
    delivers version 1 whole, released by Spark's no-data micro-batch, then fails on 2."""
    path = delta_table(tmp_path)
    query = caught_up_stream(spark, path, target)
    staging = staged(path)
    write_deltalake(staging, rows([5]), mode="append")
    _bad_second_commit(case, staging)
    if case == "damaged":
        damaged = DAMAGES["truncated"](commit_file(staging, 2).read_bytes())
        publish(staging, path, damage={2: damaged})
    else:
        publish(staging, path, skip=2 if case == "removed" else None)
    error = stream_failure(query)
    assert_clear(error, condition, *named)
    if case == "damaged":
        corrupt_commit_named(error, path, 2)
    assert committed(spark, target, DELTA_SINK) == [*SNAPSHOT, (5, "insert", 1)]


def test_a_restarted_stream_delivers_the_commits_before_a_damaged_one(
    spark: SparkSession, tmp_path: Path, target: Target
) -> None:
    """Restarted on a table whose log was damaged meanwhile: the commits before the damage
    come out whole, as one micro-batch, and then the stream fails."""
    path = delta_table(tmp_path)
    caught_up_stream(spark, path, target).stop()
    for i in (5, 6, 7):
        write_deltalake(path, rows([i]), mode="append")
    DeltaTable(path).create_checkpoint()  # delta-rs still loads the table
    damage(path, 3, "non-JSON line")
    query = write(post_processed_stream(spark, path), target, streaming=True)
    corrupt_commit_named(stream_failure(query), path, 3)
    assert committed(spark, target, DELTA_SINK) == [*SNAPSHOT, (5, "insert", 1), (6, "insert", 2)]


@pytest.mark.skipif(not ADMISSION_CONTROL, reason="Python sources get availableNow in 4.2")
@pytest.mark.parametrize("where", ["source", "client"])
def test_available_now_fails_on_a_damaged_commit_instead_of_stopping_short(
    spark: SparkSession, tmp_path: Path, target: Target, where: str
) -> None:
    """availableNow would take "no new data" for the end and stop cleanly, so there the
    source fails at once. With the client's plan the commit just before the damage, still
    in the post-processed stream's state, is then not delivered (one file per trigger:
    version 0 is); resolved in the source, every commit before the damage is."""
    path = delta_table(tmp_path)
    for i in (5, 6):
        write_deltalake(path, rows([i]), mode="append")
    DeltaTable(path).create_checkpoint()
    damage(path, 2, "truncated")
    df = post_processed_stream(
        spark, path, startingVersion=0, maxFilesPerTrigger=1, postProcessing=where
    )
    writer = df.writeStream.format("parquet").option("checkpointLocation", str(target.checkpoint))
    query = writer.trigger(availableNow=True).start(str(target.out))
    corrupt_commit_named(stream_failure(query), path, 2)
    delivered = [*SNAPSHOT, (5, "insert", 1)] if where == "source" else SNAPSHOT
    assert committed(spark, target, DELTA_SINK) == delivered


# ----------------------------------------------------------------------------------------
# Contract violations: found inside a micro-batch, which fails whole.
# ----------------------------------------------------------------------------------------


def _feed_file(folder: Path, commit: list[dict[str, Any]]) -> None:
    """One commit of a change feed as one parquet file of a streamed folder."""
    schema = pa.schema(
        [
            ("id", pa.int32()),
            ("v", pa.string()),
            ("_change_type", pa.string()),
            ("_commit_version", pa.int64()),
            ("_commit_timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
    version = commit[0]["_commit_version"]
    aside = folder.parent / f"commit-{version}.parquet"
    pq.write_table(pa.Table.from_pylist(commit, schema=schema), aside)
    os.replace(aside, folder / aside.name)


def test_null_commit_timestamp_fails_a_stream_after_the_commits_before_it(
    spark: SparkSession, tmp_path: Path, target: Target
) -> None:
    folder = tmp_path / "feed"
    folder.mkdir()
    for version in (1, 2):
        _feed_file(folder, [row(version, "a", "insert", version)])
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(folder))
    query = write(post_process(stream, ChangelogSpec(row_id=["id"])), target, streaming=True)
    query.processAllAvailable()
    _feed_file(folder, [{**row(3, "a", "insert", 3), "_commit_timestamp": None}])
    error = stream_failure(query)
    assert_clear(error, "CHANGELOG_CONTRACT_VIOLATION.NULL_COMMIT_TIMESTAMP", "_commit_timestamp")
    assert committed(spark, target, FEED_SINK) == [(1, "insert", 1), (2, "insert", 2)]


def _upsert(path: str) -> None:
    changes = rows([6]).append_column("_change_type", pa.array(["upsert"]))
    commit_change_data(path, 2, changes)


def _unlabelled(path: str) -> None:
    changes = rows([6]).append_column("_change_type", pa.array([None], pa.string()))
    commit_change_data(path, 2, changes)


def _two_inserts_of_one_id(path: str) -> None:
    write_deltalake(path, rows([7, 7]), mode="append")  # Delta has no primary keys


@pytest.mark.parametrize(
    ("bad_commit", "condition", "named"),
    [
        pytest.param(
            _upsert,
            "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE",
            ("upsert", "insert, delete, update_preimage, update_postimage"),
            id="unknown change type",
        ),
        pytest.param(  # the source declares _change_type NOT NULL: it refuses the file
            _unlabelled,
            "DELTA_CHANGELOG.NULL_IN_NOT_NULL_COLUMN",
            ("'_change_type'", "version 2", "NOT NULL"),
            id="NULL change type",
        ),
        pytest.param(
            _two_inserts_of_one_id,
            "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION",
            ("commit version 2", "2 inserts"),
            id="two inserts of one row id",
        ),
    ],
)
@pytest.mark.parametrize("streaming", BOTH, ids=["batch", "stream"])
def test_bad_rows_in_a_delta_commit(
    spark: SparkSession,
    tmp_path: Path,
    target: Target,
    bad_commit: Callable[[str], None],
    condition: str,
    named: tuple[str, ...],
    streaming: bool,
) -> None:
    path = delta_table(tmp_path)
    query = caught_up_stream(spark, path, target) if streaming else None
    write_deltalake(path, rows([5]), mode="append")
    if query is not None:
        query.processAllAvailable()
    bad_commit(path)
    if query is not None:
        assert_clear(stream_failure(query), condition, *named)
        assert committed(spark, target, DELTA_SINK) == [*SNAPSHOT, (5, "insert", 1)]
        return
    df = ChangelogReader(spark).options(rowId="id", computeUpdates=True).changes(path)
    assert_clear(failure(df, target, streaming=False), condition, *named)
    assert_nothing_written(target)


@pytest.mark.parametrize(
    ("bad", "condition", "delivered"),
    [
        pytest.param(
            {"_commit_timestamp": None},
            "CHANGELOG_CONTRACT_VIOLATION.NULL_COMMIT_TIMESTAMP",
            [1],
            id="NULL commit timestamp",
        ),
        pytest.param(
            {"_change_type": "upsert"},
            "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE",
            [1],
            id="unknown change type",
        ),
        pytest.param(
            {"id": 3},
            "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION",
            [1, 2],
            id="two inserts of one row id",
        ),
    ],
)
def test_contract_violation_in_a_burst(
    spark: SparkSession,
    target: Target,
    bad: dict[str, Any],
    condition: str,
    delivered: list[int],
) -> None:
    """Commits 1, 2 and a bad 3 arrive in consecutive micro-batches of a stream that has not
    caught up. A commit is released by the micro-batch after the one it arrived in, so the
    micro-batch that reads 3 is also the one releasing 2: when 3's rows fail as they arrive
    (NULL timestamp, unknown change type), 2 goes down with it, whole, and stays in the
    query's state; when they fail only as 3 is released (two inserts), 2 is out."""
    commits = [
        [row(1, "a", "insert", 1)],
        [row(2, "b", "insert", 2)],
        [row(3, "c", "insert", 3), {**row(4, "d", "insert", 3), **bad}],
    ]
    stream = feed(spark, [], streaming=True, commits=commits)
    out = post_process(stream, ChangelogSpec(row_id=["id"]), {"computeUpdates": True})
    query = write(out, target, streaming=True)
    assert_clear(stream_failure(query), condition)
    assert committed(spark, target, FEED_SINK) == [(v, "insert", v) for v in delivered]
