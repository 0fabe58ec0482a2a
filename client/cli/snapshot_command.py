"""``spark-cdc apply-snapshot``: a table's current content applied to a target as its next
snapshot (``apply_changes_from_snapshot``), for a scheduled job that mirrors or historises a
table without a changelog: each run compares what the table holds now with the target and
writes what changed, once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spark_cdc.cli.commands import session


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
        help="the snapshot: a Delta table's path or URI as the server sees it, or a table "
        "name in the server's catalog",
    )
    sub.add_argument(
        "--target",
        required=True,
        help="the target table's path or URI, or the name of a Delta table in the server's catalog",
    )
    sub.add_argument(
        "--keys", required=True, metavar="COLS", help="the column(s) identifying a row"
    )
    sub.add_argument(
        "--scd", type=int, choices=(1, 2), default=1, help="SCD type (default %(default)s)"
    )
    sub.add_argument(
        "--version",
        type=int,
        metavar="V",
        help="the snapshot's version (default: one above the last applied); one applied "
        "already is skipped, an older one refused",
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
        "and the PYICEBERG_CATALOG__<NAME>__<KEY> variables (default %(default)s)",
    )
    sub.add_argument(
        "--catalog-file",
        metavar="PATH",
        type=Path,
        help="with --format iceberg: the catalog's properties, key=value lines",
    )
    sub.set_defaults(run=apply_snapshot)
    return sub


def apply_snapshot(args: argparse.Namespace) -> int:
    """One snapshot applied, a line saying what it did."""
    from spark_cdc import apply_changes_from_snapshot
    from spark_cdc.cli.catalog_properties import catalog_properties

    keys = [k.strip() for k in args.keys.split(",") if k.strip()]
    iceberg = args.format == "iceberg"
    catalog = catalog_properties(args.catalog, args.catalog_file) if iceberg else None
    with session(args.remote, args.token) as spark:
        done = apply_changes_from_snapshot(
            args.target,
            args.source,
            keys,
            stored_as_scd_type=args.scd,
            version=args.version,
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
