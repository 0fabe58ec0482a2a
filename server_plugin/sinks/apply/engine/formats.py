"""What the engine asks of a target's table format, and nothing more: a Delta target
(``apply.delta.format``) and an Iceberg one (``apply.iceberg.format``) each provide these
operations, and the engine (``batch``) names no format. A third format is one folder
beside those two providing ``TableFormat``; docs/contributing.md#layers lists the operations.

Every commit a format makes carries the batch's marker: the writer's id and the batch's
number (a Delta ``txn`` action, an Iceberg snapshot summary), with the batch's outcome
(JSON, ``changes.described``), so that a batch applied again is found (``last_batch``) and
skipped, and what a writer did is read back (``outcomes``). ``version`` None commits
without a marker (a compaction). ``memory`` is what a format keeps of the state between a
stream's micro-batches in the driver's Python process (Delta's ``StateMemory``; None: it
keeps nothing).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.sinks.apply.engine.binding import Bound
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout
from spark_cdc.server_plugin.sinks.apply.engine.history import Resolution
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.engine.staged import Staged


@dataclass(frozen=True)
class Tables:
    """The target and the state a batch goes to (None: not made yet; the batch's first
    commit makes it), and where the format found them (an Iceberg catalog; None for
    tables at paths)."""

    target: Any
    state: Any
    catalog: Any = None


class TableFormat(Protocol):
    """One table format's tables, as the engine uses them."""

    # Finding the tables, checked before anything is written.
    def tables(self, spec: ApplySpec, target_schema: pa.Schema, state_schema: pa.Schema) -> Tables:
        """The spec's target and state, each checked against the schema a batch gives it
        (every refusal of an existing table comes here, named)."""
        ...

    def existing_state(self, spec: ApplySpec) -> Any | None:
        """The state as it is, unchecked (None: none yet): what its commits recorded."""
        ...

    def existing_target(self, spec: ApplySpec) -> Any | None:
        """The target as it is, unchecked (None: none yet): what a snapshot is compared
        with (``snapshot_reads``)."""
        ...

    def memory(self) -> Any:
        """A stream writer's copy of the state, kept between its micro-batches (None: the
        format reads the state every batch)."""
        ...

    def schema(self, table: Any) -> pa.Schema:
        """The table's columns as Arrow types them."""
        ...

    def layout(self, state: Any) -> Layout:
        """How the state is laid out by key bucket (``buckets``)."""
        ...

    # Markers and identity.
    def last_batch(self, table: Any, app_id: str) -> int | None:
        """The newest batch the writer ``app_id`` committed to the table."""
        ...

    def outcomes(self, table: Any, spec: ApplySpec, limit: int | None) -> Iterator[str]:
        """The outcomes the table's ``limit`` newest commits recorded (all: None), the
        newest first."""
        ...

    def identity(self, table: Any) -> Bound:
        """The table's own id and how far its history goes (``binding``)."""
        ...

    def read_point(self, table: Any) -> tuple[str, int]:
        """The table as a task read it: its id and its current commit's. The commit of a
        batch its tasks resolved finds the state at the same one, else another writer
        committed in between."""
        ...

    # Reading the state.
    def state_rows(
        self, state: Any, spec: ApplySpec, keys: pa.Table | None, memory: Any
    ) -> pa.Table:
        """The state's changes of ``keys`` (a superset: a change of another key resolves
        to no change) and its truncate; all of it when ``keys`` is None."""
        ...

    def share_rows(
        self,
        state: Any,
        spec: ApplySpec,
        keys: pa.Table,
        earliest: pa.Scalar | None,
        buckets: np.ndarray | None,
    ) -> pa.Table:
        """A task's share of the state: its ``keys``' changes (exactly) and the truncate,
        read from the files of its ``buckets`` that may hold them
        (``state_rows.rows_in_files``); ``earliest``: see ``state_rows.supersedes``."""
        ...

    # Files the tasks write before the commit names them.
    def stage(
        self,
        spec: ApplySpec,
        tables: Tables,
        resolution: Resolution,
        schemas: tuple[pa.Schema, pa.Schema],
        rebuilds: bool,
    ) -> tuple[Resolution, Staged]:
        """A task's rows written as files of the tables where they can be, for the
        commit to add; what is staged is left out of the resolution returned.
        ``schemas``: the target's and the state's for the batch, should the commit make
        them; ``rebuilds``: the batch is a full refresh's first (the commit replaces
        every row of both tables)."""
        ...

    def discard(self, spec: ApplySpec, staged: Staged, held: bool) -> None:
        """The files ``staged`` deleted: all of them, or with ``held`` those no table
        holds (a batch that failed after its target's commit keeps the target's)."""
        ...

    # The target's commits: one each, carrying the marker.
    def create_target(
        self,
        spec: ApplySpec,
        tables: Tables,
        schema: pa.Schema,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
    ) -> None:
        """The target made by its first commit, holding ``rows`` and the ``staged``
        files."""
        ...

    def replace_target(
        self,
        spec: ApplySpec,
        target: Any,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
    ) -> None:
        """Every row of the target replaced by ``rows`` and the ``staged`` files (a full
        refresh's first batch; older versions stay readable)."""
        ...

    def change_target(
        self,
        spec: ApplySpec,
        target: Any,
        version: int,
        resolution: Resolution,
        marker: str,
        staged: Staged,
    ) -> None:
        """The batch's change of the target: the rows ``resolution`` replaces taken out,
        its new rows and the ``staged`` files added (``history.Resolution`` says which)."""
        ...

    def target_after(self, spec: ApplySpec, tables: Tables) -> Any:
        """The target as its commit left it (what the state's commit names)."""
        ...

    # The state's commits.
    def create_state(
        self,
        spec: ApplySpec,
        tables: Tables,
        schema: pa.Schema,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
        memory: Any,
    ) -> None:
        """The state made by its first commit, holding ``rows`` and the ``staged``
        files, laid out by key bucket when the client planned the batch (``buckets``)."""
        ...

    def replace_state(
        self,
        spec: ApplySpec,
        state: Any,
        version: int | None,
        rows: pa.Table,
        marker: str | None,
        staged: Staged,
        memory: Any,
    ) -> None:
        """The state's rows replaced by ``rows`` and the ``staged`` files (a truncate, a
        refresh, a compaction)."""
        ...

    def append_state(
        self,
        spec: ApplySpec,
        state: Any,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
        memory: Any,
    ) -> None:
        """``rows`` and the ``staged`` files appended to the state."""
        ...

    def small_files(self, state: Any) -> int:
        """How many of the state's files batches appended since it was last compacted."""
        ...

    def merge_small_files(self, state: Any, memory: Any) -> None:
        """The state's small files merged, in one commit without a marker that changes
        no row (merging twice keeps the same changes)."""
        ...
