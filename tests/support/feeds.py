"""Building change feeds for tests, running them, and the reference model of the semantics."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, BinaryType, MapType, StructType, TimestampType
from spark_cdc.server_plugin.changefeed.sample_changelog import SOURCE_NAME, commits_option

BASE_TIME = datetime(2024, 1, 1, tzinfo=timezone.utc)
SCHEMA = "id int, v string, _change_type string, _commit_version long, _commit_timestamp timestamp"


def commit_time(version: int) -> datetime:
    """One second per version: strictly increasing, as the watermark needs."""
    return BASE_TIME + timedelta(seconds=version)


def row(id: Any, v: Any, change_type: str | None, version: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": id,
        "v": v,
        **extra,
        "_change_type": change_type,
        "_commit_version": version,
        "_commit_timestamp": commit_time(version),
    }


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1_000_000)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("ascii")  # Arrow encodes it back to the same bytes
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


def by_commit(rows: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group rows into commits in version order (each commit whole)."""
    commits: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        commits[r["_commit_version"]].append(r)
    return [commits[v] for v in sorted(commits, key=lambda v: (v is None, v))]


def feed(
    spark: SparkSession,
    rows: Sequence[dict[str, Any]],
    *,
    schema: str = SCHEMA,
    streaming: bool = False,
    commits_per_batch: int = 1,
    commits: list[list[dict[str, Any]]] | None = None,
) -> DataFrame:
    """A change feed served by the test source, batch or streaming, whole commits per batch."""
    grouped = commits if commits is not None else by_commit(rows)
    payload = commits_option([[_json_value(r) for r in c] for c in grouped])
    reader = spark.readStream if streaming else spark.read
    return (
        reader.format(SOURCE_NAME)
        .option("schema", schema)
        .option("commits", payload)
        .option("commitsPerBatch", str(commits_per_batch))
        .load()
    )


def run_stream(df: DataFrame, query_name: str, trigger: dict[str, Any] | None = None) -> DataFrame:
    """Drain a stream into a memory sink and return the sink's contents."""
    writer = df.writeStream.format("memory").queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    query = writer.start()
    try:
        if trigger and trigger.get("availableNow"):
            query.awaitTermination(300)
        else:
            query.processAllAvailable()
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]
    finally:
        query.stop()
    return df.sparkSession.table(query_name)


def drain(df: DataFrame, query_name: str) -> list[dict[str, Any]]:
    """Run a stream into a memory sink until it has taken everything; its progress reports."""
    query = df.writeStream.format("memory").queryName(query_name).start()
    try:
        query.processAllAvailable()
        return list(query.recentProgress)
    finally:
        query.stop()


def collect_rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=_sort_key)


def _sort_key(values: tuple[Any, ...]) -> str:
    return json.dumps([_json_value(v) for v in values], sort_keys=True, default=str)


def as_tuples(rows: Iterable[dict[str, Any]], schema: StructType) -> list[tuple[Any, ...]]:
    """Rows as ``collect()`` returns them, for comparing whole outputs."""
    return sorted((_collected(r, schema) for r in rows), key=_sort_key)


def expect(rows: Iterable[dict[str, Any]], schema: str = SCHEMA) -> list[tuple[Any, ...]]:
    """Expected rows, as ``collect_rows`` returns them."""
    return as_tuples(rows, StructType.fromDDL(schema))


def _collected(value: Any, data_type: Any) -> Any:
    """A test value (dict struct, pair-list map, aware datetime) as the client returns it."""
    if value is None:
        return None
    if isinstance(data_type, StructType):
        return tuple(_collected(value.get(f.name), f.dataType) for f in data_type)
    if isinstance(data_type, ArrayType):
        return [_collected(v, data_type.elementType) for v in value]
    if isinstance(data_type, MapType):
        return {k: _collected(v, data_type.valueType) for k, v in value.items()}
    if isinstance(data_type, TimestampType):
        return value.astimezone().replace(tzinfo=None)
    if isinstance(data_type, BinaryType):
        return bytearray(value)
    return value


def schema_without_metadata(schema: StructType) -> StructType:
    return StructType.fromJson(
        {
            **schema.jsonValue(),
            "fields": [{**f, "metadata": {}} for f in schema.jsonValue()["fields"]],
        }
    )


# ----------------------------------------------------------------------------------------
# The reference model: the documented semantics in plain Python.
# ----------------------------------------------------------------------------------------

