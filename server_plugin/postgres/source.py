"""``postgres_changelog``: a PostgreSQL table's changes from its logical replication slot
(the built-in ``pgoutput`` plugin, read over plain SQL), batch and streaming, in Spark's
changelog shape; a stream starts with a first copy of the table consistent with the log.

- **Versions are commit LSNs.** ``_commit_version`` is a transaction's commit LSN as a
  number, ``_commit_timestamp`` its commit time (strictly increasing, ``changes``).
- **Exactly once.** A stream's offsets are commit LSNs; a micro-batch holds the whole
  transactions committed after its start and up to its end, and the slot is advanced to the
  end only in ``commit``, after Spark recorded the batch as done. So a stop anywhere (a
  SIGKILL of the server) reads the batch again from the slot, which still holds it.
- **The first copy.** The stream's first micro-batch pins the slot's position ``C`` and a
  database snapshot exported by a transaction this reader holds open until that batch is
  committed: the copy's tasks import it (``SET TRANSACTION SNAPSHOT``) and read page ranges
  of the table in parallel, all seeing one state. That snapshot's visibility (its xmin,
  xmax and in-progress xids) goes into every later offset, and a logged transaction the copy
  already saw is skipped: nothing is lost or doubled at the seam. Copied rows are inserts at
  version ``C``. A restart before that first batch was committed cannot read the same
  snapshot again and is refused by name (``COPY_SNAPSHOT_LOST``).
- **A batch read** reads what the slot holds between the range options' LSNs (peeking: the
  slot does not move).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.dependencies import ADBC_POSTGRESQL, require
from spark_cdc.server_plugin.errors import internal_errors
from spark_cdc.server_plugin.postgres.catalog import table_info
from spark_cdc.server_plugin.postgres.connection import session
from spark_cdc.server_plugin.postgres.feed import feed_schema
from spark_cdc.server_plugin.postgres.options import SOURCE, parse_postgres_options
from spark_cdc.server_plugin.postgres.reads import FAMILY, PostgresBatchReader
from spark_cdc.server_plugin.postgres.stream import PostgresStreamReader

SOURCE_NAME = SOURCE


class PostgresChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        require(ADBC_POSTGRESQL, SOURCE_NAME)
        options = parse_postgres_options(self.options)
        with internal_errors(options.qualified, family=FAMILY), session(options.connection) as s:
            return feed_schema([table_info(s, *name) for name in options.tables])

    def reader(self, schema: StructType) -> DataSourceReader:
        require(ADBC_POSTGRESQL, SOURCE_NAME)
        options = parse_postgres_options(self.options)
        with internal_errors(options.qualified, family=FAMILY):
            return PostgresBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require(ADBC_POSTGRESQL, SOURCE_NAME)
        options = parse_postgres_options(self.options, True)
        with internal_errors(options.qualified, family=FAMILY):
            return PostgresStreamReader(options, schema)
