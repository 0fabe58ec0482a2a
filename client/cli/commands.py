"""What ``spark-cdc serve``, ``tail`` and ``apply`` do, and what the demo shares with
``tail``: a session on a given or a local server (``session``), a table's change feed
followed to the terminal (``follow``), and the checks that refuse before any JVM starts.

Heavy imports (PySpark, the local server, the live feed) happen inside the functions, once
the command line has checked PySpark is there and silenced gRPC's own logging.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from spark_cdc.cli.lifecycle import (
    STOP_DEADLINE_S,
    CliError,
    Stopped,
    scratch,
    server_gone,
    stop_deferred,
)


@dataclasses.dataclass(frozen=True)
class FeedSource:
    """The source a command reads: its format and own options (``source_arguments``)."""

    format: str = "delta"
    options: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, args: argparse.Namespace) -> FeedSource:
        from spark_cdc.cli.source_arguments import source_options

        return cls(args.source_format, source_options(args))

    @property
    def envelopes(self) -> bool:
        """A folder of CDC envelope files rather than a table."""
        from spark_cdc.cli.source_arguments import ENVELOPE_FORMATS

        return self.format in ENVELOPE_FORMATS

    def register(self, spark: Any) -> None:
        """Ship the source to a server without this package (``ChangelogSource.register``);
        envelopes are decoded by stock functions and need nothing there."""
        from spark_cdc.sources import source_for

        if not self.envelopes:
            source_for(self.format).register(spark)

    def envelope_feed(self, spark: Any, folder: str) -> Any:
        """The folder's envelope files (one envelope a line) as a streaming change feed,
        ``-o schema=`` the table's columns and the other options ``decode_changes``'."""
        from spark_cdc import decode_changes

        options = dict(self.options)
        schema = options.pop("schema", None)
        events = spark.readStream.format("text").load(folder)
        return decode_changes(events, self.format, schema, options=options)


def _require_server_parts(needed_by: str) -> None:
    """Refuse before any JVM starts: full PySpark (a thin client's cannot start a server),
    then deltalake."""
    from spark_cdc.testing.local_server import ServerStartError, check_full_pyspark

    try:
        check_full_pyspark()
    except ServerStartError as error:
        raise CliError.of(error) from None
    require_deltalake(needed_by)


def require_deltalake(needed_by: str) -> None:
    """Refuse before any JVM starts: a server whose Python lacks deltalake lists the source
    and fails every read of it; the demo's writer needs it here."""
    from spark_cdc.server_plugin.dependencies import DELTALAKE, missing, missing_dependency

    problem = missing(DELTALAKE)
    if problem is not None:
        error = missing_dependency(
            DELTALAKE, problem, needed_by, python="This Python", then="then run it again"
        )
        raise CliError.of(error)


def serve(args: argparse.Namespace) -> int:
    from spark_cdc.testing.local_server import ServerStartError, start_local_server

    _require_server_parts("the server `spark-cdc serve` starts")
    try:
        server = start_local_server(
            port=args.port,
            host=args.host,
            token=args.token,
            log_path=scratch() / "server.log",
            shared_python_workers=args.shared_python_workers,
            orphans_folder=scratch(),
        )
    except ServerStartError as error:
        raise CliError.of(error) from None
    url = f"sc://localhost:{server.port}"
    shown = f"{url}/;token=<your token>" if args.token else url
    shared = " (sessions share Python workers)" if args.shared_python_workers else ""
    print(
        "Spark Connect server with the delta_changelog and iceberg_changelog sources on "
        f"{args.host}:{server.port}{shared}"
    )
    print(f"Connect with: {shown}    (Ctrl-C stops it; log: {server.log_path})", flush=True)
    try:
        while server.alive():
            time.sleep(0.5)
        raise CliError(
            "SPARK_CDC_CLI.SERVER_EXITED", code=server.process.returncode, log=server.log_path
        )
    except (Stopped, KeyboardInterrupt):
        print("\nStopping the server ...", file=sys.stderr, flush=True)
        return 0
    finally:
        server.stop(timeout=STOP_DEADLINE_S)


@contextmanager
def session(remote: str | None, token: str | None) -> Iterator[Any]:
    """A session on ``remote`` or on a local server started (and stopped) for the command,
    checked by ``spark_cdc.connect`` (an unreachable server or a refused token is said in
    seconds). Closing the session is bounded too: a stuck close is left to the server's stop.
    """
    from spark_cdc.cli.live_feed import finished_within
    from spark_cdc.connection import connect
    from spark_cdc.testing.local_server import ServerStartError, start_local_server

    server = None
    if not remote:
        _require_server_parts("the local server's delta_changelog source")
        print("Starting a local Spark Connect server on 127.0.0.1 ...", file=sys.stderr, flush=True)
        try:
            # The command's own server has one client: its streams share Python workers.
            server = start_local_server(
                log_path=scratch() / "server.log",
                shared_python_workers=True,
                orphans_folder=scratch(),
            )
        except ServerStartError as error:
            raise CliError.of(error) from None
    try:
        spark: Any = connect(remote or server.url, token=token if remote else None)  # type: ignore[union-attr]
        gone = False
        try:
            yield spark
        except BaseException as error:
            gone = server_gone(error)
            raise
        finally:
            if gone:  # nothing to release on a server that is gone
                spark.release_session_on_close = False
            finished_within(STOP_DEADLINE_S, spark.stop)
    finally:
        if server is not None:
            server.stop(timeout=STOP_DEADLINE_S)


def follow(
    spark: Any,
    table: str,
    options: dict[str, Any],
    print_out: Callable[[str], None] = print,
    until: Callable[[], bool] = lambda: False,
    listening: Callable[[], None] = lambda: None,
    source: FeedSource = FeedSource(),
) -> None:
    """Stream ``table``'s post-processed change feed to the terminal, a commit at a time as
    each arrives, until ``until()`` or a stop signal; ``listening()`` is called once the
    stream's first micro-batch has run. On a terminal a status line on stderr shows progress
    (cleared before each commit prints); elsewhere a line says what it waits for."""
    from spark_cdc import ChangelogReader
    from spark_cdc.cli.live_feed import WAITING, LiveFeed, render, status_line

    source.register(spark)
    if source.envelopes:
        raw, spec, cdc = _envelope_feed(spark, table, options, source)
        columns = _envelope_columns(raw, spec.row_id or (), table)
    else:
        reader = ChangelogReader(spark, streaming=True).format(source.format)
        raw, spec, cdc = reader.options(**options, **source.options).source_feed(table)
        columns = _user_columns(spark, table, spec.row_id or (), source)
    feed = LiveFeed(raw, spec, cdc, work_dir=str(scratch() / "live"))
    tty = sys.stderr.isatty()
    if not tty:
        print(f"spark-cdc: {WAITING} ...", file=sys.stderr, flush=True)
    started, changes, last = time.monotonic(), 0, None

    def show() -> None:
        nonlocal changes, last
        for commits in feed.batches():
            if tty:
                print("\r\033[K", end="", file=sys.stderr, flush=True)
            for commit in commits:
                print_out(render(_ordered(commit, columns), columns, feed.nets_changes))
                changes, last = changes + len(commit.rows), commit
        if tty:
            print(f"\r{status_line(changes, started, last)}\033[K", end="", file=sys.stderr)
            sys.stderr.flush()

    feed.start()
    gone = False
    try:
        while not until():
            feed.check()
            show()
            if feed.query.lastProgress is not None:
                listening()
            time.sleep(0.2)
        feed.query.processAllAvailable()  # take what is left, then stop
        show()
    except BaseException as error:
        gone = server_gone(error)
        raise
    finally:
        if tty:
            print(file=sys.stderr)
        if not gone and not feed.stop(STOP_DEADLINE_S):
            print(
                "spark-cdc: the stream did not stop in time; closing the session.", file=sys.stderr
            )


_BEFORE_AFTER = {"delete": 0, "update_preimage": 0, "update_postimage": 1, "insert": 1}


def _ordered(commit: Any, columns: list[str]) -> Any:
    """The commit's rows by the first column (the row id), the before-image ahead of the
    after-image."""
    rows = sorted(
        commit.rows,
        key=lambda r: (_sortable(r[columns[0]]), _BEFORE_AFTER[r["_change_type"]]),
    )
    return dataclasses.replace(commit, rows=rows)


def _sortable(value: Any) -> tuple[int, Any]:
    """Numbers in numeric order, everything else as text after them."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value) if is_number else (1, str(value))


def _user_columns(
    spark: Any, table: str, row_id: Any, source: FeedSource, flag: str = "--row-id"
) -> list[str]:
    """The table's columns, row id first; a row id column the table lacks is named with the
    columns it has and the ``flag`` that gave it, before any stream starts."""
    from spark_cdc.sources import source_for

    server_name = source_for(source.format).name
    columns = spark.read.format(server_name).options(**source.options).load(table).columns
    table_columns = [c for c in columns if not c.startswith("_")]
    missing = [c for c in row_id if c.split(".")[0] not in columns]
    if missing:
        raise CliError(
            "SPARK_CDC_CLI.UNKNOWN_COLUMN",
            flag=flag,
            missing=", ".join(missing),
            table=table,
            columns=", ".join(table_columns),
        )
    return [*row_id, *(c for c in table_columns if c not in row_id)]


def _envelope_feed(
    spark: Any, folder: str, options: dict[str, Any], source: FeedSource
) -> tuple[Any, Any, dict[str, Any]]:
    """An envelope folder's feed, the spec such a feed has (updates as pre- and
    post-images, no carry-overs) and the CDC options that apply to it."""
    from spark_cdc import ChangelogSpec

    row_id = [c.strip() for c in str(options["rowId"]).split(",") if c.strip()]
    spec = ChangelogSpec(
        row_id=row_id,
        contains_carryover_rows=False,
        represents_update_as_delete_and_insert=False,
    )
    cdc = {k: v for k, v in options.items() if k == "deduplicationMode"}
    return source.envelope_feed(spark, folder), spec, cdc


def _envelope_columns(raw: Any, row_id: Any, folder: str) -> list[str]:
    columns = [c for c in raw.columns if not c.startswith("_")]
    missing = [c for c in row_id if c not in columns]
    if missing:
        raise CliError(
            "SPARK_CDC_CLI.UNKNOWN_COLUMN",
            flag="--row-id",
            missing=", ".join(missing),
            table=folder,
            columns=", ".join(columns),
        )
    return [*row_id, *(c for c in columns if c not in row_id)]


def tail(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"rowId": args.row_id, "computeUpdates": True}
    if args.starting_version is not None:
        options["startingVersion"] = args.starting_version
    if args.net_changes:
        options["deduplicationMode"] = "netChanges"
    source = FeedSource.of(args)
    with session(args.remote, args.token) as spark:  # a stop: main's ``Stopped.``
        follow(spark, args.table, options, lambda text: print(text, flush=True), source=source)
    return 0


def target_arguments(args: argparse.Namespace) -> tuple[list[str], dict[str, str] | None]:
    """``--keys`` as a list, and an Iceberg target's catalog properties (None: a Delta
    target): what ``main.with_target``'s arguments say."""
    from spark_cdc.cli.catalog_properties import catalog_properties

    keys = [k.strip() for k in args.keys.split(",") if k.strip()]
    iceberg = args.format == "iceberg"
    return keys, catalog_properties(args.catalog, args.catalog_file) if iceberg else None


