"""``spark-cdc``: the command line users start from.

    spark-cdc serve [--port N] [--token-file F] a local Spark Connect server with the plugin
    spark-cdc demo [--remote URL]               the main job, end to end
    spark-cdc tail TABLE --row-id COLS [...]    follow a table's change feed until stopped

Errors end in one sentence and a non-zero exit, never a stack trace, and never show a token.

Ctrl-C, SIGTERM and SIGHUP stop every command the same way, in bounded time: the stream is
stopped (and when it does not stop within ``STOP_DEADLINE_S``, its session is closed, which
ends it on the server), a server the command started is stopped with its whole process
group, and temporary folders are removed. A second signal while that runs skips to the end:
the server's process group is killed at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

TOKEN_ENV = "SPARK_CDC_TOKEN"
DEFAULT_PORT = 15002
STOP_DEADLINE_S = 20.0  # for the stream's stop, then again for the session's
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class CliError(Exception):
    """Ends the command with this one sentence."""


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it; every ``finally`` runs."""


def _first_signal(signum: int, frame: FrameType | None) -> None:
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _second_signal)
    # While the session closes, gRPC's own threads may still be reading from it and fail
    # (seen in CI: a traceback from a gRPC thread after Ctrl-C on a loaded machine). The
    # user asked to stop; what threads say from here on is not news.
    threading.excepthook = lambda args: None
    raise Stopped(signum)


def _second_signal(signum: int, frame: FrameType | None) -> None:
    from spark_cdc.testing.local_server import RUNNING

    for server in list(RUNNING):
        server.kill()
    _remove_scratch()
    sys.stderr.write("\nStopped at once.\n")
    os._exit(0)


def quiet_grpc(environ: dict[str, str] | Any = os.environ) -> None:
    """gRPC's C core logs to stderr on its own, e.g. an epoll error from its poller thread
    when Ctrl-C closes the channel under it (seen once in the 4.0 test matrix, as the first
    line of ``tail``'s output). The command says what went wrong in its own sentence, so
    those lines are off unless the user sets ``GRPC_VERBOSITY`` to debug; read once, when
    gRPC starts, so this runs before anything imports it."""
    environ.setdefault("GRPC_VERBOSITY", "NONE")


def main(argv: list[str] | None = None) -> int:
    from spark_cdc import MissingPySpark, require_pyspark

    quiet_grpc()
    args = _parser().parse_args(argv)
    try:
        require_pyspark()
        token = args.token = _token(args)
    except (CliError, MissingPySpark) as error:
        _fail(str(error), None)
        return 1
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _first_signal)
    # PySpark logs every server error it raises as a multi-KB JSON line on stderr; the
    # command line says what went wrong in one sentence instead.
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).disabled = True
    failed = True
    try:
        code = int(args.run(args) or 0)
        failed = False
        return code
    except (Stopped, KeyboardInterrupt):
        failed = False
        return 0
    except CliError as error:
        _fail(str(error), token)
    except Exception as error:  # anything from Spark or the OS: one sentence
        _fail(explain(error), token)
    finally:
        _remove_scratch(keep_server_log=failed)
    return 1


def _token(args: argparse.Namespace) -> str | None:
    """The token from ``--token``, ``--token-file`` or ``$SPARK_CDC_TOKEN``, in that order;
    None for a command that takes none."""
    if not hasattr(args, "token"):
        return None
    if args.token_file is None:
        return args.token or os.environ.get(TOKEN_ENV) or None
    try:
        text = sys.stdin.read() if str(args.token_file) == "-" else args.token_file.read_text()
    except OSError as error:
        raise CliError(
            f"Cannot read the token file {args.token_file}: {error.strerror}; "
            "give a readable file, or '-' for standard input."
        ) from None
    token = text.splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise CliError(
            f"The token file {args.token_file} is empty; put the token on its first line."
        )
    return token


_scratch: list[Path] = []


def scratch() -> Path:
    """The command's own temporary folder (a server's log, the live feed's spool, the
    demo's table), removed when the command ends, after any server it started has stopped,
    so nothing a late write recreates is left behind."""
    if not _scratch:
        _scratch.append(Path(tempfile.mkdtemp(prefix="spark-cdc-")))
    return _scratch[0]


def _remove_scratch(keep_server_log: bool = False) -> None:
    """Remove the command's folder; after a failure, keep a server log it holds (and say
    where) for the diagnosis."""
    while _scratch:
        folder = _scratch.pop()
        log = folder / "server.log"
        if keep_server_log and log.exists():
            for entry in folder.iterdir():
                if entry.name not in (log.name, "log4j2.properties"):
                    shutil.rmtree(entry, ignore_errors=True)
            print(f"spark-cdc: the server's log is kept in {log}", file=sys.stderr)
        else:
            _remove_settled(folder)


