"""A table's decoded log messages as Spark's changelog rows, vectorized.

- **One change per row and commit.** A transaction may change one row several times; its
  changes of one key are folded into their net effect (an insert, a delete, or an update's
  pre- and post-image), the order inside the transaction applied, and carry the
  transaction's commit LSN as ``_commit_version``. So a feed holds at most one change of a
  key per version, as Spark's changelog contract and ``apply_changes(sequence_by=
  "_commit_version")`` need.
- **Images.** An update's pre-image exists where the log has the old row (``REPLICA
  IDENTITY FULL``); otherwise an update is its post-image alone. A delete carries the key's
  values (the whole old row under ``FULL``). An update that changes the key is a delete of
  the old key and an insert of the new one, as Spark's native CDC reads it.
- **TOAST.** An update leaves an unchanged TOASTed value out of the log. Under ``FULL`` the
  old row has it and it is carried over; otherwise the read is refused by name
  (``UNCHANGED_TOAST_VALUE``), never NULL.
- **Truncates** are refused by name, or served on request as rows of their own
  (``changelog``).
- **Commit times** are made strictly increasing by at least a millisecond per commit
  (``monotonic_us``), as every source of this package serves them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.postgres.catalog import TableInfo
from spark_cdc.server_plugin.postgres.pgoutput import (
    DELETE,
    INSERT,
    KEY,
    OLD,
    UNCHANGED,
    Changes,
    Decoded,
)
from spark_cdc.server_plugin.postgres.types import from_text
from spark_cdc.server_plugin.vocabulary import (
    DELETE as DELETE_TYPE,
)
from spark_cdc.server_plugin.vocabulary import (
    INSERT as INSERT_TYPE,
)
from spark_cdc.server_plugin.vocabulary import (
    UPDATE_POSTIMAGE,
    UPDATE_PREIMAGE,
)

_OP_INSERT, _OP_UPDATE, _OP_DELETE = 0, 1, 2
TRUNCATE_TYPE = "truncate"  # apply_changes(apply_as_truncates="_change_type = 'truncate'")
MS_US = 1000


def monotonic_us(recorded_us: np.ndarray, previous_us: int | None) -> np.ndarray:
    """Each commit time, raised where needed to a millisecond after the one before
    (``previous_us``: the last one served before these)."""
    if len(recorded_us) == 0:
        return recorded_us
    steps = np.arange(len(recorded_us), dtype=np.int64) * MS_US
    floor = recorded_us - steps
    if previous_us is not None:
        floor[0] = max(floor[0], previous_us + MS_US)
    return np.maximum.accumulate(floor) + steps


@dataclass(frozen=True)
class Served:
    """The transactions a read serves: by index into ``Decoded``'s arrays, and each one's
    commit time as served."""

    keep: np.ndarray  # bool per transaction
    commit_us: np.ndarray  # per transaction (meaningful where kept)


def served(
    decoded: Decoded, after: int, upto: int | None, skip: np.ndarray, previous_us: int | None
) -> Served:
    """The transactions committed after LSN ``after`` and up to ``upto`` (None: no bound)
    that ``skip`` does not leave out, with their commit times chained from
    ``previous_us``."""
    keep = (decoded.commit_lsn > after) & ~skip
    if upto is not None:
        keep &= decoded.commit_lsn <= upto
    times = decoded.commit_us.copy()
    times[keep] = monotonic_us(decoded.commit_us[keep], previous_us)
    return Served(keep, times)


def changelog(
    decoded: Decoded,
    info: TableInfo,
    chosen: Served,
    output: pa.Schema,
    truncates: bool = False,
) -> pa.Table:
    """``info``'s changes in the served transactions, as rows of ``output`` (the table's
    columns, then the three changelog columns). A truncate of the table is refused by name,
    or with ``truncates`` served as a row of its own (``TRUNCATE_TYPE``, every column NULL)
    one version before its transaction's: the transaction's changes after it then follow
    it by ``_commit_version``, and those before it, which it emptied, are left out."""
    cut = _truncated(decoded, info, chosen, truncates)
    names = [field.name for field in info.schema]
    events = [
        _events(c, names, info) for c in decoded.changes if c.relation.qualified == info.qualified
    ]
    events = [e for e in events if e.num_rows]
    rows = output.empty_table()
    if events:
        table = pa.concat_tables(events)
        txn = np.asarray(table.column("txn"))
        live = chosen.keep[txn] & (np.asarray(table.column("order")) > cut[txn] * 2 + 1)
        table = table.filter(pa.array(live))
        if table.num_rows:
            rows = _rows(decoded, info, chosen, output, table.sort_by("order"), names)
    emptied = np.flatnonzero(cut >= 0)
    if not len(emptied):
        return rows
    marks = [pa.nulls(len(emptied), field.type) for field in output][: len(names)]
    marks += [
        pa.repeat(pa.scalar(TRUNCATE_TYPE), len(emptied)),
        pa.array(decoded.commit_lsn[emptied] - 1, pa.int64()),
        pa.array(chosen.commit_us[emptied], pa.timestamp("us", tz="UTC")),
    ]
    marked = pa.Table.from_arrays(marks, schema=output)
    return pa.concat_tables([marked, rows]).sort_by("_commit_version")


def _truncated(decoded: Decoded, info: TableInfo, chosen: Served, allowed: bool) -> np.ndarray:
    """Per transaction, the message of its last truncate of ``info``'s table (-1: none)."""
    cut = np.full(len(decoded.commit_lsn), -1, np.int64)
    for txn, message, relation in decoded.truncates:
        if relation.qualified == info.qualified and chosen.keep[txn]:
            if not allowed:
                raise error(
                    "POSTGRES_CHANGELOG.TRUNCATE",
                    table=info.qualified,
                    lsn=int(decoded.commit_lsn[txn]),
                )
            cut[txn] = max(cut[txn], message)
    return cut


