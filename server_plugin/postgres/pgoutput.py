"""PostgreSQL's ``pgoutput`` logical replication messages, decoded column by column with
numpy: no Python loop per row.

``pg_logical_slot_peek_binary_changes`` returns one message a row (``proto_version`` 1,
text values): B(egin) and C(ommit) around each transaction, R(elation) before a table's
first change in each decoding session (and again after its schema changed), I(nsert),
U(pdate), D(elete) and T(runcate). The layouts are in PostgreSQL's documentation,
"Logical Replication Message Formats". A message's fields sit at offsets that depend on the
lengths of the values before them, so the values of one column of every change of one
relation are found together: each step moves a vector of positions, one per message, past
that column (``_tuples``). Begin, relation and truncate messages are few (one a
transaction or table) and are read one by one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.errors import error

BEGIN, COMMIT, RELATION, INSERT, UPDATE, DELETE, TRUNCATE = (ord(c) for c in "BCRIUDT")
NEW, KEY, OLD = ord("N"), ord("K"), ord("O")
TEXT, NULL, UNCHANGED = ord("t"), ord("n"), ord("u")
# PostgreSQL's epoch (2000-01-01) in Unix microseconds: commit times count from it.
PG_EPOCH_US = 946_684_800_000_000


@dataclass(frozen=True)
class Column:
    name: str
    type_oid: int
    key: bool  # part of the replica identity the log carries for updates and deletes


@dataclass(frozen=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[Column, ...]

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.name}"


@dataclass(frozen=True)
class Image:
    """One tuple a message carries for each of its rows: per column, the kind byte (``t``
    text, ``n`` null, ``u`` an unchanged TOASTed value the log left out) and the text."""

    kinds: list[np.ndarray]
    values: list[pa.Array]


@dataclass(frozen=True)
class Changes:
    """The row changes of one relation (one R message's schema) in a run of messages, in
    log order: each a message index (its order), its transaction's index, its kind
    (``INSERT``/``UPDATE``/``DELETE``), the tuple before it (``old``, where the log has one:
    ``old_kind`` ``K`` the replica identity's columns, ``O`` the whole row, 0 none) and
    after it (``new``; absent for deletes)."""

    relation: Relation
    order: np.ndarray
    txn: np.ndarray
    op: np.ndarray
    old_kind: np.ndarray
    old: Image
    new: Image


@dataclass(frozen=True)
class Decoded:
    """A run of whole transactions: per transaction its commit LSN, commit time (Unix
    microseconds), xid and where its commit record ends (a read up to there holds it); the
    row changes per relation schema; the truncates, each a transaction index, the
    message's (as ``Changes.order``) and a relation it emptied."""

    commit_lsn: np.ndarray
    commit_us: np.ndarray
    xid: np.ndarray
    end_lsn: np.ndarray
    changes: list[Changes]
    truncates: list[tuple[int, int, Relation]]  # transaction, message, relation


def _big_endian(buf: np.ndarray, at: np.ndarray, width: int, dtype: str) -> np.ndarray:
    if len(at) == 0:
        return np.zeros(0, dtype=dtype.replace(">", "<"))
    gathered = buf[at[:, None] + np.arange(width)]
    return np.ascontiguousarray(gathered).view(dtype).ravel().astype(dtype.replace(">", "<"))


def _message_bytes(data: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A binary column's values as one byte buffer, with ``_PADDING`` zero bytes after it
    (so that any value's first bytes can be read as one window, ``_strings``), and each
    value's start (and, last, the end)."""
    data = data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data
    wide = pa.types.is_large_binary(data.type)
    offsets_buffer, values_buffer = data.buffers()[1], data.buffers()[2]
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)
    offsets = offsets[data.offset : data.offset + len(data) + 1].astype(np.int64)
    padding = np.zeros(_PADDING, np.uint8)
    if values_buffer is None:
        return padding, offsets
    return np.concatenate([np.frombuffer(values_buffer, dtype=np.uint8), padding]), offsets


def _cstring(buf: np.ndarray, at: int) -> tuple[str, int]:
    end = at
    while buf[end] != 0:
        end += 1
    return bytes(buf[at:end]).decode(), end + 1


def _relation(buf: np.ndarray, at: int) -> Relation:
    relid = struct.unpack_from(">I", buf.data, at + 1)[0]
    namespace, at = _cstring(buf, at + 5)
    name, at = _cstring(buf, at)
    identity = chr(buf[at])
    count = struct.unpack_from(">H", buf.data, at + 1)[0]
    at += 3
    columns = []
    for _ in range(count):
        flags = int(buf[at])
        column, at = _cstring(buf, at + 1)
        type_oid = struct.unpack_from(">I", buf.data, at)[0]
        at += 8  # the type's oid and modifier
        columns.append(Column(column, type_oid, bool(flags & 1)))
    return Relation(relid, namespace or "pg_catalog", name, identity, tuple(columns))


def decode(data: pa.Array) -> Decoded:
    """The messages in ``data`` (one a row, in log order, whole transactions from Begin to
    Commit; Begin and Commit alone are enough to list the transactions) decoded."""
    buf, offsets = _message_bytes(data)
    starts = offsets[:-1]
    if len(starts) == 0:
        empty = np.zeros(0, np.int64)
        return Decoded(empty, empty, empty, empty, [], [])
    kind = buf[starts]
    begins = np.flatnonzero(kind == BEGIN)
    txn = np.cumsum(kind == BEGIN) - 1
    at = starts[begins]
    commit_lsn = _big_endian(buf, at + 1, 8, ">i8")
    commit_us = _big_endian(buf, at + 9, 8, ">i8") + PG_EPOCH_US
    xid = _big_endian(buf, at + 17, 4, ">u4").astype(np.int64)
    end_lsn = _big_endian(buf, starts[kind == COMMIT] + 10, 8, ">i8")
    if len(end_lsn) != len(begins):
        raise error("POSTGRES_CHANGELOG.MALFORMED_MESSAGE", relation="a transaction's commit")

    relations = [(int(i), _relation(buf, int(starts[i]))) for i in np.flatnonzero(kind == RELATION)]
    truncates = []
    known: dict[int, list[tuple[int, Relation]]] = {}
    for index, relation in relations:
        known.setdefault(relation.relid, []).append((index, relation))
    for message in np.flatnonzero(kind == TRUNCATE):
        position = int(starts[message])
        count = struct.unpack_from(">I", buf.data, position + 1)[0]
        relids = _big_endian(buf, position + 6 + 4 * np.arange(count), 4, ">u4")
        for relid in relids:
            relation = _schema_at(known, int(relid), int(message))
            truncates.append((int(txn[message]), int(message), relation))

    rows = np.flatnonzero((kind == INSERT) | (kind == UPDATE) | (kind == DELETE))
    relid_of = _big_endian(buf, starts[rows] + 1, 4, ">u4").astype(np.int64)
    changes = []
    for relid, epochs in known.items():
        mine = rows[relid_of == relid]
        positions = [index for index, _ in epochs]
        epoch_of = np.searchsorted(positions, mine, side="right") - 1
        if len(mine) and epoch_of.min() < 0:
            raise error("POSTGRES_CHANGELOG.RELATION_UNKNOWN", relid=relid)
        for number, (_, relation) in enumerate(epochs):
            chosen = mine[epoch_of == number]
            if len(chosen):
                changes.append(_changes(buf, starts, kind, txn, chosen, relation))
    unknown = np.setdiff1d(relid_of, np.array(list(known), dtype=np.int64))
    if len(unknown):
        raise error("POSTGRES_CHANGELOG.RELATION_UNKNOWN", relid=int(unknown[0]))
    return Decoded(commit_lsn, commit_us, xid, end_lsn, changes, truncates)


def _schema_at(known: dict[int, list[tuple[int, Relation]]], relid: int, index: int) -> Relation:
    before = [relation for position, relation in known.get(relid, []) if position < index]
    if not before:
        raise error("POSTGRES_CHANGELOG.RELATION_UNKNOWN", relid=relid)
    return before[-1]


def _changes(
    buf: np.ndarray,
    starts: np.ndarray,
    kind: np.ndarray,
    txn: np.ndarray,
    rows: np.ndarray,
    relation: Relation,
) -> Changes:
    op = kind[rows]
    tag_at = starts[rows] + 5
    tag = buf[tag_at]
    width = len(relation.columns)
    has_old = (tag == KEY) | (tag == OLD)
    old = _tuples(buf, tag_at + 1, has_old, width)
    new_at = np.where(has_old, old.end + 1, tag_at + 1)
    has_new = op != DELETE
    if np.any(has_new & (buf[np.where(has_old, old.end, tag_at)] != NEW)):
        raise error("POSTGRES_CHANGELOG.MALFORMED_MESSAGE", relation=relation.qualified)
    new = _tuples(buf, new_at, has_new, width)
    return Changes(
        relation,
        rows.astype(np.int64),
        txn[rows],
        op,
        np.where(has_old, tag, 0).astype(np.uint8),
        Image(old.kinds, old.values),
        Image(new.kinds, new.values),
    )


@dataclass(frozen=True)
class _Parsed:
    kinds: list[np.ndarray]
    values: list[pa.Array]
    end: np.ndarray


def _tuples(buf: np.ndarray, at: np.ndarray, present: np.ndarray, width: int) -> _Parsed:
    """TupleData at ``at`` for the rows where ``present``: each column's kind and text, and
    where each tuple ends. Absent rows get kind 0 and NULL."""
    count = _big_endian(buf, at[present], 2, ">u2")
    if np.any(count != width):
        raise error("POSTGRES_CHANGELOG.MALFORMED_MESSAGE", relation=f"{width} columns")
    position = np.where(present, at + 2, 0)
    kinds, values = [], []
    for _ in range(width):
        column_kind = np.where(present, buf[position], 0).astype(np.uint8)
        text = column_kind == TEXT
        length = np.zeros(len(position), dtype=np.int64)
        length[text] = _big_endian(buf, position[text] + 1, 4, ">u4")
        values.append(_strings(buf, position + 5, length, text))
        kinds.append(column_kind)
        position = np.where(present, position + 1 + np.where(text, 4 + length, 0), 0)
    return _Parsed(kinds, values, position)


def _strings(buf: np.ndarray, start: np.ndarray, length: np.ndarray, valid: np.ndarray) -> Any:
    """The byte ranges ``start``/``length`` of ``buf`` as an Arrow string array (NULL where
    not ``valid``), no Python string per value: Arrow string views into ``buf`` (16 bytes a
    value, computed with numpy), which Arrow's cast copies out in C++; where this pyarrow
    has no views, one gather of every byte."""
    count = len(length)
    if not np.any(valid):
        return pa.nulls(count, pa.string())
    length = np.where(valid, length, 0)
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    if _HAS_VIEWS and len(buf) < 2**31:
        views = np.zeros((count, 16), np.uint8)
        views[:, :4] = length.astype("<i4").view(np.uint8).reshape(count, 4)
        windows = np.lib.stride_tricks.sliding_window_view(buf, _PADDING)
        gathered = windows[np.where(valid, start, 0), :12]  # the padding keeps it in ``buf``
        gathered[_INLINE[None, :] >= np.minimum(length, 12)[:, None]] = 0
        inline = length <= 12
        views[inline, 4:] = gathered[inline]
        spilled = ~inline
        views[spilled, 4:8] = gathered[spilled, :4]  # the prefix; buffer 0, then the offset
        views[spilled, 12:] = start[spilled].astype("<i4").view(np.uint8).reshape(-1, 4)
        buffers = [validity, pa.py_buffer(views), pa.py_buffer(buf)]
        viewed = pa.Array.from_buffers(pa.string_view(), count, buffers)
        total = int(length.sum())
        return viewed.cast(pa.string() if total < 2**31 - 1 else pa.large_string())
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        index = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
        data = buf[index]
    else:
        data = np.zeros(0, np.uint8)
    small = total < 2**31 - 1
    kind = pa.string() if small else pa.large_string()
    offsets = offsets.astype(np.int32) if small else offsets
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, count, buffers)


_HAS_VIEWS = hasattr(pa, "string_view")  # pyarrow 16+
_INLINE = np.arange(12)
_PADDING = 16
