"""The main job, for now: a streaming change feed with carry-overs and delete+insert updates,
post-processed on the client and printed commit by commit.

    python -m client.demo [--remote sc://host:port]

Without ``--remote`` it starts a local Spark Connect server (127.0.0.1) and stops it after.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import datetime, timezone
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from client.local_server import LocalServer, ServerStartError, start_local_server
from rewrite import ChangelogSpec, post_process
from server_plugin.sample_changelog import SOURCE_NAME, commits_option, register

SCHEMA = (
    "order_id int, status string, amount double, "
    "_change_type string, _commit_version long, _commit_timestamp timestamp"
)
START = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)


def _change(order: int, status: str, amount: float, kind: str, version: int) -> dict[str, Any]:
    return {
        "order_id": order,
        "status": status,
        "amount": amount,
        "_change_type": kind,
        "_commit_version": version,
        "_commit_timestamp": START + version * 60_000_000,
    }


# What a copy-on-write table writes: every rewritten file re-adds its unchanged rows.
COMMITS = [
    [_change(i, "new", 10.0 * i, "insert", 0) for i in range(1, 5)],
    # UPDATE orders SET status='paid' WHERE order_id=2: the file holding 1-3 is rewritten.
    [_change(i, "new", 10.0 * i, "delete", 1) for i in (1, 2, 3)]
    + [_change(1, "new", 10.0, "insert", 1), _change(2, "paid", 20.0, "insert", 1)]
    + [_change(3, "new", 30.0, "insert", 1)],
    # DELETE WHERE order_id=4, INSERT order 5.
    [_change(4, "new", 40.0, "delete", 2), _change(5, "new", 50.0, "insert", 2)],
    # MERGE: order 1 shipped, order 3 carried over, order 2 refunded.
    [
        _change(i, s, a, "delete", 3)
        for i, s, a in ((1, "new", 10.0), (2, "paid", 20.0), (3, "new", 30.0))
    ]
    + [_change(1, "shipped", 10.0, "insert", 3), _change(2, "refunded", 0.0, "insert", 3)]
    + [_change(3, "new", 30.0, "insert", 3)],
]


def run(spark: SparkSession) -> None:
    register(spark)
    feed = (
        spark.readStream.format(SOURCE_NAME)
        .option("schema", SCHEMA)
        .option("commits", commits_option(COMMITS))
        .load()
    )
    spec = ChangelogSpec(row_id=["order_id"])
    changes = post_process(feed, spec, {"computeUpdates": True})
    name = f"cdc_demo_{uuid.uuid4().hex[:8]}"
    query = changes.writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    out = spark.table(name)
    for version, raw in enumerate(COMMITS):
        print(f"\ncommit {version}: {len(raw)} raw change rows -> post-processed:")
        rows = out.where(F.col("_commit_version") == version).orderBy(
            "order_id", F.desc("_change_type")
        )
        rows.drop("_commit_version").show(truncate=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m client.demo", description=__doc__)
    parser.add_argument("--remote", help="an existing Spark Connect server (sc://host:port)")
    args = parser.parse_args(argv)
    server: LocalServer | None = None
    try:
        if args.remote:
            url = args.remote
        else:
            print("Starting a local Spark Connect server on 127.0.0.1 ...", flush=True)
            server = start_local_server()
            url = server.url
        spark = SparkSession.builder.remote(url).getOrCreate()
        try:
            run(spark)
        finally:
            spark.stop()
    except ServerStartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