def _rows(
    decoded: Decoded,
    info: TableInfo,
    chosen: Served,
    output: pa.Schema,
    table: pa.Table,
    names: list[str],
) -> pa.Table:
    folded = _folded(table, names, info.keys)
    served_txn = np.asarray(folded.column("txn"))
    columns = [
        from_text(folded.column(name).combine_chunks(), field.dataType, name, info.qualified)
        for name, field in zip(names, info.schema, strict=True)
    ]
    columns += [
        folded.column("change_type"),
        pa.array(decoded.commit_lsn[served_txn], pa.int64()),
        pa.array(chosen.commit_us[served_txn], pa.timestamp("us", tz="UTC")),
    ]
    return pa.Table.from_arrays(columns, schema=output)


def _events(changes: Changes, names: list[str], info: TableInfo) -> pa.Table:
    """One row per change of one message (two for an update of the key: the old key's
    delete, then the new key's insert), each with its image before (``pre_*``) and after
    (``post_*``) as text, in the table's columns."""
    relation = changes.relation
    position = {column.name: index for index, column in enumerate(relation.columns)}
    extra = [c.name for c in relation.columns if c.name not in names]
    for name in extra:
        index = position[name]
        if pc.any(changes.new.values[index].is_valid()).as_py():
            raise error("POSTGRES_CHANGELOG.SCHEMA_CHANGED", table=info.qualified, column=name)
    count = len(changes.order)
    op = np.select(
        [changes.op == INSERT, changes.op == DELETE], [_OP_INSERT, _OP_DELETE], _OP_UPDATE
    )
    key_moved = (op == _OP_UPDATE) & (changes.old_kind == KEY)
    absent = pa.nulls(count, pa.string())  # a column the relation lacks (dropped since)
    pre, post = {}, {}
    for name in names:
        at = position.get(name)
        if at is None:
            pre[name] = post[name] = absent
            continue
        old, new = changes.old.values[at], changes.new.values[at]
        unchanged = changes.new.kinds[at] == UNCHANGED
        if np.any(unchanged & (changes.old_kind != OLD)):
            raise error(
                "POSTGRES_CHANGELOG.UNCHANGED_TOAST_VALUE", table=info.qualified, column=name
            )
        if np.any(unchanged):
            new = pc.if_else(pa.array(unchanged), old, new)
        pre[name], post[name] = old, new

    base = {
        "order": changes.order * 2,
        "txn": changes.txn,
        "op": np.where(key_moved, _OP_DELETE, op),
        "old_kind": changes.old_kind,
    }
    rows = _table(
        base,
        pre,
        {
            n: pc.if_else(pa.array(key_moved), pa.nulls(count, pa.string()), v)
            for n, v in post.items()
        },
    )
    if not np.any(key_moved):
        return rows
    moved = np.flatnonzero(key_moved)
    inserts = {
        "order": changes.order[moved] * 2 + 1,
        "txn": changes.txn[moved],
        "op": np.full(len(moved), _OP_INSERT),
        "old_kind": np.zeros(len(moved), np.uint8),
    }
    nothing = {n: pa.nulls(len(moved), pa.string()) for n in names}
    taken = {n: v.take(pa.array(moved)) for n, v in post.items()}
    return pa.concat_tables([rows, _table(inserts, nothing, taken)])


