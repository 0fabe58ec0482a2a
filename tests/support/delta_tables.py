"""Real Delta tables written with deltalake (delta-rs), and the reference the change feed is
checked against: the table's own snapshots, version by version."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

CDF = {"delta.enableChangeDataFeed": "true"}
DATA_CHANGES = {"insert": 1, "update_postimage": 1, "delete": -1, "update_preimage": -1}


def rows(ids: Iterable[int], tag: str = "a", part: str | None = None) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"{tag}{i}" for i in ids]),
            "amount": pa.array([float(i) for i in ids]),
            "part": pa.array([part or ("even" if i % 2 == 0 else "odd") for i in ids]),
        }
    )


def big_rows(ids: range, seed: int) -> pa.Table:
    """Rows with an incompressible text column: a few MB of data files per 100k rows."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 2**62, (len(ids), 3)).astype(str)
    text = ["".join(row) for row in noise]
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "text": text, "n": pa.array(ids, pa.float64())}
    )


def _dml(path: str, cdf: bool, partitioned: bool) -> None:
    """Appends, update, delete, merge: copy-on-write rewrites with carry-over rows."""
    partition_by = ["part"] if partitioned else None
    config = CDF if cdf else None
    write_deltalake(path, rows(range(0, 6)), partition_by=partition_by, configuration=config)
    write_deltalake(path, rows(range(6, 10)), mode="append", partition_by=partition_by)
    table = DeltaTable(path)
    table.update({"amount": "amount * 10"}, predicate="id = 3")
    table.delete("id = 4")
    source = rows([3, 5, 20, 21], tag="m")
    (
        DeltaTable(path)
        .merge(source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    DeltaTable(path).update({"name": "'renamed'"}, predicate="part = 'odd'")


def dml(path: str) -> None:
    _dml(path, cdf=False, partitioned=False)


def dml_partitioned(path: str) -> None:
    _dml(path, cdf=False, partitioned=True)


def dml_cdf(path: str) -> None:
    _dml(path, cdf=True, partitioned=False)


def dml_cdf_partitioned(path: str) -> None:
    _dml(path, cdf=True, partitioned=True)


def cdf_enabled_later(path: str) -> None:
    write_deltalake(path, rows(range(0, 4)))
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 1")
    DeltaTable(path).alter.set_table_properties(CDF)
    DeltaTable(path).update({"amount": "-2.0"}, predicate="id = 2")
    DeltaTable(path).delete("id = 0")


def overwrite_and_compaction(path: str) -> None:
    for start in range(0, 12, 3):  # several small files
        write_deltalake(path, rows(range(start, start + 3)), mode="append")
    DeltaTable(path).optimize.compact()  # dataChange=false: no rows
    write_deltalake(path, rows(range(100, 104), tag="o"), mode="overwrite")
    DeltaTable(path).delete("id = 101")


def checkpoints(path: str) -> None:
    write_deltalake(path, rows(range(0, 3)))
    for i in range(3, 8):
        write_deltalake(path, rows([i]), mode="append")
        if i == 5:
            DeltaTable(path).create_checkpoint()
    DeltaTable(path).update({"name": "'late'"}, predicate="id = 7")


def schema_evolution(path: str) -> None:
    write_deltalake(path, rows(range(0, 3)))
    wider = rows(range(3, 5)).append_column("note", pa.array(["n3", "n4"]))
    write_deltalake(path, wider, mode="append", schema_mode="merge")
    DeltaTable(path).update({"note": "'set'"}, predicate="id = 1")


def empty_table(path: str) -> None:
    DeltaTable.create(path, schema=rows([]).schema)
    write_deltalake(path, rows([]), mode="append")


def one_huge_commit(path: str) -> None:
    """60k rows in 20 files (one per partition), all in one commit."""
    write_deltalake(path, rows(range(0, 3), part="p0"), partition_by=["part"])
    big = rows(range(1000, 61000))
    big = big.set_column(3, "part", pa.array([f"p{i % 20}" for i in range(1000, 61000)]))
    write_deltalake(path, big, mode="append", partition_by=["part"])
    DeltaTable(path).update({"amount": "0.5"}, predicate="id % 1000 = 7")


SCENARIOS: dict[str, Callable[[str], None]] = {
    "dml": dml,
    "dml_partitioned": dml_partitioned,
    "dml_cdf": dml_cdf,
    "dml_cdf_partitioned": dml_cdf_partitioned,
    "cdf_enabled_later": cdf_enabled_later,
    "overwrite_and_compaction": overwrite_and_compaction,
    "checkpoints": checkpoints,
    "schema_evolution": schema_evolution,
    "empty_table": empty_table,
    "one_huge_commit": one_huge_commit,
}


def latest_version(path: str) -> int:
    return DeltaTable(path).version()


def snapshot(path: str, version: int, columns: list[str]) -> Counter[tuple[Any, ...]]:
    """The table's rows at ``version`` as a multiset, missing columns as NULL."""
    table = DeltaTable(path, version=version).to_pyarrow_table()
    present = set(table.column_names)
    return Counter(
        tuple(r.get(c) if c in present else None for c in columns) for r in table.to_pylist()
    )


def apply_changes(
    before: Counter[tuple[Any, ...]], changes: Iterable[dict[str, Any]], columns: list[str]
) -> Counter[tuple[Any, ...]]:
    after = Counter(before)
    for change in changes:
        after[tuple(change[c] for c in columns)] += DATA_CHANGES[change["_change_type"]]
    return +after if all(n >= 0 for n in after.values()) else after


def commit_file(path: str, version: int) -> Path:
    return Path(path) / "_delta_log" / f"{version:020d}.json"


def write_commit(file: Path, lines: list[str]) -> None:
    """A hand-written commit appears whole, as Delta's writers make it appear (put-if-absent
    or rename): a stream polling the log must never read one half-written."""
    temp = file.with_name(f".{file.name}.{uuid.uuid4().hex}.tmp")
    temp.write_text("\n".join(lines) + "\n")
    os.replace(temp, file)


def append_commit(
    path: str, actions: list[dict[str, Any]], info: dict[str, Any] | None = None
) -> int:
    """Write the next commit by hand (for log shapes delta-rs cannot produce)."""
    version = latest_version(path) + 1
    info = {"commitInfo": info or {"timestamp": 1_800_000_000_000, "operation": "MANUAL"}}
    lines = [json.dumps(a) for a in [info, *actions]]
    write_commit(commit_file(path, version), lines)
    return version


def first_action(path: str, kind: str) -> dict[str, Any]:
    """The first ``kind`` action ("add", "metaData", ...) of version 0."""
    for line in commit_file(path, 0).read_text().splitlines():
        action = json.loads(line)
        if kind in action:
            return action[kind]
    raise AssertionError(f"no {kind} action in version 0")


def log_cleaned_up_before_version_2(path: str) -> None:
    """Four one-row appends, a checkpoint at 3, commit files 0 and 1 gone (log cleanup)."""
    for i in range(4):
        write_deltalake(path, rows([i]), mode="append")
    DeltaTable(path).create_checkpoint()
    for version in (0, 1):
        commit_file(path, version).unlink()


@contextlib.contextmanager
def committing(commit: Callable[[int], None], every_s: float = 0.3) -> Iterator[None]:
    """``commit(step)`` (step 0, 1, 2, ...) every ``every_s`` seconds in a thread while the
    block runs: a source table a stream keeps finding new commits in."""
    done = threading.Event()

    def write() -> None:
        step = 0
        while not done.wait(every_s):
            commit(step)
            step += 1

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        done.set()
        writer.join(10)


def merge_step(path: str, step: int) -> None:
    """One step of a table of ids 0-4 (column ``v``) being written: a MERGE that updates
    one id and inserts a new one, and every third step a delete."""
    table = DeltaTable(path)
    updates = pa.table({"id": [step % 5, 10 + step], "v": [f"u{step}", f"n{step}"]})
    table.merge(
        updates, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    if step % 3 == 0:
        table.delete(f"id = {(step + 2) % 5}")
