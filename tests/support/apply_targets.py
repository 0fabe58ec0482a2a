"""What ``apply_changes`` wrote, read as delta-rs' query engine reads it (deletion vectors
and column mapping applied; its pyarrow dataset can abort the process at exit) with Arrow's
plain types (the engine answers strings as string views), and what it should have written:
the model (tests/support/apply_model.py) of a Delta table's whole change feed."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    DELETE,
    DELTA,
    ICEBERG,
    KEY_HASH,
    OP,
    TRUNCATE,
    UPSERT,
    ApplySpec,
    sequence_column,
)

from tests.support.apply_model import Change, scd1, scd2
from tests.support.delta_tables import merge_step


def _plain(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(data_type) or pa.types.is_large_string(data_type):
        return pa.string()
    if pa.types.is_binary_view(data_type) or pa.types.is_large_binary(data_type):
        return pa.binary()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(_plain(f.type)) for f in data_type])
    return data_type


def read_table(path: str, storage_options: dict[str, str] | None = None) -> pa.Table:
    table = DeltaTable(path, storage_options=storage_options)
    reader = QueryBuilder().register("t", table).execute("select * from t")
    table = pa.RecordBatchReader.from_stream(reader).read_all()
    return table.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema]))


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Whole rows in one order: by every column's text (NULLs first)."""
    return sorted(table.to_pylist(), key=lambda r: [(v is not None, str(v)) for v in r.values()])


def feed_changes(
    spark: Any, source: str, row_id: str = "id", format: str = "delta", **options: str
) -> list[Change]:
    """The source's whole change feed from version 0 (read with ``options``), read in batch
    with update detection, as the model's changes (sequenced by commit version; preimages
    are not changes)."""
    from spark_cdc import read

    reader = read(spark).format(format).options(**options).option("rowId", row_id)
    feed = reader.option("computeUpdates", True).load(source)
    changes = []
    for row in feed.collect():
        kind = row["_change_type"]
        if kind == "update_preimage":
            continue
        values = {k: v for k, v in row.asDict().items() if not k.startswith("_")}
        kind = "delete" if kind == "delete" else "upsert"
        changes.append(Change((row[row_id],), (row["_commit_version"],), kind, values))
    return changes


def follow_across_a_restart(spark: Any, source: str, target: str, **applying: Any) -> None:
    """A stream into ``target`` (``apply_changes`` with ``applying``) of the Delta table
    ``source``, made of ids 0-4, follows three steps (``merge_step``), stops, misses three
    more, and is started again until it has them all: each change once, across the
    restart."""
    from spark_cdc import apply_changes, readStream

    write_deltalake(source, pa.table({"id": list(range(5)), "v": [f"v{i}" for i in range(5)]}))

    def started() -> Any:
        reader = readStream(spark).option("rowId", "id").option("computeUpdates", True)
        feed = reader.option("startingVersion", 0).load(source)  # what the model reads
        return apply_changes(feed, target, keys=["id"], sequence_by="_commit_version", **applying)

    query = started()
    try:
        for step in range(1, 4):
            merge_step(source, step)
            query.processAllAvailable()
    finally:
        query.stop()
    for step in range(4, 7):  # committed while no stream runs
        merge_step(source, step)
    query = started()
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def model_rows(changes: list[Change], scd_type: int) -> list[dict[str, Any]]:
    """The target the model makes of a changelog's changes (every column tracked)."""
    if scd_type == 1:
        rows = list(scd1(changes, changelog_pairs=True).values())
    else:
        tracked = sorted({c for change in changes for c in change.values})
        rows = [
            {**v.values, "__START_AT": v.start[0], "__END_AT": None if v.end is None else v.end[0]}
            for versions in scd2(changes, tracked, changelog_pairs=True).values()
            for v in versions
        ]
    return sorted_rows(pa.Table.from_pylist(rows)) if rows else []


# The engine's own tests (no Spark): a target of columns id, a, b sequenced by seq.
KINDS = {"upsert": UPSERT, "delete": DELETE, "truncate": TRUNCATE}
VALUES = ("a", "b")


