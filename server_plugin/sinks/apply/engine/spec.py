"""What one ``apply_changes`` call asks of the server, fixed on the client and shipped with
the function that applies each batch (pickled with it), and the names of the columns the
client's plan hands over.

The client's plan reduces any feed to one shape, so the server never sees the user's
expressions: the target's columns (keys included, in the target's order), the sequence as
``SEQUENCE_PREFIX<i>`` columns compared in order, ``OP`` saying what each row is, and
``KEY_HASH``, Spark's hash of the keys (``buckets``).
"""

from __future__ import annotations

from dataclasses import dataclass

RESERVED_PREFIX = "__spark_cdc_"  # no feed column may start with it
SEQUENCE_PREFIX = RESERVED_PREFIX + "seq_"
OP = RESERVED_PREFIX + "op"
# Spark's ``hash()`` of the key columns, which the plan adds, and the state's partition
# column made of it (``buckets``).
KEY_HASH = RESERVED_PREFIX + "key_hash"
BUCKET = RESERVED_PREFIX + "bucket"

# What a row of the prepared feed is (``OP``'s values).
UPSERT, DELETE, TRUNCATE = 0, 1, 2

DELETION_VECTORS_PROPERTY = "delta.enableDeletionVectors"

# The target formats ``apply_changes`` writes.
DELTA, ICEBERG = "delta", "iceberg"

# The writer id of every ``apply_changes_from_snapshot`` into a target begins so; a change
# feed's writers never do. A target is written by one kind or the other (``binding``).
SNAPSHOT_WRITER_PREFIX = "spark-cdc-snapshot-"

# Type 2's columns, after the target's own (Spark's and Databricks' names).
START_AT, END_AT = "__START_AT", "__END_AT"


def sequence_column(position: int) -> str:
    return f"{SEQUENCE_PREFIX}{position}"


@dataclass(frozen=True)
class ApplySpec:
    """One target and how changes land in it.

    ``columns`` are the target's columns in order, ``keys`` among them; ``sequence_names``
    the user's names of the sequence's parts (type 2's ``__START_AT``/``__END_AT`` are a
    struct of them when there are several); ``tracked`` the columns whose change opens a
    new type 2 version. ``changelog_pairs``: the feed is a changelog, so a delete and an
    upsert of one key with one sequence value are the two halves of an update, not two
    changes in conflict. ``app_id`` names the writer in the tables' idempotency markers:
    a stream's is derived from its checkpoint location, so a restarted stream finds what
    it already committed. ``tombstone_retention_ms``: how long a deleted key's sequence is
    remembered (None: for ever).
    """

    target: str
    state: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    sequence_names: tuple[str, ...]
    scd_type: int
    tracked: tuple[str, ...]
    ignore_null_updates: bool
    changelog_pairs: bool
    schema_evolution: bool
    app_id: str
    tombstone_retention_ms: int | None = None
    storage_options: tuple[tuple[str, str], ...] = ()
    # Type 1's state is appended to; past this many files it is compacted (each key's
    # changes rewritten to those that still decide it), so reading it stays bounded.
    compact_after_files: int = 64
    # The catalog's name of the target, when it was given by name: its location must then
    # hold a Delta table already (never made there by the first batch).
    target_name: str | None = None
    # The properties and partition columns of a target the first batch makes (Spark's
    # ``create_streaming_table`` names); deletion vectors only when the properties turn them
    # on (``deletion_vectors``). An existing target keeps its own; partition columns that
    # differ are refused.
    table_properties: tuple[tuple[str, str], ...] = ()
    partition_cols: tuple[str, ...] = ()
    # The client's plan partitioned the feed by key (every change of a key in one task), so
    # each task resolves its share against the state and the commit only writes; a feed
    # with truncates is not (a truncate ends every key): its commit resolves it whole.
    partitioned_by_key: bool = False
    # How many key buckets a state the first batch makes is laid out in (``buckets``): the
    # tasks the plan splits the feed in.
    key_buckets: int = 0
    # The target's table format: "delta" (``target`` and ``state`` are paths) or "iceberg"
    # (they are table names in the pyiceberg catalog ``catalog``'s properties describe).
    target_format: str = DELTA
    catalog: tuple[tuple[str, str], ...] = ()
    # Rebuild the target and its state from this feed (its start): a table without this
    # writer's marker is replaced by the batch resolved against no state, in one commit,
    # unchecked against the state's record of its target (``binding``).
    full_refresh: bool = False
    # A stream's checkpoint location: a full refresh sets it aside, and the new one names
    # the writer generation the stream goes on as (``checkpoints``).
    checkpoint: str | None = None
    # ``apply_changes_from_snapshot``: the snapshot's version, which is the writer's batch
    # number, and the writer's last batch in the state when its changes were computed (-1:
    # none), which must still be the last when they are committed (``batch``).
    snapshot_version: int | None = None
    snapshot_base: int = -1

    @property
    def batch(self) -> int:
        """A batch call's number: its snapshot's version, else 0 (a stream's micro-batches
        are numbered by Spark)."""
        return 0 if self.snapshot_version is None else self.snapshot_version

    @property
    def from_snapshots(self) -> bool:
        return self.app_id.startswith(SNAPSHOT_WRITER_PREFIX)

    @property
    def deletion_vectors(self) -> bool:
        """Whether a target the first batch makes has deletion vectors: later batches then
        mark replaced rows deleted instead of rewriting the files that hold them. Off unless
        asked: deltalake's everyday reads (``to_pandas``, ``to_pyarrow_table``) refuse a
        table with the ``deletionVectors`` reader feature."""
        asked = dict(self.table_properties).get(DELETION_VECTORS_PROPERTY, "false")
        return asked.strip().lower() == "true"

    @property
    def sequence(self) -> tuple[str, ...]:
        return tuple(sequence_column(i) for i in range(len(self.sequence_names)))

    @property
    def values(self) -> tuple[str, ...]:
        """The columns a change sets: every target column but the keys."""
        return tuple(c for c in self.columns if c not in self.keys)

    @property
    def state_keeps_values(self) -> bool:
        """Whether the state keeps changes' values, not only their sequences: type 2
        recomputes a key's history from every change, and ``ignore_null_updates`` needs
        the change that last set each column. Type 1 otherwise needs only the winning
        change's sequence: its values are the target row's."""
        return self.scd_type == 2 or self.ignore_null_updates
