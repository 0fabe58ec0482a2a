"""``read(spark)`` and ``readStream(spark)``: a table's post-processed change feed, as
``spark.read.changes`` would give it on a server with native CDC.

The readers have the shape of Spark's ``DataFrameReader``/``DataStreamReader``:
``format(name)`` chooses the changelog source (``spark_cdc.sources``), ``option``/``options``
set options, ``load(path)`` reads a table by its path or URI and ``changes(tableName)`` by
its catalog name. A batch reader and a stream reader are two classes over one base, not a
boolean. They read through the server's changelog source (``delta_changelog`` for
``delta``). By default (``postProcessing=source``) the source itself resolves the
row-level passes, carry-over removal and update detection, commit by commit, and declares
them done, so ``post_process`` plans nothing for them (no shuffle, aggregate, watermark or
state) and only net changes keep the client's stateful operator. With
``postProcessing=client`` the source serves the raw feed and ``post_process`` plans every
pass with what the source declares: carry-over rows, updates as delete+insert,
intermediate changes, no row version (carry-overs are found by comparing whole rows). Both
give the same rows, schema and errors. Building the DataFrame makes no server round trip,
except that ``changes(tableName)`` asks the catalog once where the table is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from pyspark.sql import DataFrame
from spark_cdc.range_hints import range_hints
from spark_cdc.read_schema import (
    GivenSchema,
    range_columns,
    refuse_where_read_whole,
    selected,
    with_range_columns,
)
from spark_cdc.reader_options import sorted_options
from spark_cdc.rewrite.column_functions import settle_column_functions
from spark_cdc.rewrite.options import CdcOptions, OptionValue, parse_options
from spark_cdc.rewrite.post_process import planned_passes, post_process, refuse_reserved_columns
from spark_cdc.rewrite.spec import ChangelogSpec
from spark_cdc.sources import (
    DEFAULT_FORMAT,
    ChangelogSource,
    names_a_table,
    source_for,
    table_location,
)

if TYPE_CHECKING:
    from spark_cdc.rewrite.pyspark_internals import SparkSession

R = TypeVar("R", bound="ChangelogReaderBase")


def read(spark: SparkSession) -> ChangelogReader:
    """A batch reader of change feeds, as ``spark.read`` is of tables.

    Parameters
    ----------
    spark : SparkSession
        A Spark Connect session.

    Returns
    -------
    ChangelogReader
        Configure it with ``format``, ``option`` and ``options``, then read with
        ``load(path)`` or ``changes(tableName)``.

    Examples
    --------
    >>> import spark_cdc
    >>> feed = (
    ...     spark_cdc.read(spark)
    ...     .option("rowId", "id")
    ...     .option("startingVersion", 1)
    ...     .load("/data/orders")
    ... )
    >>> feed.orderBy("_commit_version").show()  # doctest: +SKIP
    """
    return ChangelogReader(spark)


def readStream(spark: SparkSession) -> ChangelogStreamReader:
    """A streaming reader of change feeds, as ``spark.readStream`` is of tables.

    Parameters
    ----------
    spark : SparkSession
        A Spark Connect session.

    Returns
    -------
    ChangelogStreamReader
        Configure it with ``format``, ``option`` and ``options``, then read with
        ``load(path)`` or ``changes(tableName)``; the result is a streaming DataFrame.

    Examples
    --------
    >>> import spark_cdc
    >>> query = (
    ...     spark_cdc.readStream(spark)
    ...     .option("rowId", "id")
    ...     .option("deduplicationMode", spark_cdc.DeduplicationMode.NET_CHANGES)
    ...     .load("/data/orders")
    ...     .writeStream.format("console")
    ...     .start()
    ... )  # doctest: +SKIP
    """
    return ChangelogStreamReader(spark)


class ChangelogReaderBase:
    """What ``ChangelogReader`` (batch) and ``ChangelogStreamReader`` (streaming) share:
    every method but the kind of DataFrame they build. Not made directly.

    Options (keys case-insensitive, values str, bool or int):

    - ``rowId``: the column(s) identifying a row, comma-separated; needed for
      ``computeUpdates`` and ``netChanges``. Without it rows are identified by their whole
      content, which is enough for the default carry-over removal.
    - Spark's CDC options, with Spark's defaults: ``deduplicationMode`` (``none``,
      ``dropCarryovers`` (default), ``netChanges``; or a ``DeduplicationMode``),
      ``computeUpdates`` (false), ``startingVersion`` (a version; ``earliest``; ``latest``
      for streams), ``endingVersion``, ``startingTimestamp``, ``endingTimestamp`` (batch
      only for the ending bounds), ``startingBoundInclusive``, ``endingBoundInclusive``
      (true).
    - ``postProcessing``: where carry-over removal and update detection run: ``source``
      (default: inside the source, per commit, with no shuffle, aggregate or state) or
      ``client`` (the client-built plan, as ``post_process`` plans it for any DataFrame).
      Same rows, schema and errors either way.
    - The source's own (``delta``): ``maxFilesPerTrigger``, ``maxBytesPerTrigger``,
      ``failOnDataLoss``, ``parallelism`` (tasks the cluster runs at once; default the
      server driver's cores), ``resolveTaskBytes`` (data-file bytes one task resolves at a
      time; default ``64m``), and ``storage.<KEY>`` for delta-rs storage options
      (object-store credentials).

    Any other option is refused while the DataFrame is built
    (``INVALID_CDC_OPTION.UNKNOWN_OPTION``, suggesting the option meant).
    """

    _streaming = False

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._options: dict[str, OptionValue] = {}
        self._schema: GivenSchema | None = None
        self._use(source_for(DEFAULT_FORMAT))

    def _use(self, source: ChangelogSource) -> None:
        self._source = source

    def format(self: R, source: str) -> R:
        """Choose the changelog source by its format name (default ``"delta"``).

        Parameters
        ----------
        source : str
            A format of ``spark_cdc.sources.SOURCES`` (case-insensitive); an unknown one is
            refused with ``INVALID_CDC_OPTION.UNKNOWN_FORMAT``, naming the formats.

        Returns
        -------
        ChangelogReader or ChangelogStreamReader
            This reader, for chaining.

        Examples
        --------
        >>> feed = spark_cdc.read(spark).format("delta").load("/data/orders")  # doctest: +SKIP
        """
        self._use(source_for(source))
        return self

    def option(self: R, key: str, value: OptionValue) -> R:
        """Set one option (see the class).

        Parameters
        ----------
        key : str
            The option's name, case-insensitive.
        value : str, bool or int
            Its value; a ``DeduplicationMode`` is a ``str``.

        Returns
        -------
        ChangelogReader or ChangelogStreamReader
            This reader, for chaining.

        Examples
        --------
        >>> reader = spark_cdc.read(spark).option("rowId", "id").option("computeUpdates", True)
        """
        self._options[key] = value
        return self

    def options(self: R, **options: OptionValue) -> R:
        """Set several options at once (see the class).

        Returns
        -------
        ChangelogReader or ChangelogStreamReader
            This reader, for chaining.

        Examples
        --------
        >>> reader = spark_cdc.read(spark).options(rowId="id", startingVersion=3)
        """
        self._options.update(options)
        return self

    def schema(self: R, schema: GivenSchema | None) -> R:
        """Read only ``schema``'s columns, as Spark's file sources read a given schema:
        the source decodes and hands on only those, which a ``select`` after the read
        cannot make it do (the row-level passes still compare whole rows).

        Parameters
        ----------
        schema : StructType, str or None
            Some of the feed's columns (or DDL: ``"id BIGINT, name STRING"``) by name, each
            with the feed's type, in any order (else ``INVALID_CHANGELOG_SCHEMA.READ_SCHEMA``);
            ``None``: all. Refused where the feed is read whole: ``postgres``, ``netChanges``,
            ``postProcessing=client`` (``INVALID_CHANGELOG_SCHEMA.READ_SCHEMA_NOT_TAKEN``).

        Returns
        -------
        ChangelogReader or ChangelogStreamReader
            This reader, for chaining.

        Examples
        --------
        >>> feed = spark_cdc.read(spark).schema("id BIGINT, amount DOUBLE").load("/data/orders")
        """
        self._schema = schema
        return self

    def load(self, path: str) -> DataFrame:
        """The post-processed change feed of the table at ``path``.

        Building it makes no server round trip; the options are checked now.

        Parameters
        ----------
        path : str
            A path or URI the server reads (``/data/orders``, ``s3://bucket/orders``).

        Returns
        -------
        DataFrame
            The table's columns, then ``_change_type``, ``_commit_version`` and
            ``_commit_timestamp``; streaming for a ``ChangelogStreamReader``.

        Examples
        --------
        >>> feed = spark_cdc.read(spark).option("rowId", "id").load("/data/orders")
        >>> feed.where("_change_type = 'insert'").count()  # doctest: +SKIP
        """
        settle_column_functions(self._spark)
        row_id, cdc, source, where = sorted_options(self._options, self._source, self._streaming)
        spec = self._source.spec(row_id)
        opts = self._check_range(cdc, source)
        at_source = where == "source" and self._source.resolves_row_level
        passes, net = planned_passes(spec, opts, at_source and self._source.finds_row_id)
        if self._schema is not None:
            refuse_where_read_whole(self._source, net or (passes.any and not at_source))
        if row_id is not None and self._source.resolves_row_level:
            # The source checks it while Spark resolves the relation, before the plan's own
            # references: a column the table lacks is named with the table's columns.
            source["rowId"] = ",".join(row_id)
        if not (at_source and passes.any):
            return selected(post_process(self._load(path, source, opts), spec, cdc), self._schema)
        source.update(self._source.resolution_options(row_id, passes, self._streaming))
        feed = refuse_reserved_columns(self._load(path, source, opts))
        resolved = post_process(feed, self._source.resolved_spec(row_id, passes), cdc)
        return selected(resolved, self._schema)

    def changes(self, tableName: str) -> DataFrame:
        """The post-processed change feed of the catalog table ``tableName``.

        Given ``catalog.<KEY>`` options (the Iceberg source), the source finds the table in
        that catalog, with no round trip here. Otherwise, unlike ``load``, this makes one
        server round trip, while the DataFrame is built: it asks Spark's catalog where the
        table is (``DESCRIBE TABLE EXTENDED``, on any Spark Connect server, with or without
        Delta Lake's Spark catalog), then reads it as ``load`` does. A name the catalog does
        not know fails with Spark's ``TABLE_OR_VIEW_NOT_FOUND``; a table without a location
        (a view) with ``SPARK_CDC.TABLE_WITHOUT_LOCATION``. The older spelling
        ``changes(path)`` still works: a string with ``/`` in it is read as a path, with no
        round trip, as ``load(path)`` reads it.

        Parameters
        ----------
        tableName : str
            A table name as SQL writes it: ``orders``, ``sales.orders``,
            ``spark_catalog.sales.orders``.

        Returns
        -------
        DataFrame
            As ``load`` returns it.

        Examples
        --------
        >>> spark.sql("CREATE TABLE orders USING parquet LOCATION '/data/orders'")
        >>> feed = spark_cdc.read(spark).option("rowId", "id").changes("orders")
        """
        if not names_a_table(tableName):  # a path or URI: the older spelling of load(path)
            return self.load(tableName)
        if self._names_tables():  # the source's own catalog resolves the name
            return self.load(tableName)
        return self.load(table_location(self._spark, tableName))

    def _names_tables(self) -> bool:
        prefix = self._source.catalog_prefix
        return prefix is not None and any(k.lower().startswith(prefix) for k in self._options)

    def source_feed(self, table: str) -> tuple[DataFrame, ChangelogSpec, dict[str, OptionValue]]:
        """The source's own (raw) change feed, the ``ChangelogSpec`` it declares and the CDC
        options, before ``post_process``: for callers that post-process each micro-batch
        themselves (``spark-cdc tail``). ``table`` is a path, as for ``load``; the options
        are checked as for ``load``."""
        settle_column_functions(self._spark)
        row_id, cdc, source, _ = sorted_options(self._options, self._source, self._streaming)
        self._check_range(cdc, source)
        return self._load(table, source), self._source.spec(row_id), cdc

    def _check_range(self, cdc: dict[str, OptionValue], source: dict[str, str]) -> CdcOptions:
        """The parsed CDC options (Spark's order: the options themselves are checked first),
        except that a stream's end bound is refused before anything else: a stream given only
        endingVersion was told to add startingVersion, then refused for the end bound. The
        range goes to the source as a hint."""
        opts = parse_options(cdc, streaming=self._streaming)
        if self._source.takes_range:
            hints = range_hints(cdc, self._streaming)
            source.update({k: v for k, v in hints.items() if k not in source})
        return opts

    def _load(self, path: str, source: dict[str, str], opts: CdcOptions | None = None) -> DataFrame:
        reader = self._spark.readStream if self._streaming else self._spark.read
        reader = reader.format(self._source.name).options(**source)
        if self._schema is not None:  # with the columns the range filter reads
            reader = reader.schema(with_range_columns(self._schema, range_columns(opts)))
        return reader.load(path)


class ChangelogReader(ChangelogReaderBase):
    """A batch reader of a table's change feed, post-processed as Spark's ``changes()``
    would give it (``spark_cdc.read(spark)`` makes one). Options: see
    ``ChangelogReaderBase``.

    ``ChangelogReader(spark, streaming=True)`` is the older spelling of
    ``spark_cdc.readStream(spark)``: it reads a stream, and still works. ``streaming`` is
    keyword-only, as a bare ``True`` says nothing at the call.

    Parameters
    ----------
    spark : SparkSession
        A Spark Connect session.
    streaming : bool, default False
        Build streaming DataFrames (prefer ``ChangelogStreamReader``).

    Examples
    --------
    >>> from spark_cdc import ChangelogReader
    >>> feed = (
    ...     ChangelogReader(spark)
    ...     .options(rowId="id", computeUpdates=True, startingVersion=2)
    ...     .load("/data/orders")
    ... )
    """

    def __init__(self, spark: SparkSession, *, streaming: bool = False) -> None:
        super().__init__(spark)
        self._streaming = streaming


class ChangelogStreamReader(ChangelogReaderBase):
    """A streaming reader of a table's change feed (``spark_cdc.readStream(spark)`` makes
    one): ``load`` and ``changes`` give streaming DataFrames. Options: see
    ``ChangelogReaderBase``; ``startingVersion`` may be ``latest``, and the ending bounds
    are refused (a stream has no end).

    Parameters
    ----------
    spark : SparkSession
        A Spark Connect session.

    Examples
    --------
    >>> from spark_cdc import ChangelogStreamReader
    >>> feed = ChangelogStreamReader(spark).option("startingVersion", "latest").load("/t")
    >>> query = feed.writeStream.format("console").start()  # doctest: +SKIP
    """

    _streaming = True
