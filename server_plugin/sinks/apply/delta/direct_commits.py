"""Target writes committed here, not by delta-rs' MERGE: the rows a batch replaces are
taken out of the files that hold them and its new rows are appended, in one commit. A
MERGE joins the batch with every file one of its keys may be in; here each file's key
index (``file_lookup``, kept per process) says which rows go, so a batch costs what its
keys and the files they fall in cost, without a join.

How a row is taken out depends on the target: with deletion vectors on
(``delta.enableDeletionVectors``, opt-in), it is marked deleted and no data file is
rewritten; otherwise each file that holds one is rewritten without it (copy-on-write, as
any Delta writer without deletion vectors does), so the table keeps a protocol every
reader opens (deltalake's ``to_pandas`` refuses the ``deletionVectors`` reader feature).

The new rows' files are staged into the target (``staging``: by the tasks that resolved
them, or here); deletion vectors, rewritten files and the commit are written here
(``delta.committer``). A target takes this path when nothing in it asks what it cannot do
(``refusal`` names it); the others take the MERGE."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.delta import committer, data_files
from spark_cdc.server_plugin.delta.current_adds import current_adds
from spark_cdc.server_plugin.delta.deletion_vectors import (
    DeletionVector,
    bitmap_array,
    deletion_vector_file,
    row_positions,
    serialized_bitmap,
)
from spark_cdc.server_plugin.delta.log import DeltaLog
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.local_paths import local_root
from spark_cdc.server_plugin.sinks.apply.delta import staging, tables
from spark_cdc.server_plugin.sinks.apply.delta.tables import OUTCOME_KEY
from spark_cdc.server_plugin.sinks.apply.engine.columns import by_key
from spark_cdc.server_plugin.sinks.apply.engine.file_lookup import (
    row_group_as_coded,
    row_group_rows,
    row_groups,
    rows_of_keys,
)
from spark_cdc.server_plugin.sinks.apply.engine.key_index import (
    FILE_KEYS_BYTES,
    BatchKeys,
    FileKeysCache,
)
from spark_cdc.server_plugin.sinks.apply.engine.spec import DELETION_VECTORS_PROPERTY, ApplySpec

# Writer features this path keeps: none of them asks anything of a data file or commit
# that it does not do (constraints and generated columns are refused by ``refusal``).
_KEPT_FEATURES = frozenset(
    {
        "deletionVectors",
        "appendOnly",
        "invariants",
        "checkConstraints",
        "timestampNtz",
        "v2Checkpoint",
    }
)
_ATTEMPTS = 3  # commits lost to other writers before the batch is refused
# The target files' key indexes a process keeps between batches: a stream's later batches
# find their keys without reading them.
_FILE_KEYS = FileKeysCache(FILE_KEYS_BYTES)


def refusal(table: Any) -> str | None:
    """Why the target takes the MERGE path (None: it takes this one)."""
    if not committer.can_commit(table.table_uri):
        return "it is on an object store"
    features = set(table.protocol().writer_features or ())
    configuration = table.metadata().configuration
    if configuration.get("delta.enableChangeDataFeed", "false").lower() == "true":
        return "it keeps a change data feed"
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return "it maps column names"
    if features - _KEPT_FEATURES:
        return f"it uses {', '.join(sorted(features - _KEPT_FEATURES))}"
    if any(k.startswith("delta.constraints.") for k in configuration):
        return "it has CHECK constraints"
    schema = table.schema().to_json()
    if "delta.invariants" in schema or "delta.generationExpression" in schema:
        return "it has invariants or generated columns"
    return None


def marks_rows(table: Any) -> bool:
    """Whether the target takes replaced rows out by deletion vectors (else by rewriting
    the files that hold them): it has the feature and its property is on."""
    protocol = table.protocol()
    declared = {*(protocol.writer_features or ()), *(protocol.reader_features or ())}
    enabled = table.metadata().configuration.get(DELETION_VECTORS_PROPERTY, "false")
    return "deletionVectors" in declared and enabled.lower() == "true"


def replace_rows(
    table: Any,
    spec: ApplySpec,
    version: int,
    replaced: pa.Table,
    rows: pa.Table,
    outcome: str | None,
    staged: tuple[dict[str, Any], ...] = (),
) -> None:
    """One commit carrying the batch's marker: every row of the target matching one of
    ``replaced`` in all its columns (the keys; type 2's keys and ``__START_AT``) taken out
    (``marks_rows``: marked deleted, else its file rewritten without it), ``rows`` and the
    files the tasks ``staged`` appended. A commit lost to another writer is made again on
    the new snapshot (the rows to write do not depend on it)."""
    log = DeltaLog(table.table_uri, dict(spec.storage_options) or None)
    root = local_root(table.table_uri)
    assert root is not None
    staged = (*staged, *staged_rows(table, rows, spec.keys))
    wanted = BatchKeys.of(replaced, replaced.column_names, len(spec.keys))
    for _ in range(_ATTEMPTS):
        read_version = table.version()
        files, partitions = tables.add_actions(table), tables.partition_columns(table)
        names = replaced.column_names
        marks = rows_of_keys(log, files, replaced, names, _FILE_KEYS, partitions, wanted=wanted)
        pending = committer.PendingCommit("MERGE", read_version)
        if marks_rows(table):
            written = _mark(log, root, read_version, marks, pending)
            rewritten: tuple[dict[str, Any], ...] = ()
        else:
            written = None
            rewritten = _rewrite(table, log, read_version, marks, pending, wanted)
        pending.actions.extend({"add": add} for add in staged)
        _of_batch(pending, spec, version, outcome)
        committed = committer.try_commit(table.table_uri, pending)
        if committed is not None:
            _checkpoint_when_due(table, committed)
            return
        if written:
            os.unlink(written)
        staging.discard(table.table_uri, rewritten)
        table.update_incremental()
    raise error(
        "APPLY_CHANGES.CONCURRENT_WRITE",
        path=table.table_uri,
        problem=f"other writers committed first {_ATTEMPTS} times in a row",
    )


def _of_batch(
    pending: committer.PendingCommit, spec: ApplySpec, version: int, outcome: str | None
) -> None:
    """The commit marked as this writer's batch ``version``, with what it did."""
    pending.transaction(spec.app_id, version)
    if outcome:
        pending.info[OUTCOME_KEY] = outcome


def staged_rows(table: Any, rows: pa.Table, keys: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """``rows`` staged into the target as its appends are written (its partition columns,
    the statistics its properties ask for; ``keys``, its key columns): the add actions of
    their files."""
    if not rows.num_rows:
        return ()
    partition_by = list(table.metadata().partition_columns)
    properties = stats_properties(table.metadata().configuration)
    return staging.staged_files(table.table_uri, rows, partition_by, properties, keys)


def stats_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The table properties that decide which statistics a new file gets."""
    kept = ("delta.dataSkippingNumIndexCols", "delta.dataSkippingStatsColumns")
    return {k: v for k, v in properties.items() if k in kept}


def _mark(
    log: DeltaLog,
    root: str,
    version: int,
    marks: dict[str, np.ndarray],
    pending: committer.PendingCommit,
) -> str | None:
    """Each marked file removed, and re-added with its rows marked (old and new) unless
    none is left; the bitmaps in one new deletion vector file, whose path is returned."""
    if not marks:
        return None
    adds = current_adds(log, version, set(marks))
    now = int(time.time() * 1000)
    kept: dict[str, np.ndarray] = {}
    for path, found in marks.items():
        add = adds[path]
        hits = _taken_out(log, add, found)
        pending.actions.append({"remove": _removed(add, now)})
        if len(hits) != _records(add):
            kept[path] = np.asarray(hits, np.uint64)
    if not kept:
        return None
    bitmaps = [bitmap_array(positions) for positions in kept.values()]
    code, data, offsets = deletion_vector_file(bitmaps)
    name = DeletionVector("u", code, 1, 0, 0).file_path()
    assert name is not None
    committer.write_file(log.uri, name, data)
    for path, positions, bitmap, offset in zip(kept, kept.values(), bitmaps, offsets, strict=True):
        descriptor = {
            "storageType": "u",
            "pathOrInlineDv": code,
            "offset": offset,
            "sizeInBytes": len(bitmap),
            "cardinality": len(positions),
        }
        add = {**adds[path], "dataChange": True, "deletionVector": descriptor}
        pending.actions.append({"add": {**add, "stats": _loose(add)}})
    return os.path.join(root, name)


def _rewrite(
    table: Any,
    log: DeltaLog,
    version: int,
    marks: dict[str, np.ndarray],
    pending: committer.PendingCommit,
    wanted: BatchKeys,
) -> tuple[dict[str, Any], ...]:
    """Each marked file removed and its other rows (a file's own deletion vector, from
    another writer, applied too) written to new files in its partition, one a row group,
    the row groups read, filtered and written in parallel: the new files' add actions.
    Each new file's key index, made of the rows at hand, is kept (``_FILE_KEYS``), so the
    next batch finds its keys without reading the file again."""
    if not marks:
        return ()
    adds = current_adds(log, version, set(marks))
    now = int(time.time() * 1000)
    partitions = list(table.metadata().partition_columns)
    schema = pa.schema([f for f in tables.table_schema(table) if f.name not in partitions])
    properties = stats_properties(table.metadata().configuration)
    ours = data_files.writes(schema, properties)  # else delta-rs writes them
    values = {} if ours else _partition_values(table, partitions, set(marks))
    root = local_root(table.table_uri)
    assert root is not None
    taken = {path: _taken_out(log, adds[path], hits) for path, hits in marks.items()}
    pieces = []
    for path in marks:
        bounds = np.cumsum([0, *row_groups(log, path)])
        pieces += [(path, g, int(bounds[g]), int(bounds[g + 1])) for g in range(len(bounds) - 1)]

    def rewritten(piece: tuple[str, int, int, int]) -> tuple[dict[str, Any], ...]:
        path, group, start, stop = piece
        hits = taken[path]
        local = hits[np.searchsorted(hits, start) : np.searchsorted(hits, stop)] - start
        if len(local) == stop - start:
            return ()
        if ours:
            rows, coded = row_group_as_coded(log, path, group, schema)
        else:
            rows = row_group_rows(log, path, group, schema)
        if len(local):
            keep = np.ones(rows.num_rows, bool)
            keep[local] = False
            rows = rows.filter(keep)
        if ours:  # beside the file it replaces, in its partition's folder
            add = adds[path]
            folder = add["path"].rpartition("/")[0]
            partition = add.get("partitionValues") or {}
            files: tuple[dict[str, Any], ...] = (
                data_files.write(root, folder, rows, partition, coded),
            )
        else:
            for name, value in values.get(path, {}).items():  # into its partition's folder
                rows = rows.append_column(name, pa.repeat(value, rows.num_rows))
            files = staging.staged_files(table.table_uri, rows, partitions, properties)
        if len(files) == 1:
            _FILE_KEYS.keys(_identity(log, files[0]), lambda: rows, wanted)
        return files

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        new = [a for found in pool.map(rewritten, pieces) for a in found]
    pending.actions.extend({"remove": _removed(adds[path], now)} for path in marks)
    pending.actions.extend({"add": add} for add in new)
    return tuple(new)


def _identity(log: DeltaLog, add: dict[str, Any]) -> tuple[str, int, int]:
    """A new file as the key caches know it (``file_lookup.file_identities``)."""
    return (log.location(unquote(add["path"])), int(add["size"]), int(add["modificationTime"]))


def _partition_values(
    table: Any, partitions: list[str], paths: set[str]
) -> dict[str, dict[str, pa.Scalar]]:
    """Each of ``paths``' partition values, typed as the table's columns (readers such as
    polars also take a file's partition from its folder, so a rewritten file goes there)."""
    if not partitions:
        return {}
    files = tables.add_actions(table)
    found: dict[str, dict[str, pa.Scalar]] = {}
    for row, path in enumerate(files.column("path").to_pylist()):
        if path in paths:
            found[path] = {n: files.column(f"partition.{n}")[row] for n in partitions}
    return found


def _taken_out(log: DeltaLog, add: dict[str, Any], hits: np.ndarray) -> np.ndarray:
    """The file's rows to take out: ``hits`` and those its deletion vector marks."""
    old = DeletionVector.from_json(add.get("deletionVector"))
    if old is None:
        return hits
    read = serialized_bitmap(old, lambda p, at, size: _read_range(log, p, at, size))
    return np.union1d(row_positions(read, old.cardinality), hits)


def _removed(add: dict[str, Any], now: int) -> dict[str, Any]:
    """The remove action of ``add``'s file as it is (its deletion vector named: a remove
    that names another one would leave the file's current add in place)."""
    remove = {
        "path": add["path"],
        "deletionTimestamp": now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues", {}),
        "size": add.get("size"),
    }
    if add.get("deletionVector"):
        remove["deletionVector"] = add["deletionVector"]
    return remove


def _records(add: dict[str, Any]) -> int | None:
    """The file's row count from its statistics (None: it has none)."""
    stats = add.get("stats")
    return json.loads(stats).get("numRecords") if stats else None


def _loose(add: dict[str, Any]) -> str | None:
    """The file's statistics, said to bound its rows no longer tightly (some are deleted)."""
    stats = add.get("stats")
    if not stats:
        return stats
    parsed = json.loads(stats)
    parsed["tightBounds"] = False
    return json.dumps(parsed, separators=(",", ":"))


def _read_range(log: DeltaLog, path: str, offset: int, size: int) -> bytes:
    with log.open(path) as source:
        source.seek(offset)
        return bytes(source.read(size))


def _checkpoint_when_due(table: Any, version: int) -> None:
    """A checkpoint every ``delta.checkpointInterval`` commits (100 by default), as
    delta-rs makes after its own commits: readers then replay a short log."""
    interval = int(table.metadata().configuration.get("delta.checkpointInterval") or 100)
    if version % interval == 0:
        table.update_incremental()
        table.create_checkpoint()


# The writer features a legacy protocol's writer version implies (Delta's table features).
_LEGACY_WRITER = {
    2: {"appendOnly", "invariants"},
    3: {"appendOnly", "invariants", "checkConstraints"},
    4: {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"},
    5: {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
    | {"columnMapping"},
    6: {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
    | {"columnMapping", "identityColumns"},
}


def create(
    path: str,
    spec: ApplySpec,
    rows: pa.Table,
    version: int,
    outcome: str | None,
    configuration: dict[str, str],
    partition_by: list[str],
    staged: tuple[dict[str, Any], ...] = (),
    deletion_vectors: bool = False,
) -> None:
    """A new table at ``path`` (local) holding ``rows`` and the files the tasks ``staged``
    into it (with ``deletion_vectors`` on), made by one commit carrying the batch's marker:
    delta-rs' protocol and metadata for the rows' schema and ``configuration``, the files'
    add actions. Another writer that made it first is a lost race (nothing of this one is
    then in its log)."""
    with tables.refusing_properties(path):
        os.makedirs(path, exist_ok=True)
        actions = staging.stage(path, by_key(rows, spec.keys), partition_by, configuration)
    pending = committer.PendingCommit("CREATE TABLE AS SELECT", -1)
    for action in actions:
        if "protocol" in action and deletion_vectors:
            pending.actions.append({"protocol": _with_deletion_vectors(action["protocol"])})
        elif "metaData" in action and deletion_vectors:
            metadata = action["metaData"]
            settings = {**metadata.get("configuration", {}), DELETION_VECTORS_PROPERTY: "true"}
            pending.actions.append({"metaData": {**metadata, "configuration": settings}})
        elif any(kind in action for kind in ("protocol", "metaData", "add")):
            pending.actions.append(action)
    pending.actions.extend({"add": add} for add in staged)
    _of_batch(pending, spec, version, outcome)
    if committer.try_commit(path, pending) is None:
        problem = "it made the table first"
        raise error("APPLY_CHANGES.CONCURRENT_WRITE", path=path, problem=problem)


def replace_all(
    table: Any,
    spec: ApplySpec,
    version: int | None,
    outcome: str | None,
    staged: tuple[dict[str, Any], ...],
) -> None:
    """One commit carrying the batch's marker: every file of ``table`` (local) removed
    (with its deletion vector) and the files the tasks ``staged`` added, a full refresh's
    first batch. Another writer's commit since the table was read is a lost race: the
    refresh is refused, not made again over it."""
    log = DeltaLog(table.table_uri, dict(spec.storage_options) or None)
    read_version = table.version()
    paths = tables.add_actions(table, flatten=False).column("path").to_pylist()
    held = current_adds(log, read_version, {unquote(p) for p in paths})
    now = int(time.time() * 1000)
    pending = committer.PendingCommit("WRITE", read_version)
    pending.actions.extend({"remove": _removed(add, now)} for add in held.values())
    pending.actions.extend({"add": add} for add in staged)
    if version is not None:
        _of_batch(pending, spec, version, outcome)
    committed = committer.try_commit(table.table_uri, pending)
    if committed is None:
        problem = "another writer committed while the refresh was written"
        raise error("APPLY_CHANGES.CONCURRENT_WRITE", path=table.table_uri, problem=problem)
    _checkpoint_when_due(table, committed)


def _with_deletion_vectors(protocol: dict[str, Any]) -> dict[str, Any]:
    """``protocol`` (a protocol action) with the ``deletionVectors`` feature: table
    features (reader 3, writer 7), listing what its legacy versions implied."""
    writer = set(protocol.get("writerFeatures") or ()) | {"deletionVectors"}
    writer |= _LEGACY_WRITER.get(int(protocol["minWriterVersion"]), set())
    reader = set(protocol.get("readerFeatures") or ()) | {"deletionVectors"}
    if int(protocol["minReaderVersion"]) == 2:
        reader.add("columnMapping")
    return {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": sorted(reader),
        "writerFeatures": sorted(writer),
    }
