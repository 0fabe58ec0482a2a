"""``spark-cdc``: the command line users start from.

    spark-cdc serve [--port N] [--token-file F] a local Spark Connect server with the plugin
    spark-cdc demo [--remote URL]               the main job, end to end
    spark-cdc tail TABLE --row-id COLS [...]    follow a table's change feed until stopped
    spark-cdc apply TABLE --target T --keys COLS [--scd 2] [--available-now] [--full-refresh]
                  [--format iceberg --catalog-file F --checkpoint DIR]
                                                apply it to a target until stopped (or once)
    spark-cdc apply-snapshot TABLE --target T --keys COLS [--scd 2] [--version V]
                                                apply what it holds now as the next snapshot
    spark-cdc slots -o host=H -o database=D [--drop SLOT]
                                                a database's replication slots, or drop one
    spark-cdc --version [--remote URL]          ours, and the server's Spark version

Errors end in one sentence and a non-zero exit, never a stack trace, and never show a token.
Every command stops the same way on Ctrl-C, SIGTERM and SIGHUP (``lifecycle``); what
``serve`` and ``tail`` do is in ``commands``, the demo in ``demo``.

Imports go one way: ``main`` imports ``commands``, ``demo``, ``snapshot_command`` and
``version``, which import ``commands``, and all of them ``lifecycle``, which imports none of them.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path

from spark_cdc.cli import commands, slots_command, snapshot_command, version
from spark_cdc.cli.lifecycle import (
    CliError,
    Stopped,
    catch_stop_signals,
    quiet_grpc,
    remove_scratch,
    stop_requested,
)
from spark_cdc.cli.source_arguments import with_source
from spark_cdc.connection_defaults import DEFAULT_PORT, TOKEN_ENV


def main(argv: list[str] | None = None) -> int:
    from spark_cdc import MissingPySpark, require_pyspark

    quiet_grpc()
    args = _version_request(sys.argv[1:] if argv is None else argv) or _parser().parse_args(argv)
    if args.run is version.run and not args.remote:
        return version.run(args)  # needs no PySpark and no server
    try:
        require_pyspark()
        token = args.token = _token(args)
    except (CliError, MissingPySpark) as error:
        _fail(str(error))
        return 1
    catch_stop_signals()
    # PySpark logs every server error it raises as a multi-KB JSON line on stderr; the
    # command line says what went wrong in one sentence instead.
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logging.getLogger(name).disabled = True
    failed = True
    try:
        code = int(args.run(args) or 0)
        failed = False
        return code
    except (Stopped, KeyboardInterrupt):  # however early it came: one word for it
        print("Stopped.", file=sys.stderr, flush=True)
        failed = False
        return 0
    except Exception as error:
        if stop_requested():  # a call the stop interrupted, failing: the stop itself
            print("Stopped.", file=sys.stderr, flush=True)
            failed = False
            return 0
        # anything from Spark or the OS: one sentence
        _fail(str(masked(error, token)) if isinstance(error, CliError) else explain(error, token))
    finally:
        remove_scratch(keep_server_log=failed)
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
            "SPARK_CDC_CLI.TOKEN_FILE_UNREADABLE", file=args.token_file, reason=error.strerror
        ) from None
    token = text.splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise CliError("SPARK_CDC_CLI.TOKEN_FILE_EMPTY", file=args.token_file)
    return token


def entry() -> None:
    """The ``spark-cdc`` console script: ``main()``, then exit at once. PySpark's Connect
    client can leave threads behind (a listener bus, gRPC's) that hang interpreter shutdown
    or print warnings there; by now everything of ours has been stopped and removed."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _fail(message: str) -> None:
    print(f"spark-cdc: {message}", file=sys.stderr)


def masked(error: CliError, token: str | None) -> CliError:
    """``error`` with the token masked where it can be: in the values the sentence quotes.
    The sentence's own words are ours and hold no token (a token that is also a word, say
    ``wrong``, leaves "wrong or missing token" as it is)."""
    if not token or not any(token in value for value in error.parameters.values()):
        return error
    hidden = {name: value.replace(token, "***") for name, value in error.parameters.items()}
    return CliError(error.condition, **hidden)


def explain(error: BaseException, token: str | None = None) -> str:
    """One sentence for what the command line can run into. Our own errors arrive as
    ``[CONDITION] sentence`` already (``spark_cdc.compat.server_errors``); the rest are connection
    problems, said under our conditions, or the first line of what Spark said (the token
    masked in it), with what a server's Python raised when Spark's line is only the start
    of its traceback."""
    text = str(error)
    lowered = text.lower()
    if "unauthenticated" in lowered or "authentication token" in lowered:
        return str(CliError("SPARK_CDC_CLI.UNAUTHENTICATED"))
    if (
        "unavailable" in lowered
        or "failed to connect" in lowered
        or "connection refused" in lowered
    ):
        return str(CliError("SPARK_CDC_CLI.UNREACHABLE"))
    if token:  # Spark's text, a value we quote: it may hold the session's URL
        text = text.replace(token, "***")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    first = lines[0].removesuffix(_TRACEBACK).rstrip(": ")
    causes = [line for line in lines if _CAUSE.match(line)]
    if _TRACEBACK in text and causes:  # a server's Python failed: say what it raised
        return f"{first}: {causes[-1]}"
    return lines[0]


_TRACEBACK = "Traceback (most recent call last):"
# The last line of a Python traceback: the exception's class and message.
_CAUSE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\w*: \S")


def _demo(args: argparse.Namespace) -> int:
    from spark_cdc.cli.demo import run

    commands.require_deltalake("`spark-cdc demo` (it writes its table with it)")
    with commands.session(args.remote, args.token) as spark:
        run(spark, seconds=args.seconds, work_dir=args.work_dir)
    return 0


def _with_token(sub: argparse.ArgumentParser) -> None:
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


def _with_remote(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--remote",
        metavar="URL",
        help="a running Spark Connect server, sc://host:port (default: start a local one "
        "for this command and stop it after)",
    )


def _version_request(argv: list[str]) -> argparse.Namespace | None:
    """``spark-cdc --version [--remote URL] [--token...]``, or None for any other command
    line: a flag beside the commands, where argparse would ask for a command."""
    if "--version" not in argv:
        return None
    parser = argparse.ArgumentParser(prog="spark-cdc", add_help=False)
    parser.add_argument("--version", action="store_true")
    parser.set_defaults(run=version.run)
    _with_remote(parser)
    _with_token(parser)
    args, rest = parser.parse_known_args(argv)
    return None if rest else args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-cdc",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Change data capture for Spark Connect: follow a Delta table's change\n"
        "feed with carry-overs removed and updates detected, apply it to a target table,\n"
        "run the demo, or start a local Spark Connect server that has this package's\n"
        "sources and sinks.",
        epilog="examples:\n"
        "  spark-cdc demo\n"
        "  spark-cdc serve --port 15002\n"
        "  spark-cdc tail /data/orders --row-id order_id --remote sc://localhost:15002\n"
        "  spark-cdc apply /data/orders --target /data/orders_mirror --keys order_id\n\n"
        "Ctrl-C, SIGTERM or SIGHUP stops any command cleanly.",
    )
    parser.add_argument(
        "--version",
        action="store_true",
        help="print this package's version and exit; with --remote URL (and its token) the "
        "server's Spark version too",
    )
    subcommands = parser.add_subparsers(required=True)  # lists every command

    def with_target(sub: argparse.ArgumentParser) -> None:
        """The target a command applies to, its keys and SCD type (``apply``,
        ``apply-snapshot``)."""
        sub.add_argument(
            "--target",
            required=True,
            help="the target table's path or URI, or the name of a Delta table in the "
            "server's catalog",
        )
        sub.add_argument(
            "--keys", required=True, metavar="COLS", help="the column(s) identifying a row"
        )
        sub.add_argument(
            "--scd", type=int, choices=(1, 2), default=1, help="SCD type (default %(default)s)"
        )
        sub.add_argument(
            "--format",
            choices=("delta", "iceberg"),
            default="delta",
            help="the target's format (default %(default)s); iceberg: TARGET is namespace.table "
            "in the catalog that --catalog names",
        )
        sub.add_argument(
            "--catalog",
            default="default",
            metavar="NAME",
            help="with --format iceberg: the catalog whose properties come from --catalog-file "
            "and the PYICEBERG_CATALOG__<NAME>__<KEY> variables, as pyiceberg reads them "
            "(default %(default)s); never give them on the command line",
        )
        sub.add_argument(
            "--catalog-file",
            metavar="PATH",
            type=Path,
            help="with --format iceberg: the catalog's properties, key=value lines (variables "
            "override them)",
        )

    serve = subcommands.add_parser(
        "serve",
        help="run a local Spark Connect server with this package's sources and sinks",
        description="Run a Spark Connect server from the installed pyspark, with this "
        "package's delta_changelog source, until stopped.",
    )
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="default %(default)s")
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    serve.add_argument(
        "--shared-python-workers",
        action="store_true",
        help="sessions and streaming queries share the server's Python worker processes, and "
        "the artifacts clients add (Spark's spark.sql.artifact.isolation.enabled=false): each "
        "stream then starts no Python process of its own. For a server one user or one job owns",
    )
    _with_token(serve)
    serve.set_defaults(run=commands.serve)

    tail = subcommands.add_parser(
        "tail",
        help="follow a Delta or PostgreSQL table's change feed",
        description="Print a Delta or PostgreSQL table's changes as they are committed, one "
        "commit at a time: carry-overs removed, updates shown as update_preimage/"
        "update_postimage, and for each commit how many raw changes it had and how many "
        "carry-overs were removed.",
    )
    tail.add_argument(
        "table",
        help="the table's path or URI, as the server sees it (postgres: schema.table)",
    )
    with_source(tail)
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
    _with_remote(tail)
    _with_token(tail)
    tail.set_defaults(run=commands.tail)

    apply = subcommands.add_parser(
        "apply",
        help="apply a Delta or PostgreSQL table's changes to a target table",
        description="Follow a Delta or PostgreSQL table's change feed into a target Delta "
        "or Iceberg table, as a mirror (SCD type 1) or a history (SCD type 2, with "
        "__START_AT/__END_AT), exactly once, until stopped; run again, it continues where "
        "it stopped.",
    )
    apply.add_argument(
        "source",
        help="the source table's path or URI, as the server sees it (postgres: schema.table)",
    )
    with_source(apply)
    with_target(apply)
    apply.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the stream's checkpoint (default for a Delta target: beside it, "
        "TARGET__apply_changes_checkpoint; an Iceberg target needs one)",
    )
    apply.add_argument(
        "--starting-version",
        metavar="V",
        help="a version number or 'earliest' (default: the table as it is now, then every "
        "later commit)",
    )
    apply.add_argument(
        "--available-now",
        action="store_true",
        help="apply what the table holds now, then exit (for a scheduled job); the next "
        "run continues from there",
    )
    apply.add_argument(
        "--full-refresh",
        action="store_true",
        help="rebuild the target and its state from the feed's start (the checkpoint is "
        "set aside beside itself, and a new one starts); later runs go on from there",
    )
    _with_remote(apply)
    _with_token(apply)
    apply.set_defaults(run=commands.apply)

    slots = slots_command.add_parser(subcommands)
    with_source(slots, formats=False)
    _with_remote(slots)
    _with_token(slots)

    apply_snapshot = snapshot_command.add_parser(subcommands)
    with_target(apply_snapshot)
    _with_remote(apply_snapshot)
    _with_token(apply_snapshot)

    demo = subcommands.add_parser(
        "demo",
        help="write a Delta table and follow its changes live",
        description="Write a Delta table (appends, updates, deletes, merges, a no-op update: "
        "one commit a second) and print its change feed as it happens.",
    )
    _with_remote(demo)
    demo.add_argument(
        "--seconds", type=float, default=20.0, help="how long the writer runs (default 20)"
    )
    demo.add_argument(
        "--work-dir",
        metavar="DIR",
        help="where the table goes; with --remote, a folder the server sees at the same "
        "path (default: a temporary folder, removed after)",
    )
    _with_token(demo)
    demo.set_defaults(run=_demo)
    return parser


if __name__ == "__main__":
    entry()
