"""Every error condition this package raises, once: its name and its message template.

Spark's model (``python/pyspark/errors/error-conditions.json``): a condition is a stable
``FAMILY.SUB`` name and one template whose ``<param>`` placeholders name its parameters; a
raise is a name and the parameters' values, never a sentence of its own. So one mistake reads
the same wherever it is found (the client, a plan running on the server, a source, the net
changes operator), and a message cannot drift from its parameters. The families:

- ``APPLY_CHANGES``: ``apply_changes``' parameters, feeds and targets.
- ``INVALID_CDC_ENVELOPE``: ``decode_changes``' parameters and the CDC envelopes it decodes
  (Debezium, Maxwell, Canal, GoldenGate JSON), found while the plan is built or the query runs.
- ``INVALID_CDC_OPTION``: an option's name or value (Spark's own family for its CDC options;
  ours and the sources' options join it, so a bad option is one family everywhere).
- ``INVALID_CHANGELOG_SCHEMA``: what a changelog declares (Spark's family).
- ``CHANGELOG_CONTRACT_VIOLATION``: rows that break the changelog contract, found while the
  query runs.
- ``DELTA_CHANGELOG``: the table, its log and its files, as the ``delta_changelog`` source
  reads them; ``INTERNAL_ERROR`` for a failure of ours.
- ``ICEBERG_CHANGELOG``: the same for the ``iceberg_changelog`` source (its metadata,
  snapshots, manifests, data and delete files).
- ``POSTGRES_CHANGELOG``: the same for the ``postgres_changelog`` source (its connection,
  replication slot, publication, log messages and column types).
- ``SPARK_CDC``, ``SPARK_CDC_CLI``, ``SPARK_CDC_CONNECTION``, ``SPARK_CDC_CONTAINER``,
  ``SPARK_CDC_LOCAL_SERVER``, ``SPARK_CDC_POSTGRES``: the client's installation, command
  line, connection and test servers.
- ``SNAPSHOT_CHANGES``: ``snapshot_changes``' parameters and the snapshots it compares.
- ``STREAMING_OUTPUT_MODE`` and ``UNSUPPORTED_FEATURE``: Spark's families, where Spark raises
  the same refusal for its native CDC.

A leaf (the standard library only): it ships to servers with the plugin, and the client's
layers read it too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

PLACEHOLDER = re.compile(r"<([A-Za-z][A-Za-z0-9]*)>")


class Condition(NamedTuple):
    """A template in Spark's form: one sentence naming the problem and the fix."""

    message: str

    @property
    def parameters(self) -> tuple[str, ...]:
        """The ``<param>`` names, in order of first use."""
        return tuple(dict.fromkeys(PLACEHOLDER.findall(self.message)))


_OPTION_LIST = "The options are <options>."