def apply(args: argparse.Namespace) -> int:
    """Follow a Delta table into a target with ``apply_changes``, a line per micro-batch
    applied, until stopped, or, with ``--available-now``, until what is there now is
    applied, into a Delta target or (``--format iceberg``) an Iceberg one. The checkpoint
    (by default beside a Delta target) stays: running the command
    again continues where it stopped, neither losing nor repeating a change; with
    ``--full-refresh`` the target and its state are rebuilt from the feed's start."""
    from spark_cdc import AppliedChanges, apply_changes, readStream
    from spark_cdc.cli.live_feed import finished_within
    from spark_cdc.sources import names_a_table, table_location

    keys, catalog = target_arguments(args)
    source = FeedSource.of(args)
    options: dict[str, Any] = {"rowId": ",".join(keys), "computeUpdates": True}
    if args.starting_version is not None:
        options["startingVersion"] = args.starting_version
    iceberg = args.format == "iceberg"
    if iceberg and not args.checkpoint:
        raise CliError("SPARK_CDC_CLI.CHECKPOINT_REQUIRED")
    with session(args.remote, args.token) as spark:  # a stop: main's ``Stopped.``
        source.register(spark)
        if not source.envelopes:
            _user_columns(spark, args.source, keys, source, "--keys")
        target = args.target
        if not iceberg and names_a_table(target):  # the checkpoint goes beside its location
            target = table_location(spark, target)
        checkpoint = args.checkpoint or target.rstrip("/") + "__apply_changes_checkpoint"
        if source.envelopes:
            feed = source.envelope_feed(spark, args.source)
        else:
            reader = readStream(spark).format(source.format)
            feed = reader.options(**options, **source.options).load(args.source)
        query = apply_changes(
            feed,
            args.target,
            keys=keys,
            sequence_by="_commit_version",
            stored_as_scd_type=args.scd,
            checkpoint_location=checkpoint,
            trigger={"availableNow": True} if args.available_now else None,
            full_refresh=args.full_refresh,
            format=args.format,
            catalog=catalog,
        )
        assert not isinstance(query, AppliedChanges)  # a stream starts a query
        until = "what is there now is applied" if args.available_now else "Ctrl-C stops"
        into = f"{args.target} (Iceberg, catalog {args.catalog})" if iceberg else args.target
        print(
            f"Applying the changes of {args.source} to {into} (SCD type {args.scd}, "
            f"checkpoint {checkpoint}); {until}.",
            file=sys.stderr,
            flush=True,
        )
        report, gone = BatchReport(query), False
        try:
            report.follow()
        except BaseException as error:
            gone = server_gone(error)
            raise
        finally:
            if not gone:
                if not finished_within(STOP_DEADLINE_S, query.stop):
                    print("spark-cdc: the stream did not stop in time.", file=sys.stderr)
                # The batches that ended since the last look, a stop's last one
                # included: their lines are the last a user sees.
                finished_within(STOP_DEADLINE_S, report.show_new)
    return 0


class BatchReport:
    """A line per micro-batch of an ``apply_changes`` query, each once, flushed as written."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.shown = -1

    def show_new(self) -> None:
        """Print the batches that ended since the last call."""
        from spark_cdc import applied_batches
        from spark_cdc.cli.apply_report import batch_line

        fresh = [p for p in self.query.recentProgress if int(p.batchId) > self.shown]
        applied = applied_batches(self.query) if fresh else {}
        now_ms = time.time() * 1000
        for progress in fresh:
            self.shown = max(self.shown, int(progress.batchId))
            print(batch_line(progress, applied.get(int(progress.batchId)), now_ms), flush=True)

    def follow(self) -> None:
        """Until the query ends (``availableNow``: once what was there is applied), fails,
        or a stop signal arrives. The calls to the server run with the stop deferred
        (``stop_deferred``); the waits between them stop at once."""
        while True:
            with stop_deferred():
                error = self.query.exception()
                active = self.query.isActive
                self.show_new()
            if error is not None:
                raise error
            if not active:
                return
            time.sleep(0.5)
