"""``spark-cdc apply-snapshot``: a table's current content applied to a target as its next
snapshot (``apply_changes_from_snapshot``), for a scheduled job that mirrors or historises a
table without a changelog: each run compares what the table holds now with the target and
writes what changed, once."""

from __future__ import annotations

import argparse
import sys

from spark_cdc.cli.commands import session, target_arguments
from spark_cdc.cli.source_arguments import source_options, with_source


def add_parser(subcommands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    sub = subcommands.add_parser(
        "apply-snapshot",
        help="apply a table's current content to a target as its next snapshot",
        description="Compare what a table holds now with a target Delta or Iceberg table, "
        "by key, and write what changed, as a mirror (SCD type 1) or a history (SCD type 2, "
        "with __START_AT/__END_AT at the snapshots' versions); a version is applied once.",
    )
    sub.add_argument(
        "source",
        help="the snapshot: a table's path or URI as the server sees it (a Delta table, or "
        "with --source-format a folder Spark reads), or a table name in the server's catalog",
    )
    sub.add_argument(
        "--source-format",
        metavar="FORMAT",
        help="read SOURCE as Spark reads this format (parquet, csv, json, orc...; its options "
        "with -o, such as -o header=true for CSV); default: a Delta table, or a table name",
    )
    with_source(sub, formats=False)
    sub.add_argument(
        "--full-refresh",
        action="store_true",
        help="make the target and its state anew from this snapshot (at --version, else 1), "
        "as if none had been applied: the way out of a target or state deleted, replaced or "
        "edited by hand",
    )
    sub.add_argument(
        "--version",
        type=int,
        metavar="V",
        help="the snapshot's version (default: one above the last applied); one applied "
        "already is skipped, an older one refused",
    )
    sub.set_defaults(run=apply_snapshot)
    return sub


def apply_snapshot(args: argparse.Namespace) -> int:
    """One snapshot applied, a line saying what it did."""
    from spark_cdc import apply_changes_from_snapshot

    keys, catalog = target_arguments(args)
    options = source_options(args)  # refused before a server is started or reached
    with session(args.remote, args.token) as spark:
        done = apply_changes_from_snapshot(
            args.target,
            args.source,
            keys,
            stored_as_scd_type=args.scd,
            version=args.version,
            source_format=args.source_format,
            source_options=options,
            full_refresh=args.full_refresh,
            spark=spark,
            format=args.format,
            catalog=catalog,
        )
    for applied in done:
        if applied.skipped:
            line = f"snapshot {applied.version}: applied already, nothing written"
        else:
            line = (
                f"snapshot {applied.version}: {applied.changes} changes, {applied.keys} keys "
                f"and {applied.rows} rows written to {args.target}"
            )
        print(line, flush=True)
    print("Done.", file=sys.stderr, flush=True)
    return 0
