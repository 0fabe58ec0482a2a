"""How the rewrite scales with history and with width.

(a) State held by a streaming rewrite after 10, 100 and 1000 commits. The feed comes from
the test source ``cdc_sample_changelog`` (whole commits, ``commitsPerBatch`` of them per
micro-batch, so a long history takes few micro-batches): every commit holds 10 changelog
rows (after five seed commits of ten inserts: one insert of a new id, one delete, three
updates and one copy-on-write carry-over pair, on ids drawn from the live rows, so ids
are touched again and again while new ids keep arriving). A rewrite that kept anything per
id or per commit beyond the latest micro-batch would grow with the history; the figure is
the largest ``numRowsTotal`` of the stateful operator(s) over all micro-batches of a run
(Spark reports it after each micro-batch's state commit), and the bound it is held to is
what the last micro-batch brought: its input rows for the row-level aggregate (one state
row per (id, commit) group), and its distinct ids times the state rows per id for net
changes (first event, last event, one timer). Runs end with ``processAllAvailable``, whose
final no-data micro-batch releases everything, so the state there is empty; the figure
therefore looks at every micro-batch.

(b) What building the plan costs for 10, 100 and 1000 columns: ``post_process`` over a feed
that only declares its schema (building it costs no round trip either), timed on the
client (median of repeated builds, milliseconds), and the gRPC calls made while building,
counted by wrapping the session's stub as ``tests/server/test_plan.py`` does.
docs/benchmarks.md promises none; the first build of a session pays pyspark's own one-time
config fetch and is left out.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from typing import Any

from pyspark.sql import DataFrame
from spark_cdc.late_rows import first_drop
from spark_cdc.rewrite import ChangelogSpec, post_process
from spark_cdc.server_plugin.changefeed.sample_changelog import register

from tests.bench.common import Bench, Figure
from tests.support.feeds import feed, row
from tests.support.rpc_count import counting_rpcs

BENCHMARK = "scaling"
HISTORY = [10, 100, 1000]
QUICK_HISTORY = [10]
COMMITS_PER_BATCH = 25  # a micro-batch costs ~1-2 s here whatever its size: 40 for 1000
QUICK_COMMITS_PER_BATCH = 10
ROWS_PER_COMMIT = 10
SEED_COMMITS = 5  # ten inserts each: 50 live rows before the mixed commits start
WIDTHS = [10, 100, 1000]
QUICK_WIDTHS = [10, 100]
BUILDS = 30  # builds per width, timed one by one
QUICK_BUILDS = 5
ANALYSES = 3  # server analyses of the built plan (``df.schema``), for scale
SPEC = ChangelogSpec(row_id=["id"])
MODES: dict[str, dict[str, str | bool]] = {
    "dropCarryovers": {"deduplicationMode": "dropCarryovers", "computeUpdates": True},
    "netChanges": {"deduplicationMode": "netChanges", "computeUpdates": True},
}
# State rows per open row id in the net changes operator: first and last event, a timer.
NET_STATE_ROWS_PER_ID = 3


# ---------------------------------------------------------------------------------------
# (a) state after a long history
# ---------------------------------------------------------------------------------------


def history(commits: int, seed: int = 7) -> list[dict[str, Any]]:
    """``commits`` commits of ``ROWS_PER_COMMIT`` rows each, versions 1.., a valid history."""
    rng = random.Random(seed)
    live: dict[int, str] = {}
    next_id = 0
    rows: list[dict[str, Any]] = []
    for version in range(1, commits + 1):
        if version <= SEED_COMMITS:
            for _ in range(ROWS_PER_COMMIT):
                live[next_id] = f"v{next_id}.{version}"
                rows.append(row(next_id, live[next_id], "insert", version))
                next_id += 1
            continue
        deleted, carried, *updated = rng.sample(sorted(live), 5)
        rows.append(row(deleted, live.pop(deleted), "delete", version))
        rows.append(row(carried, live[carried], "delete", version))
        rows.append(row(carried, live[carried], "insert", version))
        for key in updated:
            rows.append(row(key, live[key], "delete", version))
            live[key] = f"v{key}.{version}"
            rows.append(row(key, live[key], "insert", version))
        live[next_id] = f"v{next_id}.{version}"
        rows.append(row(next_id, live[next_id], "insert", version))
        next_id += 1
    return rows


def run_stream(bench: Bench, source: DataFrame, mode: str) -> list[Any]:
    """Post-process the stream into the noop sink until it has taken everything."""
    out = post_process(source, SPEC, MODES[mode])
    checkpoint = bench.folder("scaling") / f"cp_{uuid.uuid4().hex[:8]}"
    query = out.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).start()
    try:
        query.processAllAvailable()
        return list(query.recentProgress)
    finally:
        query.stop()


def _state_rows(progress: Any) -> int:
    return sum(op.numRowsTotal for op in progress.stateOperators)


def micro_batches(rows: list[dict[str, Any]], per_batch: int) -> list[list[dict[str, Any]]]:
    """The rows of each micro-batch, as the source cuts them: ``per_batch`` whole commits."""
    versions = sorted({r["_commit_version"] for r in rows})
    batch_of = {v: i // per_batch for i, v in enumerate(versions)}
    batches: list[list[dict[str, Any]]] = [[] for _ in range(max(batch_of.values()) + 1)]
    for r in rows:
        batches[batch_of[r["_commit_version"]]].append(r)
    return batches


def state_bound(batch: list[dict[str, Any]], mode: str) -> int:
    """What one micro-batch may leave in state: a row per (id, commit) group for the
    row-level aggregate (at most its rows), ``NET_STATE_ROWS_PER_ID`` per id it touched for
    net changes."""
    if mode == "dropCarryovers":
        return len(batch)
    return len({r["id"] for r in batch}) * NET_STATE_ROWS_PER_ID


def measure_state(bench: Bench, commits: int, mode: str) -> Figure:
    per_batch = QUICK_COMMITS_PER_BATCH if bench.quick else COMMITS_PER_BATCH
    rows = history(commits)
    source = feed(bench.spark, rows, streaming=True, commits_per_batch=per_batch)
    started = time.perf_counter()
    progress = run_stream(bench, source, mode)
    took = time.perf_counter() - started
    states = [_state_rows(p) for p in progress]
    with_input = [s for p, s in zip(progress, states, strict=True) if p.numInputRows > 0]
    bound = max(state_bound(batch, mode) for batch in micro_batches(rows, per_batch))
    drop = first_drop(progress)
    return Figure(
        benchmark=BENCHMARK,
        case=f"streaming {mode} + computeUpdates, {commits:,} commits",
        ratio_label="state rows (max over micro-batches)",
        ratio=max(states),
        target=f"≤ {bound} (one micro-batch)",
        met=max(states) <= bound and drop is None,
        medians={
            "state rows max": max(states),
            "state rows after last data micro-batch": with_input[-1],
            "state rows at end": states[-1],
            "bound": bound,
            "micro-batches": len(progress),
            "seconds": round(took, 1),
        },
        samples={"state rows per micro-batch": states},
        notes=(
            f"{ROWS_PER_COMMIT} rows per commit, {per_batch} commits per micro-batch "
            f"(cdc_sample_changelog commitsPerBatch); {len({r['id'] for r in rows})} ids in "
            "the history; bound: "
            + (
                "rows of the largest micro-batch"
                if mode == "dropCarryovers"
                else f"{NET_STATE_ROWS_PER_ID} x ids touched by the busiest micro-batch"
            )
            + "; "
            + ("no row dropped behind the watermark" if drop is None else f"DROPPED: {drop}")
        ),
    )


# ---------------------------------------------------------------------------------------
# (b) plan building: time and round trips
# ---------------------------------------------------------------------------------------


def wide_schema(columns: int) -> str:
    """``columns`` data columns of mixed types, ``id`` first, and the CDC metadata."""
    types = ["bigint", "string", "double", "int", "decimal(12,2)", "timestamp", "boolean"]
    data = ["id bigint", *[f"c{i} {types[i % len(types)]}" for i in range(1, columns)]]
    return ", ".join([*data, "_change_type string", "_commit_version long",
                      "_commit_timestamp timestamp"])  # fmt: skip


def _analysis_ms(build: Any) -> float:
    """Median time of the server's analysis of a freshly built plan (one request each)."""
    times = []
    for _ in range(ANALYSES):
        out = build()
        started = time.perf_counter()
        out.schema  # noqa: B018  (the request is the point)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure_build(bench: Bench, columns: int, streaming: bool, mode: str) -> Figure:
    spark = bench.spark
    source = feed(spark, [], schema=wide_schema(columns), streaming=streaming)

    def build() -> DataFrame:
        return post_process(source, SPEC, MODES[mode])

    build()  # pyspark's one-time config fetch, uncounted
    builds = QUICK_BUILDS if bench.quick else BUILDS
    times: list[float] = []
    with counting_rpcs(spark) as rpcs:
        for _ in range(builds):
            started = time.perf_counter()
            build()
            times.append((time.perf_counter() - started) * 1000)
    calls = len(rpcs.calls)
    build_ms = statistics.median(times)
    kind = "streaming" if streaming else "batch"
    return Figure(
        benchmark=BENCHMARK,
        case=f"build: {kind} {mode} + computeUpdates, {columns:,} columns",
        ratio_label="build ms (median)",
        ratio=round(build_ms, 3),
        target="0 round trips",
        met=calls == 0,
        medians={
            "build ms": round(build_ms, 3),
            "round trips": calls,
            **({} if bench.quick else {"server analysis ms": round(_analysis_ms(build), 1)}),
        },
        samples={"build ms": [round(t, 3) for t in times]},
        notes=(
            f"{builds} builds; gRPC calls while building: {sorted(set(rpcs.calls)) or 'none'}; "
            "server analysis = df.schema of a fresh build, for scale (not part of building)"
        ),
    )


def run(bench: Bench) -> list[Figure]:
    register(bench.spark)
    figures = [
        measure_state(bench, commits, mode)
        for mode in MODES
        for commits in (QUICK_HISTORY if bench.quick else HISTORY)
    ]
    figures += [
        measure_build(bench, columns, streaming, mode)
        for streaming in (False, True)
        for mode in MODES
        for columns in (QUICK_WIDTHS if bench.quick else WIDTHS)
    ]
    return figures
