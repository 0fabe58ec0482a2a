"""``spark-cdc slots``: a PostgreSQL database's logical replication slots and the WAL each
keeps on its disk, or (``--drop``) one of them dropped, through the server's
``postgres_slots`` source (the server reaches the database and holds its password). A slot
nobody reads keeps the log until the database's disk is full: this is how a user sees it,
and ends it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from spark_cdc.cli.apply_report import byte_size
from spark_cdc.cli.commands import FeedSource, session


def add_parser(subcommands: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    sub = subcommands.add_parser(
        "slots",
        help="list a PostgreSQL database's replication slots and the WAL they keep, or drop one",
        description="List a PostgreSQL database's logical replication slots, each with the "
        "WAL it keeps on the database's disk, or drop one (--drop): a slot that nobody reads "
        "keeps the log until the disk is full. The server reaches the database.",
    )
    sub.add_argument(
        "--drop",
        metavar="SLOT",
        help="drop this slot (refused while a stream reads it); its stream's checkpoint "
        "cannot go on after",
    )
    sub.set_defaults(run=slots, source_format="postgres")
    return sub


def slots(args: argparse.Namespace) -> int:
    from spark_cdc.rewrite.server_code import make_available
    from spark_cdc.server_plugin.postgres.slots import SLOTS_SOURCE, PostgresSlotsSource

    source = FeedSource.of(args)
    options = {**source.options, **({"drop": args.drop} if args.drop else {})}
    with session(args.remote, args.token) as spark:
        make_available(spark, PostgresSlotsSource, f"the {SLOTS_SOURCE} source")
        rows = spark.read.format(SLOTS_SOURCE).options(**options).load().collect()
    for row in rows:
        print(_line(row), flush=True)
    if args.drop:
        print(f"Dropped slot {args.drop}.", file=sys.stderr, flush=True)
    elif not rows:
        print("The database has no logical replication slot.", file=sys.stderr, flush=True)
    return 0


def _line(row: Any) -> str:
    """``spark_cdc_public_orders  pgoutput  shop  idle    keeps 12.4 MB of WAL``."""
    state = "active" if row["active"] else "idle"
    return (
        f"{row['slot_name']}  {row['plugin']}  {row['database']}  {state}  "
        f"keeps {byte_size(int(row['retained_wal_bytes'] or 0))} of WAL"
    )
