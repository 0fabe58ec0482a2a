"""Streaming net changes per row id: the code the stateful operator runs on the server.

The client ships this module with the plan, pickled by value, so a server needs nothing
from this package. It sees rows of a fixed shape built by ``rewrite.net_changes``: the row
id key, the change type, commit version and commit time, a carry-over image, and the whole
input row as JSON text (the operator never needs the input's types; the client turns the
text back into the input's columns after the operator).

Each call gets one row id's events of one micro-batch, and a micro-batch holds whole
commits, so the row-level passes (carry-over removal, update detection) can run right here,
per commit, before netting. Running them here rather than in a separate aggregate keeps
one stateful operator and one timing on every server version: an aggregate in front would
hand each commit over one micro-batch late (so each micro-batch would be netted on its
own), and 4.0 cannot place ``applyInPandasWithState`` after an aggregate at all.

State per row id: the first and the last surviving event (JSON row + change type), and one
event-time timer at the last event's commit time minus 1 ms. The timer fires in the first
micro-batch whose watermark has reached that commit, which is the one after the commit
arrived, or the no-data micro-batch Spark runs once a source has nothing more. Then the
net change is emitted and the state cleared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

# The operator's code is pickled by value and runs where this package may be absent; the
# vocabulary's strings travel with it as values.
from spark_cdc.server_plugin.errors import PARAMETERS_PREFIX
from spark_cdc.server_plugin.vocabulary import DELETE, INSERT, UPDATE_POSTIMAGE, UPDATE_PREIMAGE

PRE_EVENTS = (DELETE, UPDATE_PREIMAGE)
POST_EVENTS = (INSERT, UPDATE_POSTIMAGE)

# The operator's output (the client decodes ``row`` and replaces ``_change_type``) and its
# state, as DDL.
OUTPUT_SCHEMA = "row string, change string"
ROW, CHANGE = "row", "change"
PANDAS_STATE_SCHEMA = "first_row string, first_change string, last_row string, last_change string"
TWS_STATE_SCHEMA = "row string, change string"


class Event(NamedTuple):
    version: Any
    change: str
    row: str
    image: str | None  # carry-over test value: JSON of the row version or of the data
    commit_ms: int

    @property
    def order(self) -> tuple[Any, int]:
        """Spark's order: by commit version, pre-events before post-events."""
        return (self.version, 0 if self.change in PRE_EVENTS else 1)


@dataclass(frozen=True)
class NetRules:
    carryover_removal: bool
    by_row_version: bool  # carry-over test: Spark's row-version rule, else same row image
    update_detection: bool
    compute_updates: bool
    multiple_changes_message: str  # the client's CHANGELOG_CONTRACT_VIOLATION text

    def surviving(self, events: Iterable[Event]) -> list[Event]:
        """The events left after the row-level passes, in Spark's order."""
        by_version: dict[Any, list[Event]] = {}
        for event in events:
            by_version.setdefault(event.version, []).append(event)
        kept: list[Event] = []
        for version, members in by_version.items():
            deletes = sum(e.change == DELETE for e in members)
            inserts = sum(e.change == INSERT for e in members)
            pair = deletes == 1 and inserts == 1
            if self.carryover_removal and pair and self._same_row(members):
                continue
            if self.update_detection and (deletes > 1 or inserts > 1):
                counts = {"version": str(version), "deletes": str(deletes), "inserts": str(inserts)}
                raise ValueError(
                    f"{self.multiple_changes_message}{version} ({deletes} deletes, {inserts} "
                    "inserts); a changelog may hold at most one of each per row id and commit."
                    f"\n{PARAMETERS_PREFIX}{json.dumps(counts, sort_keys=True)}"
                )
            kept.extend(members)
        return sorted(kept, key=lambda e: e.order)

    def _same_row(self, members: list[Event]) -> bool:
        images = [e.image for e in members]
        if self.by_row_version:  # exactly two non-NULL row versions, and equal
            present = [i for i in images if i is not None]
            return len(present) == 2 and present[0] == present[1]
        return len(set(images)) == 1

    def net(self, first: tuple[str, str], last: tuple[str, str]) -> list[tuple[str, str]]:
        """Spark's (existedBefore, existsAfter) matrix over (row, change) pairs."""
        existed_before = first[1] in PRE_EVENTS
        exists_after = last[1] in POST_EVENTS
        if existed_before and exists_after:
            pre, post = (
                (UPDATE_PREIMAGE, UPDATE_POSTIMAGE) if self.compute_updates else (DELETE, INSERT)
            )
            return [(first[0], pre), (last[0], post)]
        if exists_after:
            return [(last[0], INSERT)]
        if existed_before:
            return [(first[0], DELETE)]
        return []


def _timer_ms(event: Event) -> int:
    # Timers fire once strictly below the watermark; one ms less fires when the watermark
    # reaches the commit itself, so the last commit is released by Spark's no-data batch.
    return int(event.commit_ms) - 1


# ---------------------------------------------------------------------------------------
# transformWithState (servers 4.1+)
# ---------------------------------------------------------------------------------------


def tws_processor(rules: NetRules) -> Any:
    """A ``StatefulProcessor`` for ``transformWithState`` in EventTime mode."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class NetChangesProcessor(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self._handle = handle
            self._first = handle.getValueState("first", TWS_STATE_SCHEMA)
            self._last = handle.getValueState("last", TWS_STATE_SCHEMA)

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            events = rules.surviving(Event(*(r[name] for name in Event._fields)) for r in rows)
            if events:
                if not self._first.exists():
                    self._first.update((events[0].row, events[0].change))
                self._last.update((events[-1].row, events[-1].change))
                for timer in list(self._handle.listTimers()):
                    self._handle.deleteTimer(timer)
                self._handle.registerTimer(_timer_ms(events[-1]))
            return iter(())

        def handleExpiredTimer(
            self, key: Any, timerValues: Any, expiredTimerInfo: Any
        ) -> Iterator[Any]:
            if not self._first.exists():
                return iter(())
            first, last = tuple(self._first.get()), tuple(self._last.get())
            self._first.clear()
            self._last.clear()
            return iter([Row(row=r, change=c) for r, c in rules.net(first, last)])

        def close(self) -> None:
            pass

    return NetChangesProcessor()


# ---------------------------------------------------------------------------------------
# applyInPandasWithState (servers 4.0)
# ---------------------------------------------------------------------------------------


def pandas_function(rules: NetRules) -> Any:
    """The function for ``applyInPandasWithState`` with an event-time timeout."""

    def net_changes(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        if state.hasTimedOut:
            first_row, first_change, last_row, last_change = state.get
            state.remove()
            import pandas as pd

            out = rules.net((first_row, first_change), (last_row, last_change))
            yield pd.DataFrame(out, columns=[ROW, CHANGE], dtype=object)
            return
        fields = list(Event._fields)
        events = rules.surviving(
            Event(*values)
            for frame in frames
            for values in frame[fields].astype(object).itertuples(index=False, name=None)
        )
        if not events:
            return
        first = tuple(state.get[:2]) if state.exists else (events[0].row, events[0].change)
        state.update((*first, events[-1].row, events[-1].change))
        state.setTimeoutTimestamp(_timer_ms(events[-1]))

    return net_changes
