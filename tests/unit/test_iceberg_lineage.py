"""v3 row lineage as the Iceberg source reads it: each row's ``_row_id`` and
``_last_updated_sequence_number``, written in the file or inherited (the file's
``first_row_id`` plus the row's position; the file's data sequence number), checked on
the fixture whose compaction wrote them into its one data file."""

from __future__ import annotations

import pyarrow as pa
from spark_cdc.server_plugin.iceberg.changes import TableLayout, table_tasks
from spark_cdc.server_plugin.iceberg.file_reader import ReadContext, read_task
from spark_cdc.server_plugin.iceberg.manifests import snapshot_files
from spark_cdc.server_plugin.iceberg.table import open_table
from spark_cdc.server_plugin.iceberg.timeline import timeline
from spark_cdc.server_plugin.row_level.rules import LINEAGE_COLUMNS
from spark_cdc.server_plugin.vocabulary import CHANGE_TYPE

from tests.support.iceberg_fixtures import table_named
from tests.support.iceberg_io import storage_options

# The fixture's README: rows i = 1, 2, 3 came with the appends of sequence numbers 1, 2, 3
# and row ids 0, 1, 2; the compaction's file materializes (0,1), (1,2), (2,3).
DOCUMENTED = {1: (0, 1), 2: (1, 2), 3: (2, 3)}


def test_rows_carry_the_lineage_they_inherit_or_were_written_with() -> None:
    folder = table_named("spark_v3_row_lineage")
    table = open_table(str(folder), storage_options(folder))
    metadata = table.metadata
    context = ReadContext(str(folder), table.io, metadata, metadata.schema(), True)
    target = pa.schema(
        [
            pa.field("i", pa.int32()),
            *(pa.field(name, pa.int64()) for name in LINEAGE_COLUMNS),
            pa.field(CHANGE_TYPE, pa.int8()),
        ]
    )
    snapshots = timeline(metadata).snapshots
    assert [t.operation for t in snapshots] == ["append", "append", "append", "replace"]
    seen = []
    for timed in snapshots[2:]:  # three appended files, then the compaction's one file
        files = snapshot_files(timed.snapshot, table.io)
        tasks = table_tasks(timed, files, TableLayout(frozenset({0})))
        rows = pa.Table.from_batches(
            [b for task in tasks for b in read_task(context, target, task)], schema=target
        )
        seen.append(
            {r["i"]: (r[LINEAGE_COLUMNS[0]], r[LINEAGE_COLUMNS[1]]) for r in rows.to_pylist()}
        )
    assert seen == [DOCUMENTED, DOCUMENTED]