def _remove_settled(folder: Path, within_s: float = 5.0) -> None:
    """Remove ``folder``, again while something still writes into it: a micro-batch the
    server was writing when the stream stopped can land a moment later (seen in tests)."""
    deadline = time.monotonic() + within_s
    shutil.rmtree(folder, ignore_errors=True)
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.25)
        shutil.rmtree(folder, ignore_errors=True)


def entry() -> None:
    """The ``spark-cdc`` console script: ``main()``, then exit at once. PySpark's Connect
    client can leave threads behind (a listener bus, gRPC's) that hang interpreter shutdown
    or print warnings there; by now everything of ours has been stopped and removed."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(message: str, token: str | None) -> None:
    if token:
        message = message.replace(token, "***")
    print(f"spark-cdc: {message}", file=sys.stderr)


def explain(error: BaseException) -> str:
    """One sentence for what the command line can run into. Our own errors arrive as
    ``[CONDITION] sentence`` already (``spark_cdc.compat.server_errors``); the rest are connection
    problems, said plainly, or the first line of what Spark said."""
    text = str(error)
    lowered = text.lower()
    if "unauthenticated" in lowered or "authentication token" in lowered:
        return (
            "The server refused the connection: wrong or missing token "
            "(set $SPARK_CDC_TOKEN or --token-file)."
        )
    if (
        "unavailable" in lowered
        or "failed to connect" in lowered
        or "connection refused" in lowered
    ):
        return "Cannot reach the Spark Connect server: is it running, and is the URL right?"
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__


def _require_server_parts(needed_by: str) -> None:
    """Refuse before any JVM starts: full PySpark (a thin client's cannot start a server),
    then deltalake."""
    from spark_cdc.testing.local_server import ServerStartError, check_full_pyspark

    try:
        check_full_pyspark()
    except ServerStartError as error:
        raise CliError(str(error)) from None
    _require_deltalake(needed_by)


def _require_deltalake(needed_by: str) -> None:
    """Refuse before any JVM starts: a server whose Python lacks deltalake lists the source
    and fails every read of it; the demo's writer needs it here."""
    from spark_cdc.server_plugin.dependencies import DELTALAKE, missing, missing_dependency

    problem = missing(DELTALAKE)
    if problem is not None:
        error = missing_dependency(
            DELTALAKE, problem, needed_by, python="This Python", then="then run it again"
        )
        raise CliError(str(error).splitlines()[0])


# -- serve ---------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    from spark_cdc.testing.local_server import ServerStartError, start_local_server

    _require_server_parts("the server `spark-cdc serve` starts")
    try:
        server = start_local_server(
            port=args.port, host=args.host, token=args.token, log_path=scratch() / "server.log"
        )
    except ServerStartError as error:
        raise CliError(str(error).splitlines()[0]) from None
    url = f"sc://localhost:{server.port}"
    shown = f"{url}/;token=<your token>" if args.token else url
    print(f"Spark Connect server with the delta_changelog source on {args.host}:{server.port}")
    print(f"Connect with: {shown}    (Ctrl-C stops it; log: {server.log_path})", flush=True)
    try:
        while server.alive():
            time.sleep(0.5)
        raise CliError(
            f"The server exited with code {server.process.returncode}; see {server.log_path}."
        )
    except (Stopped, KeyboardInterrupt):
        print("\nStopping the server ...", file=sys.stderr, flush=True)
        return 0
    finally:
        server.stop(timeout=STOP_DEADLINE_S)


# -- tail ----------------------------------------------------------------------------------


@contextmanager
def _session(remote: str | None, token: str | None) -> Iterator[Any]:
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
            server = start_local_server(
                conf={"spark.sql.shuffle.partitions": "4"}, log_path=scratch() / "server.log"
            )
        except ServerStartError as error:
            raise CliError(str(error).splitlines()[0]) from None
    try:
        spark = connect(remote or server.url, token=token if remote else None)  # type: ignore[union-attr]
        try:
            yield spark
        finally:
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
) -> None:
    """Stream ``table``'s post-processed change feed to the terminal, a commit at a time as
    each arrives, until ``until()`` or a stop signal; ``listening()`` is called once the
    stream's first micro-batch has run. On a terminal a status line on stderr shows progress
    (cleared before each commit prints); elsewhere a line says what it waits for."""
    from spark_cdc import ChangelogReader, register_delta_changelog
    from spark_cdc.cli.live_feed import WAITING, LiveFeed, render, status_line

    register_delta_changelog(spark)
    raw, spec, cdc = ChangelogReader(spark, streaming=True).options(**options).source_feed(table)
    columns = _user_columns(spark, table, spec.row_id or ())
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
    try:
        while not until():
            feed.check()
            show()
            if feed.query.lastProgress is not None:
                listening()
            time.sleep(0.2)
        feed.query.processAllAvailable()  # take what is left, then stop
        show()
    finally:
        if tty:
            print(file=sys.stderr)
        if not feed.stop(STOP_DEADLINE_S):
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


