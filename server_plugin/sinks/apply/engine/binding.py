"""The state bound to its target: what each batch checks before it writes anything, so
that what a person did by hand to a target or its state is refused by name instead of
answered with a partial mirror, a history with two open versions of a key, or a batch
merged into another table.

The state is a record of the changes applied to one table. Each of its batch commits says
which (``Bound``: the target's own id and how far its history went after the batch),
inside the outcome it already carries, so nothing else is written and the newest of its
commits answers. The rules, the same for every format:

- the state has history and the target is gone: ``TARGET_MISSING`` (a new table made by
  this batch would hold only what the batch brings);
- the target is another table than the one the state describes (another id), or an older
  copy of it (a version before the last one the state applied): ``TARGET_REPLACED``;
- the state is gone and the target holds batches apply_changes applied, other than the
  batch being applied again after a stop between its two commits (``batch``' order: the
  target is committed first): ``STATE_MISSING``. Without the state, a late change or one
  of a deleted key cannot be placed (type 1 keeps no sequences in the target, type 2
  would open a second version of a key), so even a mirror is not rebuilt from it.

A full refresh (``spec.full_refresh``) is the way out of each: it rebuilds both from the
feed's start, and is not checked. Its writer is a generation of its own (``REFRESH``): a
stream's full refresh starts a new checkpoint, which names the generation
(``checkpoints``), so its batches are told from the old ones' and later runs of the stream
go on as it. A table without a marker of a refresh's writer is rebuilt by its first batch
(``rebuilds``), each table on its own: a refresh stopped between its two commits finishes
the state's when run again.

A snapshot writer's refusals are the ``SNAPSHOT_`` conditions. Its full refresh is a
generation too, applying the source's snapshots from the first: the writer's status finds
the generation from the state's newest commit, and refuses a target a refresh rebuilt
whose state it did not (``snapshot_reads``).

Another writer's ordinary commits (compaction, vacuum, deletes, updates, appends) keep
the id and move the version forward: never refused. A state written before this check
existed says nothing of its target: it is bound by its next batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.spec import SNAPSHOT_WRITER_PREFIX, ApplySpec

# Where a state commit's outcome (JSON) says which target it describes.
TARGET_FIELD = "target"
# Between a stream's writer id and the generation a full refresh of it starts.
REFRESH = ".refresh-"


def rebuilds(spec: ApplySpec, batch: int, marked: int | None, last: int | None) -> bool:
    """Whether the writer's batch ``batch`` rebuilds a table whose marker of the writer is
    ``marked`` (``last``: the latest marker of either table): the writer is a full
    refresh's and this is its first batch, not yet committed to the table. A refresh's
    later batch rebuilds nothing: a table gone by then was deleted by hand."""
    return refreshing(spec) and marked is None and (last is None or last >= batch)


def refreshing(spec: ApplySpec) -> bool:
    """Whether the writer is a full refresh's (a batch call's, or a stream's generation)."""
    return spec.full_refresh or REFRESH in spec.app_id


def check_kind(spec: ApplySpec, state_outcomes: Iterable[str]) -> None:
    """Refuse a change feed's batch into a target snapshots wrote, and the other way
    round: a change feed's sequence and a snapshot's version are two scales, and a key's
    changes on both could not be ordered."""
    kinds = {True: "apply_changes_from_snapshot", False: "apply_changes (a change feed)"}
    for outcome in state_outcomes:
        applied = json.loads(outcome)
        writer = str(applied.get("app_id", ""))
        if writer and writer.startswith(SNAPSHOT_WRITER_PREFIX) != spec.from_snapshots:
            raise error(
                "APPLY_CHANGES.SOURCE_KIND_MISMATCH",
                path=spec.target,
                found=kinds[not spec.from_snapshots],
                evidence=f"batch {applied.get('batch', 0)} of writer {writer}",
                asked=kinds[spec.from_snapshots],
            )


@dataclass(frozen=True)
class Bound:
    """The target a state describes: its table id (Delta's ``metaData.id``, Iceberg's
    ``table-uuid``) and how far its history went once the batch was applied (Delta's
    version, Iceberg's last sequence number)."""

    table_id: str
    version: int

    def within(self, outcome: str) -> str:
        """``outcome`` (a batch's JSON) with this target named in it."""
        return json.dumps({**json.loads(outcome), TARGET_FIELD: [self.table_id, self.version]})

    @classmethod
    def of(cls, outcome: str | None) -> Bound | None:
        """The target a state commit's ``outcome`` names (None: it names none)."""
        if not outcome:
            return None
        named = json.loads(outcome).get(TARGET_FIELD)
        return None if named is None else cls(str(named[0]), int(named[1]))

    @classmethod
    def newest(cls, outcomes: Iterable[str]) -> Bound | None:
        """The target the newest of a state's ``outcomes`` (the newest first) that names
        one names (None: none does)."""
        return next((b for b in map(cls.of, outcomes) if b is not None), None)


def check(
    spec: ApplySpec,
    batch: int,
    found: Bound | None,
    state_outcomes: Iterable[str] | None,
    target_outcomes: Callable[[], Iterable[str]],
) -> None:
    """Refuse the writer's batch ``batch`` when the target (``found``: its id and version
    now; None: there is none) is not the one its state describes, or the state of a
    target holding batches apply_changes applied is gone. ``state_outcomes``: the
    outcomes the state's commits recorded, the newest first (None: there is no state);
    ``target_outcomes``: the target's, read only when the state is gone."""
    target, state = spec.target, spec.state
    # A snapshot writer's conditions are its own (their way out is a refresh all the same).
    snapshots = spec.from_snapshots
    if state_outcomes is not None and found is None:
        missing = (
            "APPLY_CHANGES.SNAPSHOT_TARGET_MISSING" if snapshots else "APPLY_CHANGES.TARGET_MISSING"
        )
        raise error(missing, target=target, state=state)
    if found is None:
        return
    if state_outcomes is None:
        for outcome in target_outcomes():
            applied = json.loads(outcome)
            writer, number = applied.get("app_id"), int(applied.get("batch", 0))
            if (writer, number) != (spec.app_id, batch):  # not this batch's own first commit
                evidence = f"batch {number} of writer {writer}"
                raise error(
                    "APPLY_CHANGES.SNAPSHOT_STATE_MISSING"
                    if snapshots
                    else "APPLY_CHANGES.STATE_MISSING",
                    target=target,
                    state=state,
                    evidence=evidence,
                )
        return
    bound = Bound.newest(state_outcomes)
    if bound is None:
        return
    problem = None
    if found.table_id != bound.table_id:
        problem = f"it is table {found.table_id}, and the state describes {bound.table_id}"
    elif found.version < bound.version:
        problem = (
            f"it is at version {found.version}, before version {bound.version} that the "
            "state last applied (restored from an older copy, or its log cut short)"
        )
    if problem is not None:
        replaced = (
            "APPLY_CHANGES.SNAPSHOT_TARGET_REPLACED"
            if snapshots
            else "APPLY_CHANGES.TARGET_REPLACED"
        )
        raise error(replaced, target=target, state=state, problem=problem)
