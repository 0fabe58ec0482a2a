"""The target and the state table as delta-rs writes them: created when missing, checked
before anything is written, and changed one commit per batch, each carrying the writer's
idempotency marker (Delta's ``txn`` action), so a batch applied again is found and skipped.

delta-rs refuses a table feature it cannot write only when it commits, after writing data
files, and takes a time zone other than ``UTC`` for no timestamp: both are settled here
first, so a refusal comes before any write and names the table.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.local_paths import local_root
from spark_cdc.server_plugin.sinks.apply.engine.columns import (
    SMALL_FILE_BYTES,
    aligned,
    by_key,
    check_columns,
)
from spark_cdc.server_plugin.sinks.apply.engine.runs import ALIVE
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    BUCKET,
    KEY_HASH,
    ApplySpec,
)

# Writer features delta-rs 1.x writes correctly; any other one (row tracking, in-commit
# timestamps, domain metadata, clustering, identity columns, type widening...) it refuses.
WRITABLE_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "variantType",
        "variantType-preview",
    }
)
# The commit info entry where a batch's target commit says what it did (its writer, its
# counts): what a batch ``apply_changes`` call reads back.
OUTCOME_KEY = "spark_cdc.outcome"
_MARK = "__spark_cdc_key_"  # the merge source's copy of a key, on rows that delete
_DROP = "__spark_cdc_drop"


def storage(spec: ApplySpec) -> dict[str, str] | None:
    return dict(spec.storage_options) or None


@contextmanager
def refusing_races(path: str) -> Iterator[None]:
    """A commit that lost a race with another writer, refused: nothing of it was written."""
    from deltalake.exceptions import CommitFailedError

    try:
        yield
    except CommitFailedError as lost:
        raise error("APPLY_CHANGES.CONCURRENT_WRITE", path=path, problem=str(lost)) from lost


@contextmanager
def refusing_properties(path: str) -> Iterator[None]:
    """A new table whose ``table_properties`` delta-rs refuses, refused by name, with no
    folder left where there was none (removed only when empty: another writer may have
    made the table there meanwhile)."""
    from deltalake.exceptions import DeltaError

    folder = local_root(path)
    existed = folder is None or os.path.exists(folder)
    try:
        yield
    except DeltaError as refused:
        found = re.search(r"Error parsing property '([^']*)'", str(refused))
        if found is None:
            raise
        if folder is not None and not existed:
            with suppress(OSError):
                os.rmdir(folder)
        raise error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="table_properties",
            problem=f"hold '{found.group(1)}', a property delta-rs cannot give a table it makes",
            fix="leave it out; Delta's own properties (delta.checkpointInterval, "
            "delta.logRetentionDuration, ...) are taken",
        ) from refused


def existing(path: str, schema: pa.Schema, spec: ApplySpec, role: str) -> Any | None:
    """The table at ``path``, checked against ``schema``; None when there is none yet: it
    is made by the batch's first write (``created``), so a refused batch leaves no folder."""
    from deltalake import DeltaTable

    options = storage(spec)
    if not DeltaTable.is_deltatable(path, storage_options=options):
        return None
    table = DeltaTable(path, storage_options=options)
    _check_protocol(table, path)
    _check_schema(table, path, schema, spec, role)
    if role == "target":
        _check_partitioning(table, path, spec)
    return table


def opened(path: str, spec: ApplySpec) -> Any:
    """The table at ``path`` as it is now."""
    from deltalake import DeltaTable

    return DeltaTable(path, storage_options=storage(spec))


