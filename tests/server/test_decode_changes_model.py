"""decode_changes against a model: random transactions on a small table (several changes of
one key in one transaction, keys deleted and inserted again, truncates where the format has
them) written as each format's envelopes, shuffled, decoded and applied by
``apply_changes(sequence_by="_commit_version")``: the target must be the table as the
database left it, whatever order the envelopes arrived in."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from spark_cdc import apply_changes, decode_changes

from tests.support.apply_targets import read_table

SCHEMA = "id INT, name STRING, qty INT"
COLUMNS = ("id", "name", "qty")
Row = dict[str, Any]
# One transaction: its operations, each (what, key, name, qty); what is insert, update,
# delete (of the key, when the table has or lacks it: fixed up by the replay) or truncate.
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "write", "delete", "truncate"]),
        st.integers(0, 4),
        st.sampled_from(["a", "b", "c", None]),
        st.one_of(st.none(), st.integers(-5, 5)),
    ),
    min_size=1,
    max_size=6,
)
TRANSACTIONS = st.lists(OPERATIONS, min_size=1, max_size=6)
FORMATS = ["debezium-postgres", "debezium-mysql", "maxwell-json", "canal-json", "ogg-json"]
TRUNCATING = {"debezium-postgres", "ogg-json"}


def _replay(
    transactions: list[list[tuple[str, int, str | None, int | None]]], truncates: bool
) -> tuple[list[list[tuple[str, Row | None, Row | None]]], dict[int, Row]]:
    """The changes each transaction makes, as (kind, before, after), and the final table."""
    table: dict[int, Row] = {}
    log = []
    for operations in transactions:
        changes: list[tuple[str, Row | None, Row | None]] = []
        for what, key, name, qty in operations:
            row = {"id": key, "name": name, "qty": qty}
            if what == "truncate":
                if truncates:
                    changes.append(("truncate", None, None))
                    table.clear()
            elif what == "delete" and key in table:
                changes.append(("delete", table.pop(key), None))
            elif what == "write" and key in table:
                changes.append(("update", table[key], row))
                table[key] = row
            elif what == "write":
                changes.append(("insert", None, row))
                table[key] = row
        if changes:
            log.append(changes)
    return log, table


def _envelopes(format: str, log: list[list[tuple[str, Row | None, Row | None]]]) -> list[str]:
    out: list[str] = []
    position, file_number, message, row = 1000, 1, 1, 0
    for txn, changes in enumerate(log):
        ms = 1_700_000_000_000 + txn * 1000
        if format == "debezium-mysql" and txn % 3 == 2:
            file_number, position = file_number + 1, 4  # the binlog rotates
        for index, (kind, before, after) in enumerate(changes):
            op = {"insert": "c", "update": "u", "delete": "d", "truncate": "t"}[kind]
            last = index == len(changes) - 1
            if format == "debezium-postgres":
                position += 40
                source = {"connector": "postgresql", "lsn": position, "txId": txn, "ts_ms": ms}
                out.append(
                    json.dumps({"before": before, "after": after, "op": op, "source": source})
                )
            elif format == "debezium-mysql":
                # Consecutive changes of one kind are the rows of one binlog event.
                same = index > 0 and changes[index - 1][0] == kind
                row = row + 1 if same else 0
                position += 0 if same else 30
                source = {
                    "connector": "mysql",
                    "file": f"mysql-bin.{file_number:06d}",
                    "pos": position,
                    "row": row,
                    "ts_ms": ms,
                }
                out.append(
                    json.dumps({"before": before, "after": after, "op": op, "source": source})
                )
            elif format == "maxwell-json":
                event: dict[str, Any] = {"type": kind, "ts": ms // 1000, "xid": 100 + txn}
                event["data"] = after if after is not None else before
                if kind == "update":
                    assert before is not None and after is not None
                    event["old"] = {c: before[c] for c in COLUMNS if before[c] != after[c]}
                if last:
                    event["commit"] = True
                else:
                    event["xoffset"] = index
                out.append(json.dumps(event))
            elif format == "canal-json":
                image = after if after is not None else before
                assert image is not None
                texts = [{c: None if image[c] is None else str(image[c]) for c in COLUMNS}]
                old = None
                if kind == "update":
                    assert before is not None and after is not None
                    old = [
                        {c: None if before[c] is None else str(before[c])}
                        for c in COLUMNS
                        if before[c] != after[c]
                    ]
                    old = [{k: v for d in old for k, v in d.items()}]
                message += 1
                out.append(
                    json.dumps(
                        {
                            "data": texts,
                            "old": old,
                            "type": kind.upper(),
                            "isDdl": False,
                            "es": ms,
                            "id": message,
                        }
                    )
                )
            else:
                position += 1
                event = {
                    "op_type": {"insert": "I", "update": "U", "delete": "D", "truncate": "T"}[kind],
                    "pos": f"{position:020d}",
                    "op_ts": "2024-01-01 00:00:00.000000",
                    "before": before,
                    "after": after,
                }
                out.append(json.dumps(event))
    return out


EXAMPLES = int(os.environ.get("SPARK_CDC_MODEL_EXAMPLES", "60")) // 4


@pytest.mark.parametrize("format", FORMATS)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(transactions=TRANSACTIONS, seed=st.integers(0, 1000))
def test_applied_feed_is_the_table_the_database_left(
    spark: SparkSession,
    tmp_path_factory: Any,
    transactions: list[list[tuple[str, int, str | None, int | None]]],
    format: str,
    seed: int,
) -> None:
    truncates = format in TRUNCATING
    log, table = _replay(transactions, truncates)
    envelopes = _envelopes(format, log)
    random.Random(seed).shuffle(envelopes)
    frame = spark.createDataFrame([(e,) for e in envelopes] or [(None,)], "value string")
    name = "debezium-json" if format.startswith("debezium") else format
    feed = decode_changes(frame, name, SCHEMA)
    target = str(Path(tmp_path_factory.mktemp("target")) / "t")
    truncate = "_change_type = 'truncate'" if truncates else None
    apply_changes(
        feed, target, keys=["id"], sequence_by="_commit_version", apply_as_truncates=truncate
    )
    if not Path(target).exists():
        assert table == {}
        return
    got = sorted(read_table(target).to_pylist(), key=lambda r: r["id"])
    assert got == [table[k] for k in sorted(table)]