def prepared(changes: list[Change], hashed: bool = False) -> pa.Table:
    """Changes as the client's plan hands them to the server (``hashed``: with each key's
    hash, as the plan adds Spark's)."""
    table = pa.table(
        {
            "id": pa.array([c.key[0] for c in changes], pa.int64()),
            "a": pa.array([c.values.get("a") for c in changes], pa.int64()),
            "b": pa.array([c.values.get("b") for c in changes], pa.string()),
            sequence_column(0): pa.array([c.sequence[0] for c in changes], pa.int64()),
            OP: pa.array([KINDS[c.kind] for c in changes], pa.int8()),
        }
    )
    if not hashed:
        return table
    hashes = [key_hash(c.key[0]) for c in changes]
    return table.append_column(KEY_HASH, pa.array(hashes, pa.int32()))


def applied_in_tasks(
    spec: ApplySpec,
    changes: list[Change],
    version: int,
    tasks: int,
    hashed: bool = False,
    spilled: bool = False,
) -> None:
    """``changes`` applied as the server's tasks do it: split by key among ``tasks`` (by
    the key's hash, as Spark's ``repartition`` places it, when ``hashed``: the batch then
    carries it), each task's share resolved and its message made by the sink's own task
    code (with ``spilled``, its rows spilled to disk in parts by key, each resolved on its
    own), then the sink's commit of the messages."""
    import dataclasses

    from spark_cdc.server_plugin.sinks.apply import messages as task_messages
    from spark_cdc.server_plugin.sinks.apply import sink

    def task(change: Change) -> int:
        return (key_hash(change.key[0]) if hashed else hash(change.key)) % tasks

    planned = dataclasses.replace(spec, partitioned_by_key=True)
    held = 0 if spilled else 1 << 30
    messages = [
        task_messages.task_message(planned, iter(prepared(share, hashed).to_batches(2)), held)
        for share in ([c for c in changes if task(c) == t] for t in range(tasks))
    ]
    sink._applied(planned, messages, version, None)


def key_hash(key: int | None) -> int:
    """A key's hash as a signed 32-bit integer, negative for some keys, as Spark's
    ``hash()`` is (a NULL key hashes to Spark's seed, 42)."""
    if key is None:
        return 42
    scrambled = (key * 0x9E3779B1 + 0x7F4A7C15) & 0xFFFFFFFF
    return scrambled - (1 << 32) if scrambled >= 1 << 31 else scrambled


def iceberg_catalog(folder: str) -> dict[str, str]:
    """A SQL catalog on SQLite in ``folder``, its warehouse beside it."""
    return {"type": "sql", "uri": f"sqlite:///{folder}/catalog.db", "warehouse": f"file://{folder}"}


def read_iceberg(catalog: dict[str, str], name: str) -> pa.Table:
    """The Iceberg table ``name`` of the catalog of properties ``catalog``, as pyiceberg
    reads it, with Arrow's plain types and nullable columns."""
    from spark_cdc.server_plugin.iceberg.table import catalog_from

    table = catalog_from(dict(catalog)).load_table(name).scan().to_arrow()
    return table.cast(pa.schema([pa.field(f.name, _plain(f.type)) for f in table.schema]))


def spec_for(folder: str, scd_type: int, iceberg: bool = False, **rules: Any) -> ApplySpec:
    """A spec of the engine's own tests' target: a Delta table in ``folder``, or with
    ``iceberg`` the table ``db.target`` of a SQL catalog there."""
    if iceberg:
        target, state = "db.target", "db.target__apply_changes_state"
        rules["target_format"] = ICEBERG
        rules["catalog"] = tuple(sorted(iceberg_catalog(folder).items()))
    else:
        target, state = f"{folder}/target", f"{folder}/target__apply_changes_state"
    return ApplySpec(
        target=target,
        state=state,
        keys=("id",),
        columns=("id", *VALUES),
        sequence_names=("seq",),
        scd_type=scd_type,
        tracked=rules.pop("tracked", VALUES),
        ignore_null_updates=rules.pop("ignore_null_updates", False),
        changelog_pairs=rules.pop("changelog_pairs", False),
        schema_evolution=False,
        app_id=rules.pop("app_id", "test-writer"),
        compact_after_files=rules.pop("compact_after_files", 64),
        table_properties=tuple(sorted(rules.pop("table_properties", {}).items())),
        partition_cols=rules.pop("partition_cols", ()),
        key_buckets=rules.pop("key_buckets", 0),
        target_format=rules.pop("target_format", DELTA),
        catalog=rules.pop("catalog", ()),
        full_refresh=rules.pop("full_refresh", False),
    )