def created(
    path: str,
    schema: pa.Schema,
    spec: ApplySpec,
    version: int,
    rows: pa.Table,
    outcome: str | None = None,
    configuration: dict[str, str] | None = None,
    partition_by: list[str] | None = None,
) -> Any:
    """A new table at ``path`` holding ``rows``, made by one commit that carries the
    batch's marker. Another writer that made it first is a lost race."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import DeltaError

    options = storage(spec)
    try:
        with refusing_properties(path):
            write_deltalake(
                path,
                aligned(by_key(rows, spec.keys), schema),
                mode="error",
                partition_by=partition_by or None,
                storage_options=options,
                configuration=configuration or None,
                commit_properties=commit_properties(spec, version, outcome),
            )
    except DeltaError as lost:
        if not DeltaTable.is_deltatable(path, storage_options=options):
            raise
        problem = "it made the table first"
        raise error("APPLY_CHANGES.CONCURRENT_WRITE", path=path, problem=problem) from lost
    return DeltaTable(path, storage_options=options)


def _check_partitioning(table: Any, path: str, spec: ApplySpec) -> None:
    """``partition_cols`` shape the target the first batch makes; given for an existing
    target, they must be its own (else the user expects a layout the table does not have)."""
    have = tuple(table.metadata().partition_columns)
    if spec.partition_cols and spec.partition_cols != have:
        raise error(
            "APPLY_CHANGES.INVALID_PARAMETER",
            parameter="partition_cols",
            problem=f"are {list(spec.partition_cols)}, but '{path}' is partitioned by {list(have)}",
            fix="leave partition_cols out (they apply when apply_changes makes the target), "
            f"or pass {list(have)}",
        )


def _check_protocol(table: Any, path: str) -> None:
    protocol = table.protocol()
    features = set(protocol.writer_features or ())
    refused = sorted(features - WRITABLE_FEATURES)
    if protocol.min_writer_version == 6 and not protocol.writer_features:
        refused.append("identityColumns")
    if protocol.min_writer_version > 7:
        refused.append(f"writer version {protocol.min_writer_version}")
    if refused:
        raise error(
            "APPLY_CHANGES.UNSUPPORTED_TARGET_FEATURE", path=path, features=", ".join(refused)
        )
    if table.metadata().configuration.get("delta.appendOnly", "false").lower() == "true":
        raise error("APPLY_CHANGES.APPEND_ONLY_TARGET", path=path)


def _check_schema(table: Any, path: str, schema: pa.Schema, spec: ApplySpec, role: str) -> None:
    """The table holds exactly ``schema``'s columns, of the same Delta types."""
    from deltalake import Schema

    have = {f.name: f.type for f in table.schema().fields}
    want = {f.name: f.type for f in Schema.from_arrow(schema).fields}
    if role == "state":  # how the state is laid out is its own (``buckets``)
        have = {n: t for n, t in have.items() if n not in (KEY_HASH, BUCKET)}
        want = {n: t for n, t in want.items() if n not in (KEY_HASH, BUCKET)}
    check_columns(path, have, want, spec, role)


def commit_properties(spec: ApplySpec, version: int | None, outcome: str | None = None) -> Any:
    from deltalake import CommitProperties, Transaction

    if version is None:
        return None
    return CommitProperties(
        app_transactions=[Transaction(spec.app_id, version)],
        custom_metadata={OUTCOME_KEY: outcome} if outcome else None,
    )


def add_actions(table: Any, flatten: bool = True) -> pa.Table:
    """The snapshot's files (``path``, ``size_bytes``, and when ``flatten`` their
    statistics as ``min.<column>``, ...), as ``file_lookup`` searches them."""
    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=flatten)).read_all()


def partition_columns(table: Any) -> frozenset[str]:
    return frozenset(table.metadata().partition_columns)


def applied(table: Any, spec: ApplySpec, version: int) -> bool:
    """Whether this writer already committed ``version`` (its batch) to the table."""
    done = table.transaction_version(spec.app_id)
    return done is not None and done >= version


def outcomes(table: Any, spec: ApplySpec, limit: int | None = None) -> Iterator[str]:
    """The outcomes (``OUTCOME_KEY``) the table's commits recorded, the newest first, of
    its ``limit`` newest commits (all: None) whose file is still in its log; one commit
    file read at a time, so a caller that stops early reads few."""
    from spark_cdc.server_plugin.delta.log import DeltaLog, commit_file

    log = DeltaLog(table.table_uri, storage(spec))
    newest = table.version()
    oldest = -1 if limit is None else max(-1, newest - limit)
    for version in range(newest, oldest, -1):
        try:
            with log.fs.open_input_stream(log.location(commit_file(version))) as stream:
                lines = stream.read().decode("utf-8").splitlines()
        except FileNotFoundError:
            return  # older commits were cleaned up with the log
        for line in lines:
            if line.startswith('{"commitInfo"'):
                outcome = json.loads(line)["commitInfo"].get(OUTCOME_KEY)
                if outcome:
                    yield outcome
                break


def small_file_count(table: Any) -> int:
    """The table's files smaller than ``SMALL_FILE_BYTES``: what batches appended since
    the last compaction (a compaction's files are larger, and a large table's many large
    files are no reason to compact it again)."""
    actions = add_actions(table, flatten=False)
    return int(pc.sum(pc.less(actions.column("size_bytes"), SMALL_FILE_BYTES)).as_py() or 0)


def upsert_rows(
    table: Any, spec: ApplySpec, version: int, rows: pa.Table, outcome: str | None = None
) -> None:
    """One commit: each key of ``rows`` updated or inserted when ``ALIVE``, else deleted."""
    names = [n for n in rows.column_names if n != ALIVE]
    values = [n for n in names if n not in spec.keys]

    def clauses(merger: Any) -> Any:
        merger = merger.when_matched_delete(predicate=f"NOT s.`{ALIVE}`")
        if values:
            merger = merger.when_matched_update({f"`{c}`": f"s.`{c}`" for c in values})
        return merger.when_not_matched_insert(
            {f"`{c}`": f"s.`{c}`" for c in names}, predicate=f"s.`{ALIVE}`"
        )

    source = aligned(rows, table_schema(table)) if rows.num_rows else None
    match = " AND ".join(f"t.`{k}` = s.`{k}`" for k in spec.keys)
    _merge(table, spec, version, source, match, clauses, rows.select(names).slice(0, 0), outcome)