CONDITIONS: dict[str, Condition] = {
    "APPLY_CHANGES.APPEND_ONLY_TARGET": Condition(
        "'<path>' is an append-only Delta table (delta.appendOnly=true), and applying changes "
        "deletes and rewrites rows: apply them to another target, or unset delta.appendOnly."
    ),
    "APPLY_CHANGES.BATCH_TOO_LARGE": Condition(
        "The batch's resolved changes (<size>) are more than the server's "
        "spark.driver.maxResultSize (<limit>) lets the driver receive: apply the feed in "
        "smaller batches (a stream: the source's maxFilesPerTrigger or maxBytesPerTrigger), "
        "or raise spark.driver.maxResultSize where the server starts."
    ),
    "APPLY_CHANGES.CATALOG_FAILED": Condition(
        "The Iceberg catalog of <table> could not be used: <problem>. Fix the catalog "
        "properties apply_changes was given (type, uri, warehouse, credentials) and check "
        "that the server reaches the catalog."
    ),
    "APPLY_CHANGES.CHECKPOINT_REPLACED": Condition(
        "'<path>' holds this stream's micro-batches up to <last>, but the stream now runs "
        "micro-batch <batch>: its checkpoint was deleted or replaced. Give the stream a new "
        "checkpoint_location; changes applied again are each applied once."
    ),
    "APPLY_CHANGES.CONCURRENT_WRITE": Condition(
        "Another writer committed to '<path>' while this batch was being applied (<problem>); "
        "nothing of the batch was written to it. Stop the other writer (one apply_changes per "
        "target), then restart: the batch is applied again from where it stopped."
    ),
    "APPLY_CHANGES.CONFLICTING_PARAMETERS": Condition(
        "<first> and <second> cannot be given together: give one of them."
    ),
    "APPLY_CHANGES.DUPLICATE_SEQUENCE": Condition(
        "Two different changes of key <key> have the same sequence <sequence>, so which one "
        "is the later is undefined: make sequence_by unique per key and change (add a column "
        "that breaks the tie), or remove the duplicate from the feed."
    ),
    "APPLY_CHANGES.INTERNAL_ERROR": Condition(
        "Applying changes to '<path>' failed: <problem>. This is a bug in spark-cdc-connect, "
        "not in your feed or target: please report it with this message."
    ),
    "APPLY_CHANGES.INVALID_PARAMETER": Condition("<parameter> <problem>: <fix>."),
    "APPLY_CHANGES.MISSING_CHECKPOINT_LOCATION": Condition(
        "A streaming feed is applied with a checkpoint, where the stream records its "
        "progress: pass checkpoint_location (a folder the server can write, one per target)."
    ),
    "APPLY_CHANGES.NEW_COLUMNS": Condition(
        "The feed has column(s) <columns> that '<path>' does not: pass schema_evolution=True "
        "to add them to the target, or leave them out with except_column_list."
    ),
    "APPLY_CHANGES.NON_ORDERABLE_SEQUENCE": Condition(
        "sequence_by column <column> is of type <dataType>, which has no order: sequence "
        "changes by numbers, strings, dates, timestamps or decimals (several columns are "
        "compared in order)."
    ),
    "APPLY_CHANGES.NOT_NULL_CONSTRAINT_VIOLATED": Condition(
        "Column <column> is NOT NULL in the target '<path>', and <count> rows of the batch "
        "set it NULL. Nothing was written: fill the column in the feed (coalesce it), or "
        "drop the constraint: ALTER TABLE ... ALTER COLUMN <column> DROP NOT NULL."
    ),
    "APPLY_CHANGES.NULL_KEY": Condition(
        "The batch has change(s) whose key is NULL (<counts>), which cannot be applied to "
        "'<path>': filter them out of the feed or give them a key; nothing of this batch "
        "was applied."
    ),
    "APPLY_CHANGES.NULL_SEQUENCE": Condition(
        "<count> change(s) of the batch have a NULL sequence, which cannot be ordered: give "
        "every change a sequence_by value; nothing of this batch was applied to '<path>'."
    ),
    "APPLY_CHANGES.RESERVED_COLUMN": Condition(
        "The feed's column <column> has a name apply_changes writes itself: rename it, or "
        "leave it out with except_column_list."
    ),
    "APPLY_CHANGES.SCD_TYPE_MISMATCH": Condition(
        "'<path>' is an SCD type <stored> target (<evidence>), and the changes are applied "
        "as type <asked>: pass stored_as_scd_type=<stored> to go on with it, or apply type "
        "<asked> to a new target (with its own state_location)."
    ),
    "APPLY_CHANGES.SNAPSHOT_GIVEN_AGAIN_DIFFERS": Condition(
        "Snapshot <version> is applied to '<path>' again, since the target holds it and its "
        "state does not (the apply stopped between its two commits, or the state was "
        "deleted), but <count> of its keys differ from what the target received; nothing was "
        "written: give snapshot <version> as it was, or apply the snapshots again with "
        "full_refresh=True (spark-cdc apply-snapshot --full-refresh) to make both anew."
    ),
    "APPLY_CHANGES.SNAPSHOT_INTERRUPTED": Condition(
        "Snapshot <applied> reached '<path>' and its apply stopped before the state's "
        "commit, and snapshot <version> is asked for now: apply snapshot <applied> again "
        "first (its source must give it once more), then the later ones."
    ),
    "APPLY_CHANGES.SNAPSHOT_REFRESH_INTERRUPTED": Condition(
        "A full refresh of '<path>' stopped after the target's commit and before its "
        "state's, so the two no longer describe the same rows; nothing was written: run the "
        "refresh again (full_refresh=True, spark-cdc apply-snapshot --full-refresh)."
    ),
    "APPLY_CHANGES.SNAPSHOT_STATE_MISSING": Condition(
        "'<target>' holds snapshots apply_changes_from_snapshot applied (<evidence>), but "
        "its state '<state>' is gone, so what the target holds cannot be told from what a "
        "hand changed; nothing was written: restore the state, or apply the snapshots again "
        "with full_refresh=True (spark-cdc apply-snapshot --full-refresh) to make both anew."
    ),
    "APPLY_CHANGES.SNAPSHOT_TARGET_MISSING": Condition(
        "The target '<target>' is gone, but its state '<state>' records the snapshots applied "
        "to it; nothing was written: apply the snapshots again with full_refresh=True "
        "(spark-cdc apply-snapshot --full-refresh) to make both anew (a history starts from "
        "the first snapshot given)."
    ),
    "APPLY_CHANGES.SNAPSHOT_TARGET_REPLACED": Condition(
        "'<target>' is not the table its state '<state>' describes (<problem>); nothing was "
        "written: apply the snapshot again with full_refresh=True (spark-cdc apply-snapshot "
        "--full-refresh) to rebuild both from it, or give this table a state_location of "
        "its own."
    ),
    "APPLY_CHANGES.SNAPSHOT_VERSION_NOT_NEWER": Condition(
        "'<path>' holds snapshots up to <last>, and snapshot <version> is older: snapshots "
        "are applied in version order, so give a version above <last>."
    ),
    "APPLY_CHANGES.SOURCE_KIND_MISMATCH": Condition(
        "'<path>' is written by <found> (<evidence>), and this is <asked>: a target keeps "
        "one kind of source, or its changes would be ordered on two scales. Write to "
        "another target (with its own state_location)."
    ),
    "APPLY_CHANGES.STATE_LAYOUT_CHANGED": Condition(
        "The state '<state>' was changed by hand (<problem>), so the changes of a batch's "
        "keys cannot be found in it; nothing was written: restore the state, or apply the "
        "feed from its start with full_refresh=True (spark-cdc apply --full-refresh) to "
        "rebuild the target and its state."
    ),
    "APPLY_CHANGES.STATE_MISSING": Condition(
        "'<target>' holds changes apply_changes applied (<evidence>), but its state "
        "'<state>' is gone, and without it late changes and deletes cannot be placed; "
        "nothing was written: restore the state, or apply the feed from its start with "
        "full_refresh=True (spark-cdc apply --full-refresh) to rebuild the target and its "
        "state."
    ),
    "APPLY_CHANGES.TARGET_MISSING": Condition(
        "The target '<target>' is gone, but its state '<state>' holds the changes applied "
        "to it, so this batch alone would make a partial target; nothing was written: apply "
        "the feed from its start with full_refresh=True (spark-cdc apply --full-refresh) to "
        "rebuild it, or delete the state (and a stream's checkpoint) to start over from here."
    ),
    "APPLY_CHANGES.TARGET_NOT_DELTA": Condition(
        "The catalog's table <table> is at '<path>', which holds no Delta table: name a "
        "Delta table, or give a path, where the first batch makes a new target (an Iceberg "
        "table is written with format='iceberg' and its catalog's properties)."
    ),
    "APPLY_CHANGES.TARGET_REPLACED": Condition(
        "'<target>' is not the table its state '<state>' describes (<problem>); nothing was "
        "written: apply the feed from its start with full_refresh=True (spark-cdc apply "
        "--full-refresh) to rebuild it, or give this table a state_location of its own."
    ),
    "APPLY_CHANGES.TARGET_SCHEMA_MISMATCH": Condition(
        "The <role> table '<path>' does not fit the feed: <problem>. Apply the feed to a new "
        "target, or select the target's columns with column_list."
    ),
    "APPLY_CHANGES.TARGET_WRITE_FAILED": Condition(
        "Writing to '<path>' failed: <problem>. Nothing of the batch was committed: fix "
        "what the message names (storage, permissions), then apply the changes again."
    ),
    "APPLY_CHANGES.UNKNOWN_COLUMN": Condition(
        "<parameter> names column <column>, which <source> does not have; its columns are "
        "<columns>."
    ),
    "APPLY_CHANGES.UNSUPPORTED_TARGET_FEATURE": Condition(
        "'<path>' uses table feature(s) <features>, which apply_changes' writer (delta-rs for "
        "a Delta table, pyiceberg for an Iceberg one) cannot write: apply the changes to a "
        "new target, or drop the feature from this one."
    ),
    "APPLY_CHANGES.UNSUPPORTED_WRITE_MODE": Condition(
        "Iceberg table '<path>' sets <property>=<value>, which apply_changes cannot write: "
        "<problem>; <fix>."
    ),
    "CHANGELOG_CONTRACT_VIOLATION.NULL_COMMIT_TIMESTAMP": Condition(
        "A change row has a NULL _commit_timestamp; streaming CDC post-processing needs "
        "every row's commit timestamp. Fix the source of the change feed."
    ),
    "CHANGELOG_CONTRACT_VIOLATION.ROWS_BEHIND_WATERMARK": Condition(
        "Micro-batch <batchId> of query <queryId> dropped <droppedRows> row(s) whose "
        "_commit_timestamp was at or below the watermark. A change feed must deliver each "
        "commit whole, in one micro-batch, with _commit_timestamp strictly increasing from "
        "commit to commit; these rows are missing from the output. The query was stopped: fix "
        "the feed (or its timestamps) and rerun from a checkpoint taken before that micro-batch."
    ),
    "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE": Condition(
        "_change_type '<changeType>' is not one of insert, delete, update_preimage, "
        "update_postimage: fix the source of the change feed."
    ),
    "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION": Condition(
        "A row id has more than one delete or insert in commit version <version> (<deletes> "
        "deletes, <inserts> inserts); a changelog may hold at most one of each per row id and "
        "commit."
    ),
    "DELTA_CHANGELOG.CORRUPT_COMMIT": Condition(
        "Commit <version> of '<path>' cannot be read: its log file '<file>' is damaged: "
        "<problem>. A commit file is written once and never changes, so the table's "
        "transaction log is corrupt and failOnDataLoss=false does not skip it. Restore the "
        "file from a backup or replica of the table, then rerun the query."
    ),
    "DELTA_CHANGELOG.DATA_LOSS": Condition(
        "Commit <version> of '<path>' is gone (its log file was cleaned up); the next "
        "available commit is <nextAvailableVersion>. Start from version "
        "<nextAvailableVersion> or later, or set failOnDataLoss=false to skip what is gone."
    ),
    "DELTA_CHANGELOG.DATA_LOSS_DATA_FILE": Condition(
        "Data file '<file>' of version <version> of '<path>' is gone (VACUUM or manual "
        "deletion). Start from a later version, or set failOnDataLoss=false to skip missing "
        "files."
    ),
    "DELTA_CHANGELOG.DATA_LOSS_DELETION_VECTOR_FILE": Condition(
        "The deletion vector file of data file '<file>' of version <version> of '<path>' is "
        "gone (VACUUM or manual deletion). Start from a later version, or set "
        "failOnDataLoss=false to skip missing files."
    ),
    "DELTA_CHANGELOG.DATA_LOSS_DURING_READ": Condition(
        "Commit <version> of '<path>' disappeared while being read (its log was cleaned up "
        "meanwhile): start from a later version."
    ),
    "DELTA_CHANGELOG.DATA_LOSS_SCHEMA": Condition(
        "The schema of version <version> of '<path>' cannot be determined: the log before it "
        "was cleaned up. Start from a later version."
    ),
    "DELTA_CHANGELOG.DATA_LOSS_SNAPSHOT": Condition(
        "Version <version> of '<path>' can no longer be loaded (<reason>); its log was "
        "probably cleaned up. Start from a later version."
    ),
    "DELTA_CHANGELOG.DELETION_VECTOR_OF_UNKNOWN_FILE": Condition(
        "delta-rs reports a deletion vector for '<file>', which is not a file of the "
        "snapshot; read the table from a later version."
    ),
    "DELTA_CHANGELOG.INTERNAL_ERROR": Condition(
        "The delta_changelog source failed reading '<path>' (version <version>, data file "
        "<file>): <problem>. This is a bug in spark-cdc-connect, not in your query or table: "
        "please report it with this message."
    ),
    "DELTA_CHANGELOG.INVALID_OFFSET": Condition(
        "Offset <offset> was not written by this version of delta_changelog (expected "
        "sourceVersion <sourceVersion>); start the stream with a new checkpoint location."
    ),
    "DELTA_CHANGELOG.MISSING_DEPENDENCY": Condition(
        "<pythonRole> (<python>) <problem>, which <neededBy> needs: it <why>. Install "
        "<package> there with `<python> -m pip install '<requirement>'` (or install "
        "spark-cdc-connect[server] there), <then>."
    ),
    "DELTA_CHANGELOG.NOT_A_DELTA_TABLE": Condition(
        "'<path>' is not a Delta table the server can read: pass the table's root directory "
        "(the one holding _delta_log, with at least one commit)."
    ),
    "DELTA_CHANGELOG.NULL_IN_NOT_NULL_COLUMN": Condition(
        "Column '<column>' of data file '<file>' (version <version>) holds <nullCount> NULL "
        "value(s), but the change feed declares it NOT NULL: the writer broke the table's "
        "schema. Restore or rewrite that commit's file, or read from a later version."
    ),
    "DELTA_CHANGELOG.OFFSET_FROM_ANOTHER_TABLE": Condition(
        "The checkpoint's offset belongs to table id <checkpointTableId>, but the table at "
        "this path now has id <tableId> (it was replaced or the path changed); use a new "
        "checkpoint location for this table."
    ),
    "DELTA_CHANGELOG.OFFSET_MOVED_BACKWARDS": Condition(
        "The stream was asked to read from version <startVersion> back to <endVersion>; "
        "offsets only move forward. The checkpoint does not match this table: use a new "
        "checkpoint location."
    ),
    "DELTA_CHANGELOG.RESERVED_COLUMN": Condition(
        "The table has column(s) <columns>, which the change feed adds itself; rename them "
        "before reading the table's changes."
    ),
    "DELTA_CHANGELOG.SCHEMA_CHANGED": Condition(
        "Version <version> of the table has schema <found>, but this read uses <reading>; <why>"
    ),
    "DELTA_CHANGELOG.SCHEMA_MISMATCH": Condition(
        "Column '<column>' of data file '<file>' (version <version>) is <foundType>, which "
        "cannot be read as <readType>: <problem>"
    ),
    "DELTA_CHANGELOG.UNREADABLE_DELETION_VECTOR": Condition(
        "The deletion vector (<deletionVector>) of data file '<file>' in version <version> of "
        "'<path>' cannot be read: <problem>; restore the file from a backup or replica of the "
        "table, or read from a later version."
    ),
    "DELTA_CHANGELOG.UNREADABLE_TABLE": Condition(
        "'<path>' holds a Delta table the server cannot load (<reason>); check that the "
        "server can read it (storage.* options for object stores), then rerun."
    ),
    "DELTA_CHANGELOG.UNSUPPORTED_TABLE_FEATURE": Condition(
        "The table uses the Delta table feature '<feature>', which this changelog source "
        "cannot read correctly; it refuses rather than return wrong rows. Read its change "
        "data feed with Delta Lake on the server instead."
    ),
    "ICEBERG_CHANGELOG.DATA_LOSS": Condition(
        "The snapshots of '<path>' before version <nextAvailableVersion> are gone (expired), "
        "and the read asks for version <version>; start from version <nextAvailableVersion> "
        "or later, or set failOnDataLoss=false to read on from there."
    ),
    "ICEBERG_CHANGELOG.DATA_LOSS_DATA_FILE": Condition(
        "File '<file>' of version <version> of '<path>' is gone (expired or deleted). Start "
        "from a later version, or set failOnDataLoss=false to skip missing files."
    ),
    "ICEBERG_CHANGELOG.DELETE_FILE_UNREADABLE": Condition(
        "Delete file '<file>' of version <version> of '<path>' cannot be applied: <problem>; "
        "the source refuses rather than serve rows it may have deleted. Read from a later "
        "version, or rewrite the table's delete files (rewrite_position_delete_files)."
    ),
    "ICEBERG_CHANGELOG.FOLDER_NOT_LISTABLE": Condition(
        "'<path>' is a folder, and its FileIO (<io>) cannot list it to find the current "
        "metadata file: pass that *.metadata.json file's path instead."
    ),
    "ICEBERG_CHANGELOG.HISTORY_REWRITTEN": Condition(
        "Snapshot <snapshotId> of '<path>', which the stream read last, is no longer on "
        "branch <branch> (the branch was rolled back or replaced); start the stream again "
        "with a new checkpoint location."
    ),
    "ICEBERG_CHANGELOG.INTERNAL_ERROR": Condition(
        "The iceberg_changelog source failed reading '<path>' (version <version>, file "
        "<file>): <problem>. This is a bug in spark-cdc-connect, not in your query or table: "
        "please report it with this message."
    ),
    "ICEBERG_CHANGELOG.INVALID_OFFSET": Condition(
        "Offset <offset> was not written by this version of iceberg_changelog (expected "
        "sourceVersion <sourceVersion>); start the stream with a new checkpoint location."
    ),
    "ICEBERG_CHANGELOG.MISSING_DEPENDENCY": Condition(
        "<pythonRole> (<python>) <problem>, which <neededBy> needs: it <why>. Install "
        "<package> there with `<python> -m pip install '<requirement>'` (or install "
        "spark-cdc-connect[server] there), <then>."
    ),
    "ICEBERG_CHANGELOG.NOT_AN_ICEBERG_TABLE": Condition(
        "'<path>' is not an Iceberg table the server can read: pass the table's folder (the "
        "one holding metadata/ with a *.metadata.json file), a metadata file's path, or, "
        "with catalog.* options, a table name that catalog has."
    ),
    "ICEBERG_CHANGELOG.NULL_IN_NOT_NULL_COLUMN": Condition(
        "Column '<column>' of data file '<file>' (version <version>) holds <nullCount> NULL "
        "value(s), but the table declares it required: the writer broke the table's schema. "
        "Rewrite that file, or read from a later version."
    ),
    "ICEBERG_CHANGELOG.OFFSET_FROM_ANOTHER_TABLE": Condition(
        "The checkpoint's offset belongs to table uuid <checkpointTableId>, but the table at "
        "this path now has uuid <tableId> (it was replaced or the path changed); use a new "
        "checkpoint location for this table."
    ),
    "ICEBERG_CHANGELOG.OFFSET_MOVED_BACKWARDS": Condition(
        "The stream was asked to read from version <startVersion> back to <endVersion>; "
        "offsets only move forward. The checkpoint does not match this table: use a new "
        "checkpoint location."
    ),
    "ICEBERG_CHANGELOG.RESERVED_COLUMN": Condition(
        "The table has column(s) <columns>, which the change feed adds itself; rename them "
        "before reading the table's changes."
    ),
    "ICEBERG_CHANGELOG.SCHEMA_CHANGED": Condition(
        "Version <version> of the table has schema <found>, but this read uses <reading>; <why>"
    ),
    "ICEBERG_CHANGELOG.SNAPSHOT_NOT_IN_BRANCH": Condition(
        "Snapshot <snapshotId> (<option>) is not a snapshot of branch <branch> of '<path>'; "
        "pass one of the branch's snapshot ids, or a version."
    ),
    "ICEBERG_CHANGELOG.UNKNOWN_BRANCH": Condition(
        "The Iceberg table '<path>' has no branch '<branch>': name one of its branches (its "
        "refs), or leave the branch option out to read main."
    ),
    "ICEBERG_CHANGELOG.UNREADABLE_TABLE": Condition(
        "'<path>' holds an Iceberg table the server cannot load (<reason>); check that the "
        "server can read it (storage.* options for object stores), then rerun."
    ),
    "ICEBERG_CHANGELOG.UNSUPPORTED_TABLE_FEATURE": Condition(
        "The Iceberg table '<path>' uses <feature>, which this changelog source cannot read "
        "correctly, and it refuses rather than return wrong rows: read the table's changes "
        "with Spark's Iceberg connector instead."
    ),
    "INVALID_CDC_ENVELOPE.INVALID_PARAMETER": Condition(
        "decode_changes' <parameter> <problem>: <fix>."
    ),
    "INVALID_CDC_ENVELOPE.MALFORMED_EVENT": Condition(
        "A <format> event <problem>, so it cannot be read as a change: fix the feed or the "
        "schema given to decode_changes, or pass mode='PERMISSIVE' to keep such events in "
        "the column columnNameOfCorruptRecord names (event: <event>)."
    ),
    "INVALID_CDC_ENVELOPE.NO_POSITION": Condition(
        "A <format> event has no position to order its change by (<problem>): pass "
        "decode_changes a version column that orders the changes of each key (for example "
        "the binlog position or Kafka's offset in a topic of one partition) (event: <event>)."
    ),
    "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED": Condition(
        "decode_changes cannot know the columns of <format> events <why>: pass schema= (a "
        "StructType of the table's columns, or a DDL string such as 'id INT, name STRING')."
    ),
    "INVALID_CDC_ENVELOPE.UNSUPPORTED_SCHEMA_TYPE": Condition(
        "Column <column> has Debezium schema type <type>, which decode_changes does not map "
        "to a Spark type: pass schema= with the column's Spark type, or set the connector's "
        "decimal.handling.mode to double or string."
    ),
    "INVALID_CDC_OPTION.CONFLICTING_RANGE_TYPES": Condition(
        "A CDC read is bounded by versions or by timestamps, not both: drop either "
        "startingVersion/endingVersion or startingTimestamp/endingTimestamp."
    ),
    "INVALID_CDC_OPTION.ENDING_BOUND_IN_STREAM": Condition(
        "A stream has no end: drop endingVersion/endingTimestamp, and use "
        "trigger(availableNow=True) to stop after what the table holds now."
    ),
    "INVALID_CDC_OPTION.INVALID_BOOLEAN": Condition(
        "Option '<option>' must be true or false, got '<value>'."
    ),
    "INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE": Condition(
        "deduplicationMode '<mode>' is not one of none, dropCarryovers, netChanges "
        "(case-insensitive)."
    ),
    "INVALID_CDC_OPTION.INVALID_NUMBER": Condition(
        "Option '<option>' must be a whole number >= 1, got '<value>'."
    ),
    "INVALID_CDC_OPTION.INVALID_POST_PROCESSING": Condition(
        "Option '<option>' must be 'source' (the source resolves carry-overs and updates) or "
        "'client' (the client-built plan does), got '<value>'."
    ),
    "INVALID_CDC_OPTION.INVALID_RANGE": Condition(
        "endingVersion <endingVersion> is before startingVersion <startingVersion>: swap them "
        "or widen the range."
    ),
    "INVALID_CDC_OPTION.INVALID_ROW_ID": Condition(
        "Option '<option>' must name one or more columns, comma-separated, got '<value>'."
    ),
    "INVALID_CDC_OPTION.INVALID_SIZE": Condition(
        "Option '<option>' must be a size such as 1048576, '512k', '64m' or '1g', got '<value>'."
    ),
    "INVALID_CDC_OPTION.INVALID_SNAPSHOT_ID": Condition(
        "Option '<option>' must be an Iceberg snapshot id (a whole number, as the table's "
        "snapshots list them), got '<value>'."
    ),
    "INVALID_CDC_OPTION.INVALID_TIMESTAMP": Condition(
        "Option '<option>' is not a timestamp: '<value>'. Use 'yyyy-MM-dd[ HH:mm:ss[.SSSSSS]]' "
        "with an optional zone ('Z', '+02:00' or ' Europe/Paris'), e.g. "
        "'2024-05-01 12:00:00Z'."
    ),
    "INVALID_CDC_OPTION.INVALID_VERSION": Condition(
        "Option '<option>' must be a commit version (a whole number >= 0; the "
        "delta_changelog and iceberg_changelog sources' startingVersion also takes "
        "'earliest', and a stream's 'latest'), got '<value>'."
    ),
    "INVALID_CDC_OPTION.LATEST_IN_BATCH": Condition(
        "startingVersion 'latest' is for streams; a batch read needs a version number."
    ),
    "INVALID_CDC_OPTION.MISSING_PATH": Condition(
        "<source> needs the table's location: .load('/path/to/table') or option('path', ...)."
    ),
    "INVALID_CDC_OPTION.MISSING_STARTING_TIMESTAMP": Condition(
        "endingTimestamp needs a startingTimestamp: add "
        "option('startingTimestamp', '<yyyy-MM-dd HH:mm:ss>')."
    ),
    "INVALID_CDC_OPTION.MISSING_STARTING_VERSION": Condition(
        "endingVersion needs a startingVersion: add option('startingVersion', <a version>)."
    ),
    "INVALID_CDC_OPTION.NET_CHANGES_IN_SOURCE": Condition(
        "<source> resolves carry-overs and updates commit by commit; net changes span "
        "commits: read with ChangelogReader and deduplicationMode=netChanges, or give the "
        "source deduplicationMode=dropCarryovers."
    ),
    "INVALID_CDC_OPTION.SNAPSHOT_ID_WITH_OTHER_BOUNDS": Condition(
        "startingSnapshotId and endingSnapshotId bound a read by snapshot, so each end of the "
        "range takes one kind of bound: drop the startingVersion/startingTimestamp or "
        "endingVersion/endingTimestamp given beside them."
    ),
    "INVALID_CDC_OPTION.STARTING_TIMESTAMP_AFTER_LATEST": Condition(
        "startingTimestamp is after the table's latest commit; nothing to read: use an "
        "earlier time, or read the table as a stream to follow the commits made from now on."
    ),
    "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST": Condition(
        "startingVersion <startingVersion> is after the table's latest version "
        "<latestVersion>: use a version <= <latestVersion>, or 'latest' to read only commits "
        "made from now on (a batch read cannot wait for them: read the table as a stream with "
        "startingVersion 'latest')."
    ),
    "INVALID_CDC_OPTION.UNKNOWN_FORMAT": Condition(
        "Unknown changelog format '<format>'. Did you mean '<proposal>'? The formats are <formats>."
    ),
    "INVALID_CDC_OPTION.UNKNOWN_OPTION": Condition(
        "Unknown <reader> option '<option>'. Did you mean '<proposal>'? " + _OPTION_LIST
    ),
    "INVALID_CDC_OPTION.UNKNOWN_ROW_ID_COLUMN": Condition(
        "Row id column '<value>' (option <option>) is not a column of the table; the columns "
        "are <columns>."
    ),
    "INVALID_CDC_OPTION.UPDATE_DETECTION_REQUIRES_CARRY_OVER_REMOVAL": Condition(
        "computeUpdates=true on a changelog with carry-over rows needs carry-over removal, or "
        "unchanged rows would be reported as updates: set deduplicationMode to dropCarryovers "
        "(the default) or netChanges."
    ),
    "INVALID_CHANGELOG_SCHEMA.INVALID_ROW_ID": Condition(
        "The changelog's row id must name one or more columns, got <rowId>: pass the "
        "column(s) that identify a row, e.g. row_id=['id'] (or [] for a changelog that "
        "declares none)."
    ),
    "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID": Condition(
        "Post-processing for <flags> needs a row id, the column(s) that identify a row "
        "across its versions, and none was given: name them with option('rowId', 'id') on "
        "ChangelogReader or ChangelogSpec(row_id=['id']), or do without <flags>."
    ),
    "INVALID_CHANGELOG_SCHEMA.READ_SCHEMA": Condition(
        "The schema given to read the change feed of '<path>' <problem>: give some of the "
        "feed's columns (<columns>), in any order, each with the feed's type, or no schema."
    ),
    "INVALID_CHANGELOG_SCHEMA.READ_SCHEMA_NOT_TAKEN": Condition(
        "ChangelogReader.schema() was given, but <why>, so the feed is read whole: select "
        "the columns from the feed it returns instead."
    ),
    "POSTGRES_CHANGELOG.CHANGES_LOST": Condition(
        "Slot <slot> has moved past <lsn>, where this stream's checkpoint goes on from (to "
        "<confirmed>: another reader consumed or advanced it), so the changes between are "
        "gone from it: give each stream a slot of its own, and start this one again with a "
        "new checkpoint location (and a first copy) to mirror the table anew."
    ),
    "POSTGRES_CHANGELOG.COLUMN_TYPES_DIFFER": Condition(
        "Column <column> is <firstType> in <first> but <secondType> in <second>, so the two "
        "tables cannot be read as one feed: read them as feeds of their own."
    ),
    "POSTGRES_CHANGELOG.CONNECTION_FAILED": Condition(
        "The postgres_changelog source could not connect to <address>: <problem>. Check the "
        "host, port, database and user options, and give the password through the server's "
        "PGPASSWORD or a password file (passfile), never as an option."
    ),
    "POSTGRES_CHANGELOG.COPY_SNAPSHOT_LOST": Condition(
        "The first copy of <table> was planned on a database snapshot that is gone (the "
        "stream was restarted before its first micro-batch was committed), so it cannot be "
        "read again consistently with the log: start the stream again with a new checkpoint "
        "location (slot <slot> stays where it was, nothing is lost)."
    ),
    "POSTGRES_CHANGELOG.INTERNAL_ERROR": Condition(
        "The postgres_changelog source failed reading '<path>' (version <version>, file "
        "<file>): <problem>. This is a bug in spark-cdc-connect, not in your query or table: "
        "please report it with this message."
    ),
    "POSTGRES_CHANGELOG.INVALID_OFFSET": Condition(
        "Offset <offset> was not written by this version of postgres_changelog (expected "
        "sourceVersion <sourceVersion>); start the stream with a new checkpoint location."
    ),
    "POSTGRES_CHANGELOG.MALFORMED_MESSAGE": Condition(
        "A change of <relation> in the replication slot's log is not in pgoutput's protocol "
        "version 1 form; the slot must use the pgoutput plugin: create it with "
        "pg_create_logical_replication_slot('<slot>', 'pgoutput')."
    ),
    "POSTGRES_CHANGELOG.MISSING_DEPENDENCY": Condition(
        "<pythonRole> (<python>) <problem>, which <neededBy> needs: it <why>. Install "
        "<package> there with `<python> -m pip install '<requirement>'` (or install "
        "spark-cdc-connect[server] there), <then>."
    ),
    "POSTGRES_CHANGELOG.OFFSET_FROM_ANOTHER_SLOT": Condition(
        "The checkpoint's offset belongs to <checkpointSlot>, but this read names "
        "<slot>; use a new checkpoint location for this slot and table."
    ),
    "POSTGRES_CHANGELOG.PASSWORD_IN_OPTIONS": Condition(
        "The option <option> would put a password into the query's plan, where explain() and "
        "the server's log show it: remove it, and give the password through the server's "
        "PGPASSWORD environment variable or a password file (the passfile option)."
    ),
    "POSTGRES_CHANGELOG.PUBLICATION_NOT_FOUND": Condition(
        "The database has no publication <publication>: create it (CREATE PUBLICATION "
        "<publication> FOR TABLE <table>), or pass createSlot=true to let the source make "
        "it and the slot."
    ),
    "POSTGRES_CHANGELOG.QUERY_FAILED": Condition(
        "PostgreSQL refused to <what>: <problem>. The source's user needs the REPLICATION "
        "attribute (or superuser) for slots, and the server wal_level=logical."
    ),
    "POSTGRES_CHANGELOG.RELATION_UNKNOWN": Condition(
        "The slot's log holds a change of relation <relid> before any description of it, "
        "which pgoutput always sends first; the slot must use the pgoutput plugin and be "
        "read by this source alone."
    ),
    "POSTGRES_CHANGELOG.REPLICATION_NOT_GRANTED": Condition(
        "User <user> may not read replication slots (it has neither the REPLICATION attribute "
        "nor superuser): have an administrator run ALTER ROLE <user> REPLICATION, or connect "
        "as a user that has it."
    ),
    "POSTGRES_CHANGELOG.SCHEMA_CHANGED": Condition(
        "Column <column> was added to <table> while the stream ran, and the stream's schema "
        "was fixed when it started: restart the query; it goes on from where it stopped, "
        "with the table's columns as they are then."
    ),
    "POSTGRES_CHANGELOG.SLOT_ACTIVE": Condition(
        "Replication slot <slot> is in use by a reader (a running stream), so it was not "
        "dropped: stop that stream, then drop the slot."
    ),
    "POSTGRES_CHANGELOG.SLOT_NOT_FOUND": Condition(
        "The database has no replication slot <slot>: create it (SELECT "
        "pg_create_logical_replication_slot('<slot>', 'pgoutput')), or pass createSlot=true "
        "to let the source make it."
    ),
    "POSTGRES_CHANGELOG.TABLE_COLUMN_TAKEN": Condition(
        "<table> has a column named _table, which a feed of several tables uses for each "
        "row's table: read <table> as a feed of its own."
    ),
    "POSTGRES_CHANGELOG.TABLE_NOT_FOUND": Condition(
        "The database has no table <table> the source's user can see: name it as "
        "schema.table (load('public.orders'))."
    ),
    "POSTGRES_CHANGELOG.TABLE_NOT_PUBLISHED": Condition(
        "Publication <publication> does not publish <table>, so its changes never reach the "
        "slot: ALTER PUBLICATION <publication> ADD TABLE <table>."
    ),
    "POSTGRES_CHANGELOG.TABLE_NOT_READABLE": Condition(
        "User <user> may not SELECT from <table>, which the stream's first copy reads: have "
        "its owner run GRANT SELECT ON <table> TO <user>, or start from the log alone with "
        "initialCopy=false."
    ),
    "POSTGRES_CHANGELOG.TABLE_TWICE": Condition(
        "The path <path> names a table twice: name each table once."
    ),
    "POSTGRES_CHANGELOG.TRUNCATE": Condition(
        "<table> was truncated in the transaction committed at LSN <lsn>: pass "
        "includeTruncates=true to read it as a row whose _change_type is 'truncate' (for "
        "apply_changes' apply_as_truncates), or start the stream again with a new "
        "checkpoint location, which copies the table anew."
    ),
    "POSTGRES_CHANGELOG.UNCHANGED_TOAST_VALUE": Condition(
        "An update of <table> left column <column> out of the log (an unchanged TOASTed "
        "value, which PostgreSQL does not log), so its value is unknown here: ALTER TABLE "
        "<table> REPLICA IDENTITY FULL, so the log carries it."
    ),
    "POSTGRES_CHANGELOG.UNREPRESENTABLE_VALUE": Condition(
        "A value of column <column> of <table> cannot be read as <type> (<problem>): such "
        "values (infinity, NaN numerics, dates before year 1) have no Spark value; change "
        "them in the table, or leave the column out of the publication."
    ),
    "POSTGRES_CHANGELOG.UNSUPPORTED_TYPE": Condition(
        "Column <column> of <table> has type <type>, which has no Spark type this source "
        "maps it to (docs/postgres-source.md lists them): cast it in a view of your own, or leave "
        "the column out of the publication (a column list)."
    ),
    "POSTGRES_CHANGELOG.WAL_NOT_FLUSHED": Condition(
        "The database did not flush its write-ahead log up to <lsn> within <seconds> s, so "
        "the transactions a restarted stream must serve are not in the log yet: check the "
        "database's health (its disk and its WAL writer), then start the stream again."
    ),
    "SNAPSHOT_CHANGES.DUPLICATE_KEY": Condition(
        "The <side> snapshot has <count> rows of key <key>, and a snapshot holds one row per "
        "key: deduplicate it, or name the key columns that make a row unique."
    ),
    "SNAPSHOT_CHANGES.INVALID_PARAMETER": Condition("<parameter> <problem>: <fix>."),
    "SNAPSHOT_CHANGES.NULL_KEY": Condition(
        "The <side> snapshot has a row whose key column <column> is NULL (key <key>), which "
        "no change can name: filter such rows out or give them a key."
    ),
    "SNAPSHOT_CHANGES.OPTION_NOT_APPLICABLE": Condition(
        "Option <option> bounds a range of commits, and a snapshot diff is one change "
        "between two snapshots: leave it out, and give the diff's version as version=."
    ),
    "SNAPSHOT_CHANGES.STREAMING_SNAPSHOT": Condition(
        "The <side> snapshot is a streaming DataFrame, and a snapshot is a table's whole "
        "content at one time: read it with spark.read (a batch DataFrame)."
    ),
    "SPARK_CDC.MISSING_PYSPARK": Condition(
        "spark-cdc-connect needs PySpark's Spark Connect client, and this Python (<python>) "
        "has none: install the jar-free client with `pip install 'spark-cdc-connect[client]'`, "
        "or full PySpark with `pip install 'spark-cdc-connect[pyspark]'`."
    ),
    "SPARK_CDC.SERVER_PACKAGE_MISMATCH": Condition(
        "<feature> runs on the server, whose spark-cdc-connect (<server>, protocol "
        "<serverProtocol>) does not take what this client's (protocol <protocol>) sends, and "
        "the server's Python differs from this client's, so this client's code cannot run "
        "there either: install the same spark-cdc-connect release on the server and here."
    ),
    "SPARK_CDC.SERVER_PYTHON_MISMATCH": Condition(
        "<feature> runs code on the server, which has no spark-cdc-connect installed, so the "
        "code would go from this client, and Spark runs no Python code across minor versions "
        "(the server's Python is <serverPython>, this client's <clientPython>): install "
        "'spark-cdc-connect[server]' into the server's Python and restart it (its own copy "
        "then runs, for clients on any Python), or run this client on Python <serverPython>."
    ),
    "SPARK_CDC.TABLE_WITHOUT_LOCATION": Condition(
        "Table '<table>' has no location in the catalog (a view, or a table of a catalog "
        "that keeps none), so its change feed cannot be read: read the table's path with "
        "load(path)."
    ),
    "SPARK_CDC_CLI.CATALOG_FILE_INVALID": Condition(
        "Line <line> of the catalog file <file> is not key=value; write one property per "
        "line (# starts a comment)."
    ),
    "SPARK_CDC_CLI.CATALOG_FILE_UNREADABLE": Condition(
        "Cannot read the catalog file <file>: <reason>; give a readable file of key=value lines."
    ),
    "SPARK_CDC_CLI.CHECKPOINT_REQUIRED": Condition(
        "An Iceberg target has no folder to put the checkpoint beside; give one with "
        "--checkpoint DIR (a folder the server sees)."
    ),
    "SPARK_CDC_CLI.CREDENTIAL_OPTION": Condition(
        "-o <option> would put a credential on the command line, where every user of this "
        "machine can read it in `ps`: give it to the server instead, in its environment "
        "(PGPASSWORD, AWS_SECRET_ACCESS_KEY) or a file it reads (-o passfile=PATH)."
    ),
    "SPARK_CDC_CLI.INVALID_OPTION": Condition(
        "-o <option> is not KEY=VALUE; write each of the source's options as -o key=value."
    ),
    "SPARK_CDC_CLI.NO_CATALOG": Condition(
        "--format iceberg found no properties of the catalog <name>: give them in a file "
        "(--catalog-file, key=value lines) or the environment, as pyiceberg reads them "
        "(<variable> and the like), never on the command line."
    ),
    "SPARK_CDC_CLI.SERVER_EXITED": Condition("The server exited with code <code>; see <log>."),
    "SPARK_CDC_CLI.TOKEN_FILE_EMPTY": Condition(
        "The token file <file> is empty; put the token on its first line."
    ),
    "SPARK_CDC_CLI.TOKEN_FILE_UNREADABLE": Condition(
        "Cannot read the token file <file>: <reason>; give a readable file, or '-' for "
        "standard input."
    ),
    "SPARK_CDC_CLI.UNAUTHENTICATED": Condition(
        "The server refused the connection: wrong or missing token; give the server's token "
        "with $SPARK_CDC_TOKEN or --token-file."
    ),
    "SPARK_CDC_CLI.UNKNOWN_COLUMN": Condition(
        "<flag> names <missing>, which the table <table> does not have; its columns are: <columns>."
    ),
    "SPARK_CDC_CLI.UNREACHABLE": Condition(
        "Cannot reach the Spark Connect server: is it running, and is --remote right?"
    ),
    "SPARK_CDC_CONNECTION.INVALID_SERVER_GONE_AFTER": Condition(
        "$<variable> is <value>, which is not a positive number of seconds; set it to how "
        "long a session waits for a server it lost (e.g. 30), or unset it."
    ),
    "SPARK_CDC_CONNECTION.SERVER_GONE": Condition(
        "The Spark Connect server at <host>:<port> has not answered for <seconds> s "
        "(<reason>): it stopped or cannot be reached; once it runs again, make the call again "
        "in a new session (a stream resumes from its checkpoint), or wait longer for a host "
        "that does not answer with $<variable>."
    ),
    "SPARK_CDC_CONNECTION.UNAUTHENTICATED": Condition(
        "The Spark Connect server at <host>:<port> refused the session: wrong or missing "
        "token (<reason>). Connect with the server's token (spark_cdc.connect(url, "
        "token=...), $SPARK_CDC_TOKEN, or sc://<host>:<port>/;token=...) in a new session."
    ),
    "SPARK_CDC_CONNECTION.UNREACHABLE": Condition(
        "Cannot reach the Spark Connect server at <host>:<port> (<reason>): is it running, "
        "and is the URL right?"
    ),
    "SPARK_CDC_CONTAINER.BUILD_FAILED": Condition(
        "The server image did not build from <baseImage> (pull it or set "
        "SPARK_CDC_BASE_IMAGE to a local Debian image; behind a TLS proxy set "
        "SPARK_CDC_CA_CERTS to its CA certificates); the build's last lines:\n<log>"
    ),
    "SPARK_CDC_CONTAINER.CA_CERTS_NOT_FOUND": Condition(
        "SPARK_CDC_CA_CERTS names <folder>, which is not a folder; point it at the folder "
        "holding your proxy's CA certificates (PEM, *.crt)."
    ),
    "SPARK_CDC_CONTAINER.NO_SOURCE_CHECKOUT": Condition(
        "spark_cdc is installed from a wheel, so there is no compose/Dockerfile to build "
        "from; build the image in a clone (docker compose -f compose/docker-compose.yml "
        "build) and pass image=<its tag>."
    ),
    "SPARK_CDC_CONTAINER.SERVER_EXITED": Condition(
        "The Spark Connect server in container <container> exited before it started; see its "
        "log with `docker logs <container>`:\n<log>"
    ),
    "SPARK_CDC_CONTAINER.START_TIMEOUT": Condition(
        "The Spark Connect server did not log '<readyLine>' within <timeout>s; raise "
        "startup_timeout on a slow machine:\n<log>"
    ),
    "SPARK_CDC_LOCAL_SERVER.JAVA_NOT_FOUND": Condition(
        "No Java found on PATH or JAVA_HOME; Spark needs Java 17 or 21: install "
        "openjdk-17-jre-headless (Debian/Ubuntu) and retry."
    ),
    "SPARK_CDC_LOCAL_SERVER.NEEDS_FULL_PYSPARK": Condition(
        "Starting a Spark Connect server needs full PySpark (the pyspark package, with "
        "Spark's jars); this Python has only the jar-free Connect client (pyspark-client). "
        "Use a server elsewhere (--remote), or install spark-cdc-connect[pyspark,server] in "
        "another environment: both packages are the pyspark folder."
    ),
    "SPARK_CDC_LOCAL_SERVER.PORT_IN_USE": Condition(
        "Port <port> on <host> is already in use; pick another one."
    ),
    "SPARK_CDC_LOCAL_SERVER.SERVER_EXITED": Condition(
        "The Spark Connect server exited with code <code> before it was ready; its log "
        "(<log>) ends with:\n<tail>"
    ),
    "SPARK_CDC_LOCAL_SERVER.START_TIMEOUT": Condition(
        "The Spark Connect server did not start within <timeout>s; its log (<log>) ends "
        "with:\n<tail>"
    ),
    "SPARK_CDC_LOCAL_SERVER.UNSUPPORTED_JAVA": Condition(
        "<java> is Java <version>; Spark needs Java 17 or 21: install "
        "openjdk-17-jre-headless and put it on PATH or JAVA_HOME."
    ),
    "SPARK_CDC_POSTGRES.NOT_INSTALLED": Condition(
        "No PostgreSQL server binaries (initdb, pg_ctl) were found in /usr/lib/postgresql or "
        "on the PATH: install them (apt-get install postgresql), then run again."
    ),
    "SPARK_CDC_POSTGRES.START_FAILED": Condition(
        "The test PostgreSQL server did not start (its output ends: <log>): fix what it "
        "names, then run again."
    ),
    "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION": Condition(
        "Output mode '<outputMode>' is not supported for Change Data Capture (CDC) streaming "
        "reads with post-processing (carry-over removal, update detection or net changes): "
        "they emit each change once and never revise it. Use outputMode('append'), the "
        "default."
    ),
    "UNSUPPORTED_FEATURE.CDC_DOWNSTREAM_WATERMARK": Condition(
        "withWatermark() applied after CDC post-processing would stall this query: Spark "
        "keeps one global watermark, the minimum of all, and rows reach your watermark only "
        "after CDC's own watermark on _commit_timestamp has released them, so neither ever "
        "advances. Apply withWatermark() to the change feed before post_process(), or write "
        "the post-processed feed to a table and watermark the stream that reads it."
    ),
    "UNSUPPORTED_FEATURE.CDC_NET_CHANGES_MAP_KEY": Condition(
        "Streaming netChanges carries each row through JSON, which cannot hold the "
        "non-string map keys of column '<column>' (<dataType>). Turn the map into an array "
        "(e.g. map_entries) before post-processing, or compute net changes in batch."
    ),
}


