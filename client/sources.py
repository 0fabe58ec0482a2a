"""The changelog sources the readers read through, each described by what it declares
(Spark's ``Changelog`` capability flags) and the options it takes, and ``SOURCES``, the
registry ``format(name)`` chooses from.

Each source is one description here, one entry in ``SOURCES`` and its plugin in
``spark_cdc.server_plugin``; the readers do not change (Iceberg was added so).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_cdc.rewrite.errors import cdc_error
from spark_cdc.rewrite.row_level import RowLevelPasses
from spark_cdc.rewrite.server_code import make_available
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.server_plugin.cdc_options import NULLABLE_SCHEMA
from spark_cdc.server_plugin.delta.options import ACCEPTED as DELTA_OPTIONS
from spark_cdc.server_plugin.delta.source import SOURCE_NAME, DeltaChangelogSource
from spark_cdc.server_plugin.iceberg.options import ACCEPTED as ICEBERG_OPTIONS
from spark_cdc.server_plugin.iceberg.options import CATALOG_PREFIX
from spark_cdc.server_plugin.iceberg.source import IcebergChangelogSource
from spark_cdc.server_plugin.postgres.options import ACCEPTED as POSTGRES_OPTIONS
from spark_cdc.server_plugin.postgres.options import refuse_secrets
from spark_cdc.server_plugin.postgres.source import PostgresChangelogSource

if TYPE_CHECKING:
    from spark_cdc.rewrite.pyspark_internals import SparkSession


@dataclass(frozen=True)
class ChangelogSource:
    """A server-side changelog source, as the reader sees it.

    ``options`` are the source's own, beyond Spark's CDC options; ``option_prefixes`` open
    families of them (``storage.<KEY>``); ``takes_range`` says whether the source reads
    Spark's range options itself (as a hint: ``post_process`` still filters exactly);
    ``resolves_row_level`` whether it can run carry-over removal and update detection itself
    when given ``rowId``, ``deduplicationMode`` and ``computeUpdates``
    (``resolution_options``), after which it declares the flags ``resolved_spec`` gives;
    ``finds_row_id`` whether it then finds a row id itself when ``rowId`` is not given (the
    table's own, such as Iceberg's identifier fields), so update detection can run there
    without one (net changes, the client's, still needs ``rowId``).
    """

    name: str
    row_version: str | None
    contains_carryover_rows: bool
    represents_update_as_delete_and_insert: bool
    contains_intermediate_changes: bool
    options: tuple[str, ...] = ()
    option_prefixes: tuple[str, ...] = ()
    takes_range: bool = False
    resolves_row_level: bool = False
    finds_row_id: bool = False
    # Whether a schema given to the read makes it read only those columns (the row-level
    # passes still comparing whole rows).
    reads_given_schema: bool = False
    plugin: type | None = None  # the DataSource class, for registering it by value
    # Options under this prefix name a catalog of the source's own, in which ``changes(name)``
    # finds the table (Iceberg's ``catalog.<KEY>``); None: Spark's catalog says where it is.
    catalog_prefix: str | None = None
    # Refuses options the reader must never put into a plan (a credential), by name.
    check_options: Callable[[Iterable[str]], None] | None = None

    def register(self, spark: SparkSession) -> None:
        """For a server without this package installed: register the source with this
        session, its code shipped with the call (the server needs only its imports). A
        server with the package keeps its own (which clients on any Python can use)."""
        if self.plugin is not None:
            make_available(spark, self.plugin, f"the {self.name} source")

    def spec(self, row_id: list[str] | None) -> ChangelogSpec:
        return ChangelogSpec(
            row_id=row_id,
            row_version=self.row_version,
            contains_carryover_rows=self.contains_carryover_rows,
            represents_update_as_delete_and_insert=self.represents_update_as_delete_and_insert,
            contains_intermediate_changes=self.contains_intermediate_changes,
        )

    def resolution_options(
        self, row_id: list[str] | None, passes: RowLevelPasses, streaming: bool
    ) -> dict[str, str]:
        """What asks the source to run ``passes`` itself. A stream's source also declares
        every column nullable, as the client's streaming plan for those passes does."""
        options = {
            "deduplicationMode": "dropCarryovers" if passes.carryover_removal else "none",
            "computeUpdates": str(passes.update_detection).lower(),
            NULLABLE_SCHEMA: str(streaming).lower(),
        }
        if row_id is not None:
            options["rowId"] = ",".join(row_id)
        return options

    def resolved_spec(self, row_id: list[str] | None, passes: RowLevelPasses) -> ChangelogSpec:
        """What the source's feed declares once it ran ``passes``: no carry-overs left,
        updates no longer written as delete+insert."""
        return ChangelogSpec(
            row_id=row_id,
            row_version=self.row_version,
            contains_carryover_rows=self.contains_carryover_rows and not passes.carryover_removal,
            represents_update_as_delete_and_insert=(
                self.represents_update_as_delete_and_insert and not passes.update_detection
            ),
            contains_intermediate_changes=self.contains_intermediate_changes,
        )


# Delta's log holds copy-on-write rewrites (carry-overs), updates as delete+insert and every
# commit's changes; it has no row version, so carry-overs are found by comparing rows.
DELTA = ChangelogSource(
    name=SOURCE_NAME,
    row_version=None,
    contains_carryover_rows=True,
    represents_update_as_delete_and_insert=True,
    contains_intermediate_changes=True,
    options=DELTA_OPTIONS.source_only,
    option_prefixes=DELTA_OPTIONS.prefix_names,
    takes_range=True,
    resolves_row_level=True,
    reads_given_schema=True,
    plugin=DeltaChangelogSource,
)


# An Iceberg branch's snapshots hold the same: copy-on-write rewrites carry rows over, an
# update is a delete and an insert (merge-on-read ones too), every snapshot's changes are
# kept.
ICEBERG = ChangelogSource(
    name=IcebergChangelogSource.name(),
    row_version=None,
    contains_carryover_rows=True,
    represents_update_as_delete_and_insert=True,
    contains_intermediate_changes=True,
    options=ICEBERG_OPTIONS.source_only,
    option_prefixes=ICEBERG_OPTIONS.prefix_names,
    takes_range=True,
    resolves_row_level=True,
    reads_given_schema=True,
    finds_row_id=ICEBERG_OPTIONS.finds_row_id,
    plugin=IcebergChangelogSource,
    catalog_prefix=CATALOG_PREFIX,
)


# PostgreSQL's log holds each transaction's row changes: no carry-overs, updates as updates
# (their pre-images where the table's replica identity is FULL), every transaction kept.
# The path names the table (``schema.table``); versions are commit LSNs.
POSTGRES = ChangelogSource(
    name=PostgresChangelogSource.name(),
    row_version=None,
    contains_carryover_rows=False,
    represents_update_as_delete_and_insert=False,
    contains_intermediate_changes=True,
    options=POSTGRES_OPTIONS.source_only,
    takes_range=True,
    plugin=PostgresChangelogSource,
    check_options=refuse_secrets,
)


# The formats ``format(name)`` accepts, by name (lower case).
SOURCES: dict[str, ChangelogSource] = {"delta": DELTA, "iceberg": ICEBERG, "postgres": POSTGRES}
DEFAULT_FORMAT = "delta"


def source_for(format_name: str) -> ChangelogSource:
    """The source of ``format_name`` (case-insensitive), or
    ``INVALID_CDC_OPTION.UNKNOWN_FORMAT`` naming the closest format and all of them."""
    source = SOURCES.get(format_name.strip().lower())
    if source is not None:
        return source
    close = difflib.get_close_matches(format_name.lower(), SOURCES, n=1, cutoff=0)
    raise cdc_error(
        "INVALID_CDC_OPTION.UNKNOWN_FORMAT",
        format=format_name,
        proposal=close[0] if close else DEFAULT_FORMAT,
        formats=", ".join(SOURCES),
    )


def register_delta_changelog(spark: SparkSession) -> None:
    """Ship the ``delta_changelog`` source to a server without this package installed.

    The source's code goes with the call (registered by value); the server needs only its
    imports (``deltalake``, ``pyarrow``), and its Python must be this client's minor version
    (else ``SPARK_CDC.SERVER_PYTHON_MISMATCH``). A server that has the package keeps its
    own copy, which clients on any Python can use. One round trip asks the server which;
    call it once per session, before reading.

    Parameters
    ----------
    spark : SparkSession
        A Spark Connect session.

    Examples
    --------
    >>> import spark_cdc
    >>> spark_cdc.register_delta_changelog(spark)  # doctest: +SKIP
    >>> feed = spark_cdc.read(spark).load("/data/orders")  # doctest: +SKIP
    """
    DELTA.register(spark)


def register_iceberg_changelog(spark: SparkSession) -> None:
    """Ship the ``iceberg_changelog`` source to a server without this package installed.

    As ``register_delta_changelog``; the server needs ``pyiceberg``, ``pyarrow`` and
    ``numpy``.

    Parameters
    ----------
    spark : SparkSession
        A Spark Connect session.

    Examples
    --------
    >>> import spark_cdc
    >>> spark_cdc.register_iceberg_changelog(spark)  # doctest: +SKIP
    >>> feed = spark_cdc.read(spark).format("iceberg").load("/data/orders")  # doctest: +SKIP
    """
    ICEBERG.register(spark)


def names_a_table(text: str) -> bool:
    """Whether ``text`` is a catalog table's name rather than a path or URI (one with a
    ``/``): the readers' ``changes`` and ``apply_changes``' target read it alike."""
    return "/" not in text


def table_location(spark: SparkSession, table: str) -> str:
    """Where Spark's catalog keeps ``table``, as a path a source reads (or a writer
    writes): one round trip."""
    described = spark.sql("DESCRIBE TABLE EXTENDED IDENTIFIER(:table)", args={"table": table})
    for row in described.collect():
        if row["col_name"] == "Location" and row["data_type"]:
            location = str(row["data_type"])
            # A catalog's ``file:/data/t`` is the plain path ``/data/t``; other URIs stay.
            if location.startswith("file:") and not location.startswith("file://"):
                return location[len("file:") :]
            return location
    raise cdc_error("SPARK_CDC.TABLE_WITHOUT_LOCATION", table=table)
