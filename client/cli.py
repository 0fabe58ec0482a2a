"""``spark-cdc``: the command line users start from.

    spark-cdc serve [--port N] [--token T]      a local Spark Connect server with the plugin
    spark-cdc demo [--remote URL]               the main job, end to end
    spark-cdc tail TABLE --row-id COLS [...]    follow a table's change feed until Ctrl-C

Errors end in one sentence and a non-zero exit, never a stack trace, and never show a token.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TOKEN_ENV = "SPARK_CDC_TOKEN"
DEFAULT_PORT = 15002


class CliError(Exception):
    """Ends the command with this one sentence."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    token = getattr(args, "token", None)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except CliError as error:
        _fail(str(error), token)
    except Exception as error:  # anything from Spark or the OS: one sentence
        _fail(explain(error), token)
    return 1


def _fail(message: str, token: str | None) -> None:
    if token:
        message = message.replace(token, "***")
    print(f"spark-cdc: {message}", file=sys.stderr)


def explain(error: BaseException) -> str:
    """One sentence for what the command line can run into. Our own errors arrive as
    ``[CONDITION] sentence`` already (``spark_cdc.server_errors``); the rest are connection
    problems, said plainly, or the first line of what Spark said."""
    text = str(error)
    lowered = text.lower()
    if "unauthenticated" in lowered or "authentication token" in lowered:
        return (
            "The server refused the connection: wrong or missing token "
            "(set --token or $SPARK_CDC_TOKEN)."
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


# -- serve ---------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    from spark_cdc.local_server import ServerStartError, start_local_server

    try:
        server = start_local_server(port=args.port, host=args.host, token=args.token)
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
    except KeyboardInterrupt:
        print("\nStopping the server ...", file=sys.stderr)
        return 0
    finally:
        server.stop()


# -- tail ----------------------------------------------------------------------------------


@contextmanager
def _session(remote: str | None, token: str | None) -> Iterator[Any]:
    """A session on ``remote`` or on a local server started (and stopped) for the command."""
    from pyspark.sql import SparkSession
    from spark_cdc.local_server import ServerStartError, start_local_server

    server = None
    if remote:
        _check_reachable(remote)
        url = remote if not token or "token=" in remote else f"{remote.rstrip('/')}/;token={token}"
    else:
        print("Starting a local Spark Connect server on 127.0.0.1 ...", file=sys.stderr, flush=True)
        try:
            server = start_local_server(conf={"spark.sql.shuffle.partitions": "4"})
        except ServerStartError as error:
            raise CliError(str(error).splitlines()[0]) from None
        url = server.url
    spark = SparkSession.builder.remote(url).create()
    try:
        spark.range(1).collect()  # fail here, clearly, on a wrong URL or token
        yield spark
    finally:
        try:
            spark.stop()
        finally:
            if server is not None:
                server.stop()


def _check_reachable(url: str) -> None:
    """pyspark retries an unreachable server for minutes; a TCP probe answers at once."""
    import socket
    from urllib.parse import urlparse

    address = urlparse(url.split(";")[0].replace("sc://", "http://", 1))
    try:
        with socket.create_connection((address.hostname or "localhost", address.port or 15002), 5):
            pass
    except OSError:
        raise CliError(
            f"Cannot reach the Spark Connect server at {address.hostname}:{address.port}: "
            "is it running, and is the URL right?"
        ) from None


def follow(
    spark: Any,
    table: str,
    options: dict[str, Any],
    print_out: Callable[[str], None] = print,
    until: Callable[[], bool] = lambda: False,
) -> None:
    """Stream ``table``'s post-processed change feed to the terminal until ``until()`` or
    Ctrl-C, with a status line on a terminal."""
    from spark_cdc import ChangelogReader, register_delta_changelog
    from spark_cdc.live_feed import LiveFeed, render, status_line

    register_delta_changelog(spark)
    df = ChangelogReader(spark, streaming=True).options(**options).changes(table)
    columns = [c for c in _table_columns(spark, table) if not c.startswith("_")]
    feed = LiveFeed(df).start()
    started, total, last = time.monotonic(), 0, None
    tty = sys.stderr.isatty()

    def show() -> None:
        nonlocal total, last
        for _, rows in feed.batches():
            print_out(render(_ordered(rows, columns), columns))
            total += len(rows)
            last = max(((r["_commit_version"], r["_commit_timestamp"]) for r in rows), default=last)
        if tty:
            status = status_line(total, started, last)
            print(f"\r{status}\033[K", end="", file=sys.stderr, flush=True)

    try:
        while not until():
            feed.check()
            show()
            time.sleep(0.5)
        feed.query.processAllAvailable()  # take what is left, then stop
        show()
    finally:
        if tty:
            print(file=sys.stderr)
        feed.stop()


_BEFORE_AFTER = {"delete": 0, "update_preimage": 0, "update_postimage": 1, "insert": 1}


def _ordered(rows: list[Any], columns: list[str]) -> list[Any]:
    """By commit, then row id, the before-image ahead of the after-image."""
    return sorted(
        rows,
        key=lambda r: (
            r["_commit_version"],
            _sortable(r[columns[0]]),
            _BEFORE_AFTER[r["_change_type"]],
        ),
    )


def _sortable(value: Any) -> tuple[int, Any]:
    """Numbers in numeric order, everything else as text after them."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value) if is_number else (1, str(value))


def _table_columns(spark: Any, table: str) -> list[str]:
    return spark.read.format("delta_changelog").load(table).columns


def _tail(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"rowId": args.row_id, "computeUpdates": True}
    if args.starting_version is not None:
        options["startingVersion"] = args.starting_version
    if args.net_changes:
        options["deduplicationMode"] = "netChanges"
    with _session(args.remote, args.token) as spark:
        try:
            follow(spark, args.table, options, lambda text: print(text, flush=True))
        except KeyboardInterrupt:
            print("Stopped.", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from spark_cdc.demo import run

    with _session(args.remote, args.token) as spark:
        run(spark, seconds=args.seconds, work_dir=args.work_dir)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-cdc", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(required=True, metavar="{serve,demo,tail}")

    def with_token(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--token",
            default=os.environ.get(TOKEN_ENV),
            help=f"Spark Connect token (default ${TOKEN_ENV}; prefer the variable: "
            "command lines are visible to other users)",
        )

    serve = commands.add_parser("serve", help="run a local Spark Connect server with the plugin")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT)
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    with_token(serve)
    serve.set_defaults(run=_serve)

    tail = commands.add_parser("tail", help="follow a Delta table's change feed")
    tail.add_argument("table", help="the Delta table's path or URI, as the server sees it")
    tail.add_argument("--row-id", required=True, help="row id column(s), comma-separated")
    tail.add_argument("--starting-version", help="a version, or 'latest' (default: snapshot)")
    tail.add_argument("--net-changes", action="store_true", help="net changes per row id")
    tail.add_argument("--remote", help="sc://host:port of a running server (default: start one)")
    with_token(tail)
    tail.set_defaults(run=_tail)

    demo = commands.add_parser("demo", help="write a Delta table and stream its changes")
    demo.add_argument("--remote", help="sc://host:port of a running server (default: start one)")
    demo.add_argument("--seconds", type=float, default=20.0, help="how long the writer runs")
    demo.add_argument("--work-dir", help="where the demo table goes (the server must see it)")
    with_token(demo)
    demo.set_defaults(run=_demo)
    return parser


if __name__ == "__main__":
    sys.exit(main())
