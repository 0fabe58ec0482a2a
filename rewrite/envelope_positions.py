"""Each envelope format's own log position as one ``_commit_version`` (a long that sorts as
the source's log does), built from stock column functions.

Why a position per change and not per transaction: a transaction may change one row
several times, and Spark's changelog contract (and ``apply_changes(sequence_by=
"_commit_version")``, which refuses two different changes of a key with one sequence as
``APPLY_CHANGES.DUPLICATE_SEQUENCE``) allows one change of a row per version. The
PostgreSQL source folds such changes, because it reads whole transactions; a decoder of a
Kafka topic sees events one at a time (a stream's micro-batch may end inside a
transaction), so it cannot fold without state. Each change therefore gets the position of
its own event in the source's log, so the changes of one transaction are distinct, in their
order, and every change of a later transaction sorts after them. An update's pre- and
post-image come from one event and share its version.

The encodings (all checked in the query: a position outside them is ``NO_POSITION``, never
a wrong order):

- Debezium PostgreSQL: ``source.lsn``, the change's own LSN. Changes of one row sort by it
  in commit order, because PostgreSQL holds a changed row's lock until its transaction
  ends: a later transaction's change of that row is logged after the earlier's commit.
- Debezium MySQL: ``file number * 2^40 + pos + row`` (``mysql-bin.000003`` is file 3;
  ``pos`` the event's offset in it, ``row`` the row inside the event, which is fewer than
  the event's bytes, so ``pos + row`` stays below the next event's ``pos``).
- Maxwell: ``xid * 2^24 + xoffset`` (the transaction's last row carries ``commit`` and no
  ``xoffset``: it sorts last in its transaction).
- Canal: ``id * 2^20 + index`` of the row in the message's ``data`` array.
- GoldenGate: ``pos``, a trail's sequence number followed by a 10-digit byte offset (RBA):
  ``sequence * 2^34 + rba``.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql.connect import functions as F

FILE_SHIFT = 40
XOFFSET_BITS = 24
CANAL_INDEX_BITS = 20
RBA_DIGITS = 10
RBA_BITS = 34


def _fits(value: Column, bits: int) -> Column:
    return (value >= 0) & (value < F.lit(1 << bits))


def mysql_file_number(source: Column) -> Column:
    """The binlog file's number (``mysql-bin.000003``: 3) of a Debezium MySQL event."""
    number = F.substring_index(source.getField("file"), ".", -1)
    return F.when(number.rlike("^[0-9]{1,18}$"), number.cast("long"))


def mysql_offset(source: Column) -> Column:
    """The event's position in its binlog file plus the row's index in the event."""
    return source.getField("pos") + F.coalesce(source.getField("row").cast("long"), F.lit(0))


def debezium_version(source: Column, file_number: Column, offset: Column) -> tuple[Column, Column]:
    """``(version, problem)`` from a Debezium ``source`` block (and its MySQL file number and
    offset, computed once); ``problem`` is NULL when the version is usable, else why not."""
    connector = source.getField("connector")
    lsn = source.getField("lsn")
    mysql = file_number * F.lit(1 << FILE_SHIFT) + offset
    version = F.when(connector == "postgresql", lsn).when(connector == "mysql", mysql)
    problem = (
        F.when(connector.isNull(), F.lit("its source block names no connector"))
        .when((connector == "postgresql") & lsn.isNull(), F.lit("source.lsn is missing"))
        .when(
            (connector == "mysql") & (file_number.isNull() | offset.isNull()),
            F.lit("source.file or source.pos is missing"),
        )
        .when(
            (connector == "mysql") & ~(_fits(file_number, 63 - FILE_SHIFT) & _fits(offset, 40)),
            F.lit("its binlog file number or position is beyond what one long holds"),
        )
        .when(
            ~connector.isin("postgresql", "mysql"),
            F.concat(F.lit("connector "), connector, F.lit(" has no position read here")),
        )
    )
    return version, problem


def maxwell_version(xid: Column, xoffset: Column, commit: Column) -> tuple[Column, Column]:
    last = F.lit((1 << XOFFSET_BITS) - 1)
    offset = F.coalesce(xoffset, F.when(commit, last))
    version = xid * F.lit(1 << XOFFSET_BITS) + offset
    problem = (
        F.when(xid.isNull(), F.lit("xid is missing"))
        .when(offset.isNull(), F.lit("xoffset is missing on a row that does not end its commit"))
        .when(
            ~(_fits(xid, 63 - XOFFSET_BITS) & _fits(offset, XOFFSET_BITS)),
            F.lit("its xid or xoffset is beyond what one long holds"),
        )
    )
    return version, problem


def canal_version(message_id: Column, index: Column) -> tuple[Column, Column]:
    version = message_id * F.lit(1 << CANAL_INDEX_BITS) + index
    problem = F.when(message_id.isNull(), F.lit("id is missing")).when(
        ~(_fits(message_id, 63 - CANAL_INDEX_BITS) & _fits(index, CANAL_INDEX_BITS)),
        F.lit("its id or its number of rows is beyond what one long holds"),
    )
    return version, problem


def ogg_version(pos: Column) -> tuple[Column, Column]:
    digits = F.when(pos.rlike(r"^[0-9]{1,38}$"), pos)
    length = F.length(digits)
    rba = F.when(length > RBA_DIGITS, F.substring(digits, -RBA_DIGITS, RBA_DIGITS))
    rba = F.coalesce(rba, digits).cast("long")
    # The digits before the RBA are the trail's sequence number (none: 0).
    sequence = F.when(
        length > RBA_DIGITS, F.regexp_replace(digits, f"[0-9]{{{RBA_DIGITS}}}$", "")
    ).otherwise(F.lit("0"))
    sequence_number = sequence.cast("decimal(38,0)")
    version = sequence_number.cast("long") * F.lit(1 << RBA_BITS) + rba
    problem = F.when(digits.isNull(), F.lit("pos is missing or not a number")).when(
        sequence_number >= F.lit(1 << (63 - RBA_BITS)),
        F.lit("its trail sequence number is beyond what one long holds"),
    )
    return version, problem