def _table(
    base: dict[str, np.ndarray], pre: dict[str, pa.Array], post: dict[str, pa.Array]
) -> pa.Table:
    arrays = {
        "order": pa.array(base["order"], pa.int64()),
        "txn": pa.array(base["txn"], pa.int64()),
        "op": pa.array(base["op"], pa.int8()),
        "old_kind": pa.array(base["old_kind"], pa.uint8()),
    }
    arrays |= {f"pre_{n}": v.cast(pa.string()) for n, v in pre.items()}
    arrays |= {f"post_{n}": v.cast(pa.string()) for n, v in post.items()}
    return pa.table(arrays)


def _folded(events: pa.Table, names: list[str], keys: tuple[str, ...]) -> pa.Table:
    """The net change of each key in each transaction (events sorted by order), as rows of
    text columns named as the table's, with ``txn`` and ``change_type``."""
    op = np.asarray(events.column("op"))
    order = np.asarray(events.column("order"))
    if keys:
        group_columns = {
            f"k_{k}": pc.if_else(
                pa.array(op == _OP_DELETE), events.column(f"pre_{k}"), events.column(f"post_{k}")
            )
            for k in keys
        }
    else:  # no key to fold by: each change stands alone
        group_columns = {"k_order": events.column("order")}
    grouping = pa.table(
        {"txn": events.column("txn"), **group_columns, "order": events.column("order")}
    )
    groups = grouping.group_by(["txn", *group_columns], use_threads=False).aggregate(
        [("order", "min"), ("order", "max")]
    )
    first = np.searchsorted(order, np.asarray(groups.column("order_min")))
    last = np.searchsorted(order, np.asarray(groups.column("order_max")))
    old_kind = np.asarray(events.column("old_kind"))[first]  # the first change's old row
    before = op[first] != _OP_INSERT
    after = op[last] != _OP_DELETE
    # The image before the transaction: the first change's old row; a delete's key alone
    # when that first change had none (an update without FULL). A pre-image only where the
    # log had the whole old row (FULL): never a row of NULLs but its key.
    pre_from = np.where(old_kind != 0, first, last)
    parts = []
    for wanted, source, prefix, label in (
        (~before & after, last, "post_", INSERT_TYPE),
        (before & ~after, pre_from, "pre_", DELETE_TYPE),
        (before & after & (old_kind == OLD), first, "pre_", UPDATE_PREIMAGE),
        (before & after, last, "post_", UPDATE_POSTIMAGE),
    ):
        rows = source[wanted]
        if len(rows) == 0:
            continue
        index = pa.array(rows)
        columns = {n: events.column(prefix + n).take(index) for n in names}
        columns["txn"] = events.column("txn").take(index)
        columns["change_type"] = pa.repeat(pa.scalar(label), len(rows))
        columns["rank"] = pa.array(order[first[wanted]], pa.int64())
        parts.append(pa.table(columns))
    if not parts:
        empty = {n: pa.array([], pa.string()) for n in names}
        return pa.table(
            {**empty, "txn": pa.array([], pa.int64()), "change_type": pa.array([], pa.string())}
        )
    return pa.concat_tables(parts).sort_by([("txn", "ascending"), ("rank", "ascending")])