def _user_columns(spark: Any, table: str, row_id: Any) -> list[str]:
    """The table's columns, row id first; a row id column the table lacks is named with the
    columns it has, before any stream starts."""
    columns = [c for c in spark.read.format("delta_changelog").load(table).columns]
    table_columns = [c for c in columns if not c.startswith("_")]
    missing = [c for c in row_id if c.split(".")[0] not in columns]
    if missing:
        raise CliError(
            f"--row-id names {', '.join(missing)}, which the table {table} does not have; "
            f"its columns are: {', '.join(table_columns)}."
        )
    return [*row_id, *(c for c in table_columns if c not in row_id)]


def _tail(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"rowId": args.row_id, "computeUpdates": True}
    if args.starting_version is not None:
        options["startingVersion"] = args.starting_version
    if args.net_changes:
        options["deduplicationMode"] = "netChanges"
    try:
        with _session(args.remote, args.token) as spark:
            follow(spark, args.table, options, lambda text: print(text, flush=True))
    except (Stopped, KeyboardInterrupt):
        print("Stopped.", file=sys.stderr, flush=True)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from spark_cdc.cli.demo import run

    _require_deltalake("`spark-cdc demo` (it writes its table with it)")
    with _session(args.remote, args.token) as spark:
        run(spark, seconds=args.seconds, work_dir=args.work_dir)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-cdc",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Change data capture for Spark Connect: follow a Delta table's change\n"
        "feed with carry-overs removed and updates detected, run the demo, or start a\n"
        "local Spark Connect server that has the delta_changelog source.",
        epilog="examples:\n"
        "  spark-cdc demo\n"
        "  spark-cdc serve --port 15002\n"
        "  spark-cdc tail /data/orders --row-id order_id --remote sc://localhost:15002\n\n"
        "Ctrl-C, SIGTERM or SIGHUP stops any command cleanly.",
    )
    commands = parser.add_subparsers(required=True, metavar="{serve,demo,tail}")

    def with_token(sub: argparse.ArgumentParser) -> None:
        given = sub.add_mutually_exclusive_group()
        given.add_argument(
            "--token",
            help="the server's authentication token. Every user of this machine can read it "
            f"in `ps` while the command runs: prefer ${TOKEN_ENV} (the default) or "
            "--token-file. Never printed",
        )
        given.add_argument(
            "--token-file",
            metavar="PATH",
            type=Path,
            help="read the token from this file's first line ('-': from standard input)",
        )

    def with_remote(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--remote",
            metavar="URL",
            help="a running Spark Connect server, sc://host:port (default: start a local one "
            "for this command and stop it after)",
        )

    serve = commands.add_parser(
        "serve",
        help="run a local Spark Connect server with the delta_changelog source",
        description="Run a Spark Connect server from the installed pyspark, with this "
        "package's delta_changelog source, until stopped.",
    )
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="default %(default)s")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    with_token(serve)
    serve.set_defaults(run=_serve)

    tail = commands.add_parser(
        "tail",
        help="follow a Delta table's change feed",
        description="Print a Delta table's changes as they are committed, one commit at a "
        "time: carry-overs removed, updates shown as update_preimage/update_postimage, and "
        "for each commit how many raw changes it had and how many carry-overs were removed.",
    )
    tail.add_argument("table", help="the table's path or URI, as the server sees it")
    tail.add_argument(
        "--row-id",
        required=True,
        metavar="COLS",
        help="the column(s) identifying a row, comma-separated",
    )
    tail.add_argument(
        "--starting-version",
        metavar="V",
        help="a version number, 'earliest' or 'latest' (default: the table as it is now, "
        "then every later commit)",
    )
    tail.add_argument(
        "--net-changes",
        action="store_true",
        help="show each micro-batch's net change per row id instead of every change",
    )
    with_remote(tail)
    with_token(tail)
    tail.set_defaults(run=_tail)

    demo = commands.add_parser(
        "demo",
        help="write a Delta table and follow its changes live",
        description="Write a Delta table (appends, updates, deletes, merges, a no-op update: "
        "one commit a second) and print its change feed as it happens.",
    )
    with_remote(demo)
    demo.add_argument(
        "--seconds", type=float, default=20.0, help="how long the writer runs (default 20)"
    )
    demo.add_argument(
        "--work-dir",
        metavar="DIR",
        help="where the table goes; with --remote, a folder the server sees at the same "
        "path (default: a temporary folder, removed after)",
    )
    with_token(demo)
    demo.set_defaults(run=_demo)
    return parser


if __name__ == "__main__":
    entry()