class UnknownCondition(KeyError):
    """A name that is not in ``CONDITIONS``: a bug of ours, found by the tests."""


def condition(name: str) -> Condition:
    try:
        return CONDITIONS[name]
    except KeyError:
        raise UnknownCondition(f"{name} is not in spark_cdc.server_plugin.conditions") from None


def format_message(name: str, parameters: Mapping[str, object]) -> str:
    """``name``'s template with every ``<param>`` filled; a missing or extra parameter is
    a bug of ours and raises ``ValueError`` (the tests raise every condition)."""
    template = condition(name)
    expected = set(template.parameters)
    if set(parameters) != expected:
        raise ValueError(
            f"{name} takes parameters {sorted(expected)}, got {sorted(map(str, parameters))}"
        )
    return PLACEHOLDER.sub(lambda m: str(parameters[m.group(1)]), template.message)


class ConditionError(Exception):
    """An error of the registry where PySpark's classes are not at hand (the package root
    without PySpark, the command line, the test servers): ``str()`` is Spark's
    ``[CONDITION] message``, with ``getCondition()`` and ``getMessageParameters()`` as on
    PySpark's errors."""

    def __init__(self, condition: str, /, **parameters: object) -> None:
        self.condition = condition
        self.parameters = {name: str(value) for name, value in parameters.items()}
        super().__init__(f"[{condition}] {format_message(condition, self.parameters)}")

    def getCondition(self) -> str:
        return self.condition

    def getMessageParameters(self) -> dict[str, str]:
        return dict(self.parameters)
