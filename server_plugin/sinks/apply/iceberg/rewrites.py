"""A batch's target snapshot: the data files that may hold the batch's keys (their column
bounds say so) are read, and the batch's new rows added (and the files its tasks wrote), in
one ``overwrite`` snapshot. By default, as pyiceberg writes one, a copy-on-write rewrite:
each file holding rows the batch replaces is rewritten without them, the delete files of
its own removed with it. A target asking for merge-on-read has those rows marked deleted
instead (``deletes``), only the replaced rows' columns read. pyiceberg reads no
equality deletes: a table that has them is refused by name.

Another writer's commit in between is pyiceberg's to settle: it retries on the new head when
nothing the snapshot declares (the batch's keys, the files it rewrites) was touched, and
fails validation otherwise, which is refused as ``APPLY_CHANGES.CONCURRENT_WRITE``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.file_lookup import rows_of_keys
from spark_cdc.server_plugin.sinks.apply.engine.key_index import FILE_KEYS_BYTES, FileKeysCache
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.iceberg import deletes, tables
from spark_cdc.server_plugin.sinks.apply.iceberg import files as iceberg_files

# pyiceberg prunes files by an ``In`` of at most this many values (more: every file).
_IN_LIMIT = 200
_RANGES = 8  # more values: at most this many ranges of them (``_runs``)
_POSITION = "__spark_cdc_position"  # a row's place, carried through a join
# The target files' key indexes a process keeps between batches: a stream's later batches
# find the rows they replace without reading the keys again.
_FILE_KEYS = FileKeysCache(FILE_KEYS_BYTES)


def replace_rows(
    table: Any,
    spec: ApplySpec,
    version: int | None,
    replaced: pa.Table,
    rows: pa.Table,
    kept: pa.Table | None = None,
    outcome: str | None = None,
    staged: tuple[Any, ...] = (),
    staged_keys: pa.Array | None = None,
) -> None:
    """One ``overwrite`` snapshot: every row matching one of ``replaced`` in all its
    columns (the keys; type 2's keys and ``__START_AT``) deleted, ``rows`` and the data
    files tasks ``staged`` (of rows whose first keys are ``staged_keys``) inserted and,
    when ``kept`` is given (a truncate), every row of a key not in ``kept`` deleted too.
    Each data file that may hold a replaced row is read and, when it does, rewritten
    without it, one file at a time (what the commit holds is a file, not the table)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    name = table.name()
    whole = kept is not None
    changed = AlwaysTrue() if whole else declared(replaced, rows, spec.keys, staged_keys)
    merging = not whole and deletes.merges_on_read(
        name, table.metadata.properties, table.metadata.format_version
    )
    with tables.refusing_conflicts(name), tables.evolved(table, spec, rows) as transaction:
        metadata = transaction.table_metadata
        schema = metadata.schema()
        columns = pa.schema(schema.as_arrow())
        properties = tables.marker(spec, version, outcome)
        with deletes.row_delta(transaction, table.io, properties) as rewrite:
            rewrite.delete_by_predicate(changed)
            counter = itertools.count()

            def add(new: pa.Table) -> None:
                for data_file in _dataframe_to_data_files(
                    table_metadata=metadata,
                    df=tables.written(columns, new),
                    io=table.io,
                    write_uuid=rewrite.commit_uuid,
                    counter=counter,
                ):
                    rewrite.append_data_file(data_file)

            # The files to read are those that may hold a replaced row: the inserted keys
            # (new ones after the table's last, say) would widen a range to files that
            # hold none of them.
            searched = changed if whole else declared(replaced, replaced.slice(0, 0), spec.keys)
            candidates = _candidates(table, searched)
            if merging:
                found = _found_in(table, candidates, replaced, spec.keys)
                rewrite.mark(deletes.marked(table, candidates, found, str(rewrite.commit_uuid)))
                last = rows
            else:
                # One rewritten file held at a time; the last one's rows go out with the
                # new rows, so a small batch into a small table still makes one file.
                last = rows.slice(0, 0)
                for task in candidates:
                    held = ArrowScan(metadata, table.io, schema, AlwaysTrue()).to_table([task])
                    left = _without(held, replaced, kept, spec.keys)
                    if left.num_rows == task.file.record_count and not task.delete_files:
                        continue  # holds none of them: the file stays
                    rewrite.delete_data_file(task.file)
                    rewrite.retire(d for d in task.delete_files if deletes.scoped_to(d, task.file))
                    if last.num_rows:
                        add(last)
                    last = left
                last = pa.concat_tables(
                    [tables.written(columns, last), tables.written(columns, rows)]
                )
            if last.num_rows:
                add(last)
            for data_file in staged:
                rewrite.append_data_file(data_file)


def _found_in(
    table: Any, candidates: list[Any], replaced: pa.Table, keys: tuple[str, ...]
) -> Callable[[Any], np.ndarray]:
    """The positions in a task's data file of the rows matching one of ``replaced`` in
    all its columns, deleted or not. The files are searched by their key indexes, kept per
    process (``iceberg_files``: a stream's later batches read no key they read before),
    or, when they cannot be read by their columns' names, by reading those columns."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    nothing = np.empty(0, np.int64)
    if not replaced.num_rows:
        return lambda task: nothing
    names = list(replaced.column_names)
    files = iceberg_files.described(table, names, candidates)
    if files is not None:
        log = iceberg_files.TableFiles(table.io)
        found = rows_of_keys(log, files, replaced, names, _FILE_KEYS, indexed=len(keys))
        return lambda task: found.get(task.file.file_path, nothing)
    projected = table.metadata.schema().select(*names)

    def read(task: Any) -> np.ndarray:
        scan = ArrowScan(table.metadata, table.io, projected, AlwaysTrue())
        return _matching(scan.to_table([FileScanTask(task.file)]), replaced, "left semi")

    return read


def declared(
    replaced: pa.Table, rows: pa.Table, keys: tuple[str, ...], more: pa.Array | None = None
) -> Any:
    """What the batch's snapshot declares it changes, for pyiceberg's check of other
    writers' commits (and to find the files to read): the first key's values among the
    replaced and inserted rows (and ``more`` of them), as a set when small enough to prune
    by, else as a few ranges."""
    from pyiceberg.expressions import AlwaysFalse, And, Or

    key = keys[0]
    columns = [t.column(key) for t in (replaced, rows)]
    columns += [] if more is None else [pa.chunked_array([more])]
    parts = [c for c in columns if not pa.types.is_null(c.type)]
    if not parts:
        return AlwaysFalse()
    kind = parts[0].type
    values = pc.unique(pa.chunked_array([c for p in parts for c in p.cast(kind).chunks], kind))
    values = values.drop_null()
    if not len(values):
        return AlwaysFalse()
    if len(values) <= _IN_LIMIT:
        return expression("In", key, values.to_pylist())
    ranges = [
        And(expression("GreaterThanOrEqual", key, low), expression("LessThanOrEqual", key, high))
        for low, high in _runs(values)
    ]
    return ranges[0] if len(ranges) == 1 else Or(*ranges)


def _runs(values: pa.Array) -> list[tuple[Any, Any]]:
    """``values`` (distinct) as at most ``_RANGES`` ranges: integers split at their widest
    gaps, as a batch's keys cluster (a run of recently updated ids, new ids after the
    table's last), so that the files between the runs are neither read nor declared
    changed; other types as one range."""
    if not pa.types.is_integer(values.type) or len(values) < 2:
        low, high = (v.as_py() for v in pc.min_max(values).values())
        return [(low, high)]
    ordered = np.sort(values.to_numpy())
    gaps = np.diff(ordered).astype(np.float64)
    cuts = np.flatnonzero(gaps > 1)
    if len(cuts) >= _RANGES:
        cuts = np.sort(cuts[np.argpartition(gaps[cuts], -(_RANGES - 1))[-(_RANGES - 1) :]])
    starts, ends = np.concatenate([[0], cuts + 1]), np.concatenate([cuts, [len(ordered) - 1]])
    return [(ordered[s].item(), ordered[e].item()) for s, e in zip(starts, ends, strict=True)]


def expression(kind: str, *arguments: Any) -> Any:
    """pyiceberg's predicate class ``kind`` of ``arguments`` (a column's name, then its
    values): the classes take them by position, which their pydantic signatures, all that
    mypy reads, do not declare."""
    from pyiceberg import expressions

    return getattr(expressions, kind)(*arguments)


def _candidates(table: Any, declared: Any) -> list[Any]:
    """The data files that may hold rows matching ``declared`` (their bounds say so)."""
    from pyiceberg.expressions import AlwaysFalse

    if declared == AlwaysFalse() or table.current_snapshot() is None:
        return []
    with refusing_equality_deletes(table):
        return list(table.scan(row_filter=declared).plan_files())


@contextmanager
def refusing_equality_deletes(table: Any) -> Iterator[None]:
    try:
        yield
    except ValueError as refused:  # pyiceberg reads no equality deletes
        if "equality deletes" not in str(refused):
            raise
        raise error(
            "APPLY_CHANGES.UNSUPPORTED_TARGET_FEATURE",
            path=table.name(),
            features=f"equality deletes ({tables.first_line(refused)})",
        ) from refused


def _without(
    held: pa.Table, replaced: pa.Table, kept: pa.Table | None, keys: tuple[str, ...]
) -> pa.Table:
    """``held`` without the rows matching one of ``replaced`` (all its columns) and, with
    ``kept``, without those of keys not in ``kept``."""
    left = held if not replaced.num_rows else _joined(held, replaced, "left anti")
    if kept is not None:
        left = _joined(left, kept.select(list(keys)), "left semi")
    return left


def _joined(held: pa.Table, by: pa.Table, kind: str) -> pa.Table:
    """``held``'s rows that match one of ``by``'s in all its columns (``left semi``), or
    that match none (``left anti``), in their order."""
    return held if not held.num_rows else held.take(pa.array(_matching(held, by, kind)))


def _matching(held: pa.Table, by: pa.Table, kind: str) -> np.ndarray:
    """The positions, in order, of ``held``'s rows that match one of ``by``'s in all its
    columns (``left semi``), or that match none (``left anti``). Arrow joins on the key
    columns alone (it carries no struct), a struct's fields compared one by one."""
    if not held.num_rows:
        return np.empty(0, np.int64)
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for name in by.column_names:
        column = by.column(name)
        parts = list(column.type) if pa.types.is_struct(column.type) else [None]
        for i, part in enumerate(parts):
            if part is None:
                mine[name], theirs[name] = held.column(name), column
            else:
                flat = f"{name}.{part.name}"
                mine[flat] = pc.struct_field(held.column(name), [i])
                theirs[flat] = pc.struct_field(column, [i])
    keys = pa.table(mine)
    names = keys.column_names
    distinct = pa.table(theirs).cast(keys.schema).group_by(names).aggregate([])
    keys = keys.append_column(_POSITION, pa.array(np.arange(held.num_rows)))
    found = keys.join(distinct, names, join_type=kind).column(_POSITION).to_numpy()
    return np.sort(found)


def overwrite_rows(
    table: Any,
    spec: ApplySpec,
    version: int | None,
    rows: pa.Table,
    outcome: str | None = None,
    staged: tuple[Any, ...] = (),
) -> None:
    """One snapshot in which ``rows`` and the data files tasks ``staged`` replace every
    row of the table (a truncate, a refresh, a compaction of the state)."""
    empty = rows.select(list(spec.keys)).slice(0, 0)
    replace_rows(table, spec, version, empty, rows, empty, outcome, staged)


def scanned(table: Any, row_filter: Any) -> pa.Table:
    """The table's rows that ``row_filter`` may match (the files its bounds allow, rows
    filtered by pyiceberg)."""
    if table.current_snapshot() is None:
        return tables.table_schema(table).empty_table()
    with refusing_equality_deletes(table):
        return table.scan(row_filter=row_filter).to_arrow()
