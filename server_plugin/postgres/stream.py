"""The ``postgres_changelog`` source's stream: offsets are commit LSNs, a micro-batch's end
is planned from the slot's Begin and Commit messages, the first micro-batch pins a first
copy, and the slot moves on only in ``commit`` (see ``source``'s docstring for why this is
exactly once)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.changefeed.partitions import default_parallelism
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.postgres.catalog import slot_state
from spark_cdc.server_plugin.postgres.changes import served
from spark_cdc.server_plugin.postgres.connection import Session, session
from spark_cdc.server_plugin.postgres.options import PostgresOptions
from spark_cdc.server_plugin.postgres.pgoutput import Decoded, decode
from spark_cdc.server_plugin.postgres.reads import (
    CopyRange,
    LogRange,
    TableReader,
    after_start,
    flushed,
    lsn_text,
    messages,
)
from spark_cdc.server_plugin.postgres.visibility import seen_by_copy

OFFSET_VERSION = 1


class PostgresStreamReader(TableReader, DataSourceStreamReader):
    """Offsets: ``{"sourceVersion", "slot", "lsn": the last commit LSN served (None until
    the first micro-batch pins it), "previousUs": its commit time as served, "copied": the
    first copy's visibility, "snapshot": the exported snapshot (the first batch's end
    only)}``; a log batch's end also names what it reads: ``after`` and ``afterUs`` (its
    start's ``lsn`` and ``previousUs``) and ``readTo`` (where its last commit record ends)."""

    def __init__(self, options: PostgresOptions, schema: StructType) -> None:
        super().__init__(options, schema)
        self.position: dict[str, Any] | None = None  # 4.0/4.1 call latestOffset() bare
        self._holder: Session | None = None  # keeps the copy's snapshot exported

    def _offset(
        self, lsn: int | None, previous_us: int | None, copied: str | None, **more: Any
    ) -> dict[str, Any]:
        return {
            "sourceVersion": OFFSET_VERSION,
            "slot": self.options.slot,
            "lsn": lsn,
            "previousUs": previous_us,
            "copied": copied,
            **more,
        }

    def _checked(self, offset: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(offset, dict) or offset.get("sourceVersion") != OFFSET_VERSION:
            raise error(
                "POSTGRES_CHANGELOG.INVALID_OFFSET",
                offset=json.dumps(offset, sort_keys=True),
                sourceVersion=OFFSET_VERSION,
            )
        if offset.get("slot") != self.options.slot:
            raise error(
                "POSTGRES_CHANGELOG.OFFSET_FROM_ANOTHER_SLOT",
                checkpointSlot=offset.get("slot"),
                slot=self.options.slot,
            )
        return offset

    def initialOffset(self) -> dict[str, Any]:  # pinned by the first micro-batch's end
        return self._offset(None, None, None)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        with self.errors_named():
            begin = self._checked(start) if start is not None else self.position
            end = self._advance(begin or self.initialOffset())
            self.position = end
            return end

    def _advance(self, start: dict[str, Any]) -> dict[str, Any]:
        """The next micro-batch's end: the whole transactions after ``start`` within
        ``maxChangesPerTrigger``, listed by their Begin and Commit messages."""
        with session(self.options.connection) as s:
            state = slot_state(s, self.options.slot)
            if state is None:
                raise error("POSTGRES_CHANGELOG.SLOT_NOT_FOUND", slot=self.options.slot)
            if start["lsn"] is None:
                return self._pinned(state.confirmed)
            if state.confirmed > start["lsn"]:
                raise error(
                    "POSTGRES_CHANGELOG.CHANGES_LOST",
                    slot=self.options.slot,
                    lsn=start["lsn"],
                    confirmed=state.confirmed,
                )
            # Spark asks for a batch after ``start`` once the batch ending there is done,
            # but commits that end to the source only when the next batch starts: moved on
            # now, the slot's next messages are new ones (else a backlog past
            # maxChangesPerTrigger would hide behind the served batch, and the stream stall).
            self._move_slot(s, state.confirmed, start["lsn"])
            txns = self._transactions(s)
        later = np.flatnonzero(txns.commit_lsn > start["lsn"])
        if len(later) == 0:
            return start
        copied = start["copied"]
        chosen = served(
            txns, start["lsn"], None, seen_by_copy(copied, txns.xid), start["previousUs"]
        )
        times = chosen.commit_us[chosen.keep]
        previous = int(times[-1]) if len(times) else start["previousUs"]
        last = int(later[-1])
        return self._offset(
            int(txns.commit_lsn[last]),
            previous,
            copied,
            readTo=int(txns.end_lsn[last]),
            after=start["lsn"],  # the batch's own start: an end says what it reads
            afterUs=start["previousUs"],
        )

    def _transactions(self, s: Session) -> Decoded:
        """The slot's next transactions (about ``maxChangesPerTrigger`` changes), from
        their Begin and Commit messages alone."""
        marks = s.arrow(
            f"SELECT data FROM {messages(self.options, None, self.options.max_changes)} "
            "WHERE get_byte(data, 0) IN (66, 67)",  # Begin, Commit
            f"read slot {self.options.slot}",
        )
        return decode(marks.column("data"))

    def _pinned(self, confirmed: int) -> dict[str, Any]:
        """The first micro-batch's end: the slot's position, and with a first copy the
        snapshot it is read in, held open here until the batch is committed."""
        if not self.options.initial_copy:
            return self._offset(after_start(self.options, confirmed), None, None)
        if self._holder is not None:
            self._holder.close()
        holder = Session(self.options.connection)
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin the copy")
        row = holder.rows(
            "SELECT pg_export_snapshot()::text AS name, pg_current_snapshot()::text AS seen, "
            "(pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS wal, "
            "(extract(epoch from clock_timestamp()) * 1000000)::bigint AS at",
            "export a snapshot",
        )[0]
        self._holder = holder
        pinned = self._offset(confirmed, int(row["at"]), row["seen"], snapshot=row["name"])
        return pinned | {"walAt": int(row["wal"])}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        with self.errors_named():
            start, end = self._checked(start), self._checked(end)
            if end["lsn"] is None or end == start:
                return []
            if start["lsn"] is None:
                if "snapshot" not in end:
                    return []
                return self._copy_ranges(end)
            if "after" not in end:  # pinned where a started stream was expected: a restart
                return self._resumed(start, end)
            if end["lsn"] == start["lsn"]:
                return []
            return [
                LogRange(end["after"], end["lsn"], end["afterUs"], end["copied"], end["readTo"])
            ]

    def _resumed(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Spark 4.0/4.1 ask a stream started again from its checkpoint for its latest
        offset without saying where it was, so the reader pinned a start again (``end``).

        With a first copy, no copy is read: this batch serves, from the log after the
        checkpoint's position (``start``), the transactions ``end``'s snapshot saw that
        ``start`` had not served, so that ``end`` means what a first copy's end means
        (everything its snapshot saw is served) and the stream goes on from it, however
        many restarts follow. Without one, the stream goes on from ``start``.

        The slot is at most where ``start`` had served to (Spark commits a batch's end to
        the source when the next batch starts; a pinned ``start`` served what its snapshot
        saw, up to its ``walAt``); ahead of it, changes are gone."""
        if self._holder is not None:
            self._holder.close()
            self._holder = None
        served_to = max(start["lsn"], start.get("walAt", 0))
        if end["lsn"] > served_to:
            raise error(
                "POSTGRES_CHANGELOG.CHANGES_LOST",
                slot=self.options.slot,
                lsn=start["lsn"],
                confirmed=end["lsn"],
            )
        if "snapshot" not in end:
            self.position = start
            return []
        self.position = {**end, "lsn": max(end["lsn"], start["lsn"])}
        if end["walAt"] <= start["lsn"]:
            return []
        with session(self.options.connection) as s:
            flushed(s, end["walAt"])  # what the snapshot saw is in the log the slot reads
        after, upto = start["lsn"], end["walAt"]
        copied = start["copied"]
        return [LogRange(after, upto, start["previousUs"], copied, upto, seen=end["copied"])]

    def _copy_ranges(self, end: dict[str, Any]) -> list[InputPartition]:
        """Each table's pages in up to ``parallelism`` ranges."""
        with session(self.options.connection) as s:
            sizes = [
                int(
                    s.rows(
                        "SELECT (pg_relation_size($1::regclass) / "
                        "current_setting('block_size')::int)::bigint AS pages",
                        f"size {info.qualified}",
                        (info.quoted,),
                    )[0]["pages"]
                )
                for info in self.infos
            ]
        parallelism = self.options.common.parallelism or default_parallelism()
        ranges: list[InputPartition] = []
        for table, pages in enumerate(sizes):
            count = max(1, min(parallelism, pages))
            step = -(-max(pages, 1) // count)
            firsts = [i * step for i in range(count)]
            lasts: list[int | None] = [*firsts[1:], None]
            ranges += [
                CopyRange(table, end["snapshot"], first, last, end["lsn"], end["previousUs"])
                for first, last in zip(firsts, lasts, strict=True)
            ]
        return ranges

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The database's newest LSN and the WAL the slot keeps on its disk (Spark 4.2+
        shows it as the source's ``latestOffset`` in the progress)."""
        try:
            with session(self.options.connection) as s:
                state = slot_state(s, self.options.slot)
        except Exception:
            return None
        return None if state is None else {"lsn": state.current, "retainedWalBytes": state.retained}

    def commit(self, end: dict[str, Any]) -> None:
        with self.errors_named():
            end = self._checked(end)
            if "snapshot" in end and self._holder is not None:
                self._holder.close()  # the copy is committed: its snapshot may go
                self._holder = None
            if end["lsn"] is None:
                return
            with session(self.options.connection) as s:
                state = slot_state(s, self.options.slot)
                if state is not None:
                    self._move_slot(s, state.confirmed, end["lsn"])

    def _move_slot(self, s: Session, confirmed: int, lsn: int) -> None:
        """The slot moved on to ``lsn`` (never back)."""
        if confirmed < lsn:
            s.rows(
                "SELECT (pg_replication_slot_advance($1, $2::pg_lsn)).slot_name::text AS s",
                f"advance replication slot {self.options.slot}",
                (self.options.slot, lsn_text(lsn)),
            )

    def stop(self) -> None:
        if self._holder is not None:
            self._holder.close()
