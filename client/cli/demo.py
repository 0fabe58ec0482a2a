"""The main job: a Delta table being written (appends, updates, deletes, merges) and its
change feed streamed live, carry-overs removed and updates detected, commit by commit; then
the whole feed applied to a history table (SCD type 2) and a few orders' histories shown;
last, the table's content applied as snapshots to another history, as for a table without a
changelog.

    spark-cdc demo [--remote sc://host:port] [--seconds 20]

Without ``--remote`` a local Spark Connect server (127.0.0.1) is started and stopped after.
The table is written here, with delta-rs, so the server must see the same filesystem.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from spark_cdc.cli.commands import follow
from spark_cdc.cli.lifecycle import scratch

STATUSES = ("new", "paid", "shipped", "refunded")


def orders(ids: range | list[int], status: str = "new") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "status": pa.array([status] * len(ids), pa.string()),
            "amount": pa.array([10.0 * i for i in ids], pa.float64()),
        }
    )


def write_orders(
    table: str,
    seconds: float,
    pause: float = 1.0,
    stop: threading.Event | None = None,
    listening: threading.Event | None = None,
) -> None:
    """One commit per step, cycling through what an order system does to its table.

    Version 0 creates the table empty; with ``listening``, the first rows wait until it is
    set (the feed's first micro-batch has run). A stream's first micro-batch starts the
    server's Python workers, several seconds that would otherwise hold the first commits
    back and print them in one burst."""
    from deltalake import DeltaTable, write_deltalake

    stop = stop or threading.Event()
    write_deltalake(table, orders([]))
    if listening is not None:
        while not (listening.wait(0.1) or stop.is_set()):
            pass
    write_deltalake(table, orders(range(1, 6)), mode="append")
    deadline, step, next_id = time.monotonic() + seconds, 0, 6
    while time.monotonic() < deadline and not stop.wait(pause):
        kind = step % 5
        if kind == 0:
            write_deltalake(table, orders(range(next_id, next_id + 2)), mode="append")
            next_id += 2
        elif kind == 1:  # copy-on-write: the rewritten file's other rows are carry-overs
            status = STATUSES[1 + step % 3]
            DeltaTable(table).update(
                {"status": f"'{status}'"}, predicate=f"order_id = {next_id - 3}"
            )
        elif kind == 2:
            DeltaTable(table).delete(f"order_id = {next_id - 6}")
        elif kind == 3:
            changed = orders([next_id - 1, next_id], status="paid")
            (
                DeltaTable(table)
                .merge(changed, "t.order_id = s.order_id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
            next_id += 1
        else:  # an UPDATE that changes nothing: every row it rewrites is a carry-over
            DeltaTable(table).update({"status": "status"}, predicate=f"order_id <= {next_id}")
        step += 1


def run(spark: Any, seconds: float = 20.0, work_dir: str | None = None) -> None:
    """Write the table and follow its feed. Without ``work_dir`` the table goes to the
    command's temporary folder, removed when it ends."""
    work = Path(work_dir) if work_dir else scratch() / "demo"
    table = str(work / "orders")
    stop, listening = threading.Event(), threading.Event()
    writer = threading.Thread(
        target=write_orders, args=(table, seconds, 1.0, stop, listening), daemon=True
    )
    print(f"Writing the Delta table {table} for {seconds:.0f}s; its changes follow.\n")
    try:
        writer.start()
        while not (Path(table) / "_delta_log" / f"{0:020d}.json").exists():
            time.sleep(0.1)
        options = {"rowId": "order_id", "computeUpdates": True, "startingVersion": 0}
        show = lambda text: print(text + "\n", flush=True)  # noqa: E731
        follow(spark, table, options, show, lambda: not writer.is_alive(), listening.set)
        print("Done: every commit above came out of the stream, post-processed.\n")
        show_history(spark, table, str(work / "orders_history"))
        show_snapshots(spark, table, str(work / "orders_from_snapshots"))
    finally:
        stop.set()
        writer.join(10)


def show_history(spark: Any, table: str, history: str, orders_shown: int = 3) -> None:
    """Apply the table's whole feed to ``history`` as SCD type 2 and print the versions of
    the orders that changed most (read back with delta-rs: the server needs no Delta jars)."""
    from spark_cdc import AppliedChanges, apply_changes, read
    from spark_cdc.cli.live_feed import text_table

    feed = read(spark).option("rowId", "order_id").option("computeUpdates", True).load(table)
    done = apply_changes(
        feed, history, keys=["order_id"], sequence_by="_commit_version", stored_as_scd_type=2
    )
    assert isinstance(done, AppliedChanges)  # a batch feed is applied at once
    rows = _query(history, "select * from t order by order_id, __START_AT")
    versions: dict[int, int] = {}
    for row in rows:
        versions[row["order_id"]] = versions.get(row["order_id"], 0) + 1
    shown = set(sorted(versions, key=lambda k: (-versions[k], k))[:orders_shown])
    print(
        f"apply_changes wrote {history} (SCD type 2) from the same {done.changes} changes; "
        f"the history of {len(shown)} orders, by commit version:"
    )
    names = ["order_id", "status", "amount", "__START_AT", "__END_AT"]
    print(text_table(names, [r for r in rows if r["order_id"] in shown]) + "\n")


def show_snapshots(spark: Any, table: str, history: str) -> None:
    """Apply the table's content as snapshot 1, change a few orders by hand, apply it
    again as snapshot 2, and print the history rows snapshot 2 wrote: what a table without
    a changelog (a nightly dump) gets from ``apply_changes_from_snapshot``."""
    from deltalake import DeltaTable, write_deltalake
    from spark_cdc import apply_changes_from_snapshot
    from spark_cdc.cli.live_feed import text_table

    def applied() -> str:
        (done,) = apply_changes_from_snapshot(
            history, table, keys=["order_id"], stored_as_scd_type=2, spark=spark
        )
        return f"snapshot {done.version}: {done.changes} changes, {done.rows} rows written"

    first = applied()
    newest = _query(table, "select max(order_id) as newest from t")[0]["newest"] or 0
    target = DeltaTable(table)
    target.update({"status": "'refunded'"}, predicate=f"order_id = {newest}")
    target.delete(f"order_id = {newest - 1}")
    write_deltalake(table, orders([newest + 1]), mode="append")
    second = applied()
    changed = "where __START_AT = 2 or __END_AT = 2 order by order_id, __START_AT"
    rows = _query(history, f"select * from t {changed}")
    print(
        f"apply_changes_from_snapshot applied the table's content to {history} as {first}; "
        f"then order {newest} was refunded, {newest - 1} deleted and {newest + 1} added by "
        f"hand, and {second}. The versions snapshot 2 closed or opened:"
    )
    names = ["order_id", "status", "amount", "__START_AT", "__END_AT"]
    print(text_table(names, rows) + "\n")


def _query(path: str, sql: str) -> list[dict[str, Any]]:
    """``sql`` over the Delta table at ``path`` (as ``t``), read with delta-rs: the server
    needs no Delta jars."""
    from deltalake import DeltaTable, QueryBuilder

    reader = QueryBuilder().register("t", DeltaTable(path)).execute(sql)
    return pa.RecordBatchReader.from_stream(reader).read_all().to_pylist()