def replace_rows(
    table: Any,
    spec: ApplySpec,
    version: int,
    replaced: pa.Table,
    rows: pa.Table,
    kept: pa.Table | None = None,
    outcome: str | None = None,
) -> None:
    """One commit: every row matching one of ``replaced`` in all its columns (the keys;
    type 2's keys and ``__START_AT``) deleted, ``rows`` inserted and, when ``kept`` is given
    (a truncate), every row of a key not in ``kept`` deleted too."""
    by = tuple(replaced.column_names)
    source = _replacing_source(table_schema(table), by, replaced, rows, kept)

    def clauses(merger: Any) -> Any:
        merger = merger.when_matched_delete(predicate=f"s.`{_DROP}`")
        merger = merger.when_not_matched_insert(
            {f"`{c}`": f"s.`{c}`" for c in rows.column_names},
            predicate=f"s.`{_MARK}0` IS NULL",
        )
        return merger.when_not_matched_by_source_delete() if kept is not None else merger

    match = " AND ".join(f"t.`{k}` = s.`{_MARK}{i}`" for i, k in enumerate(by))
    merged = source if source.num_rows or kept is not None else None
    _merge(table, spec, version, merged, match, clauses, rows.slice(0, 0), outcome)


def _merge(
    table: Any,
    spec: ApplySpec,
    version: int,
    source: pa.Table | None,
    match: str,
    clauses: Callable[[Any], Any],
    empty: pa.Table,
    outcome: str | None,
) -> None:
    """One commit carrying the batch's marker (and its ``outcome``): ``source`` (when
    given) merged into the table with ``clauses``; a merge that changes nothing commits
    nothing, so then the marker goes in an append of no rows (``empty``)."""
    if source is not None:
        with refusing_races(table.table_uri):
            merger = table.merge(
                source,
                match,
                source_alias="s",
                target_alias="t",
                streamed_exec=False,  # prunes the target's files by the source's keys
                merge_schema=spec.schema_evolution,
                commit_properties=commit_properties(spec, version, outcome),
            )
            clauses(merger).execute()
    if not applied(table, spec, version):
        append_rows(table, spec, version, empty, outcome)


def table_schema(table: Any) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


def _replacing_source(
    schema: pa.Schema,
    keys: tuple[str, ...],
    replaced: pa.Table,
    rows: pa.Table,
    kept: pa.Table | None,
) -> pa.Table:
    """The merge's source: a row per key to delete (its key copied to ``_MARK`` columns,
    ``_DROP`` true), a row per key to keep (``_DROP`` false), and the rows to insert
    (no ``_MARK``: they match nothing)."""
    names = rows.column_names
    types = {n: rows.schema.field(n).type for n in names}
    types.update({f.name: f.type for f in schema if f.name in names})

    def markers(of: pa.Table, drop: bool) -> pa.Table:
        columns = {n: pa.nulls(of.num_rows, types[n]) for n in names}
        for i, key in enumerate(keys):
            columns[f"{_MARK}{i}"] = of.column(key).cast(types[key])
        columns[_DROP] = pa.repeat(pa.scalar(drop), of.num_rows)
        return pa.table(columns)

    inserted = {n: rows.column(n).cast(types[n]) for n in names}
    for i, key in enumerate(keys):
        inserted[f"{_MARK}{i}"] = pa.nulls(rows.num_rows, types[key])
    inserted[_DROP] = pa.nulls(rows.num_rows, pa.bool_())
    parts = [markers(replaced, True), pa.table(inserted)]
    if kept is not None:
        parts.append(markers(kept, False))
    return pa.concat_tables(parts)


def append_rows(
    table: Any, spec: ApplySpec, version: int, rows: pa.Table, outcome: str | None = None
) -> None:
    """One commit (even of no rows: it carries the marker)."""
    _write_rows(table, spec, version, rows, outcome, "append")


def overwrite_rows(
    table: Any, spec: ApplySpec, version: int | None, rows: pa.Table, outcome: str | None = None
) -> None:
    _write_rows(table, spec, version, rows, outcome, "overwrite")


def _write_rows(
    table: Any, spec: ApplySpec, version: int | None, rows: pa.Table, outcome: str | None, mode: str
) -> None:
    from deltalake import write_deltalake

    with refusing_races(table.table_uri):
        write_deltalake(  # type: ignore[call-overload]  # mode: one of two literals
            table,
            aligned(rows, table_schema(table)),
            mode=mode,
            schema_mode="merge" if spec.schema_evolution else None,
            commit_properties=commit_properties(spec, version, outcome),
        )