METADATA = ("_change_type", "_commit_version", "_commit_timestamp")


def model_post_process(
    rows: Sequence[dict[str, Any]],
    row_id: Sequence[str] | None,
    *,
    row_version: str | None,
    carryover_removal: bool,
    update_detection: bool,
    key_of: Callable[[dict[str, Any], str], Any] = lambda r, c: r[c],
) -> list[dict[str, Any]]:
    """The row-level passes; ``row_id=None`` identifies a row by its whole content."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if row_id is None:
            key: tuple[Any, ...] = (json.dumps(_image(r), sort_keys=True, default=str),)
        else:
            key = tuple(key_of(r, c) for c in row_id)
        groups[(*key, r["_commit_version"])].append(r)
    out: list[dict[str, Any]] = []
    for members in groups.values():
        deletes = sum(r["_change_type"] == "delete" for r in members)
        inserts = sum(r["_change_type"] == "insert" for r in members)
        pair = deletes == 1 and inserts == 1
        if carryover_removal and pair:
            if row_version is not None:
                versions = [r[row_version] for r in members if r[row_version] is not None]
                same = len(versions) == 2 and versions[0] == versions[1]
            else:
                images = {json.dumps(_image(r), sort_keys=True, default=str) for r in members}
                same = len(images) == 1
            if same:
                continue
        for r in members:
            if update_detection and (deletes > 1 or inserts > 1):
                raise ValueError("UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION")
            if update_detection and pair and r["_change_type"] in ("delete", "insert"):
                label = "update_postimage" if r["_change_type"] == "insert" else "update_preimage"
                r = {**r, "_change_type": label}
            out.append(r)
    return out


def _image(r: dict[str, Any]) -> Any:
    return _json_value({k: v for k, v in r.items() if k not in METADATA})


PRE_EVENTS = ("delete", "update_preimage")
POST_EVENTS = ("insert", "update_postimage")


def model_net_changes(
    rows: Sequence[dict[str, Any]], row_id: Sequence[str], *, compute_updates: bool
) -> list[dict[str, Any]]:
    """Batch net changes: per row id, Spark's matrix over its first and last event."""
    by_id: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_id[tuple(r[c] for c in row_id)].append(r)
    out: list[dict[str, Any]] = []
    for events in by_id.values():
        events.sort(key=lambda r: (r["_commit_version"], r["_change_type"] in POST_EVENTS))
        out += model_net(events[0], events[-1], compute_updates)
    return out


def model_net(first: dict[str, Any], last: dict[str, Any], compute_updates: bool) -> list[dict]:
    before, after = first["_change_type"] in PRE_EVENTS, last["_change_type"] in POST_EVENTS
    pre, post = ("update_preimage", "update_postimage") if compute_updates else ("delete", "insert")
    if before and after:
        return [{**first, "_change_type": pre}, {**last, "_change_type": post}]
    if after:
        return [{**last, "_change_type": "insert"}]
    if before:
        return [{**first, "_change_type": "delete"}]
    return []


def model_streaming_net_changes(
    micro_batches: Sequence[Sequence[dict[str, Any]]],
    row_id: Sequence[str],
    *,
    compute_updates: bool,
) -> list[dict[str, Any]]:
    """Streaming net changes, micro-batch by micro-batch, as docs/post-processing.md documents them.

    A row id's window takes every event until a micro-batch whose watermark (the largest
    commit time of the micro-batches before it) has reached the id's last commit time and
    that brings no new event for it; then it is emitted and forgotten. After the input,
    Spark's no-data micro-batch releases what is left.
    """
    windows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    watermark: datetime | None = None
    for rows in [*micro_batches, []]:
        for r in sorted(
            rows, key=lambda r: (r["_commit_version"], r["_change_type"] in POST_EVENTS)
        ):
            windows.setdefault(tuple(r[c] for c in row_id), []).append(r)
        touched = {tuple(r[c] for c in row_id) for r in rows}
        for key in [k for k, events in windows.items() if k not in touched]:
            events = windows[key]
            if watermark is not None and events[-1]["_commit_timestamp"] <= watermark:
                out += model_net(events[0], events[-1], compute_updates)
                del windows[key]
        if rows:
            latest = max(r["_commit_timestamp"] for r in rows)
            watermark = latest if watermark is None else max(watermark, latest)
    return out
