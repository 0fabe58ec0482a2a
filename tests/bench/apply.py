"""``apply_changes`` against what users write today, on the same changes into the same target.

The target: ``TARGET_ROWS`` rows (10M; 100k with ``--quick``), five columns. A stream of
``MICRO_BATCHES`` micro-batches of N changes each (10k, 100k, 1M; 1k and 10k with
``--quick``) over random keys: 90% updates of existing keys, 5% deletes, 5% new keys, the
sequence the micro-batch's number. Each micro-batch is one Parquet file, read as a stream
with ``availableNow`` and ``maxFilesPerTrigger=1``, into:

- ours: ``apply_changes`` (type 1 or 2) into the target it built (its state beside it);
- hand-written: a ``foreachBatch`` function that takes the batch to Arrow (``toArrow()``),
  keeps each key's last change and runs one delta-rs MERGE, as users write it without this
  package: type 1 with a ``_seq`` column in the target so a stale update does not win
  (deletes are not remembered, so a later stale insert revives a key: less correct than
  ours), type 2 the classic staged SCD2 MERGE (close the current version, insert the new;
  changes arriving out of order are appended, not placed: less correct than ours);
- raw: the same stream into the ``noop`` sink: what reading the changes costs.

Each run starts from a fresh copy of its side's target (the copy is not timed); the first
case runs every side once more first, discarded (it starts the server's Python workers). The
figure is ours ÷ hand-written in changes per second over the micro-batches after the first
(the issue's target: at least 1.0): a stream's steady state, where ours finds the state in
its writer's memory. The first micro-batch, where ours reads its state from storage, is a
figure of its own beside it, timed from its trigger's start on both sides, less what the
stream pays once inside that trigger beyond its work, which is reported beside it in seconds
(``start_up_seconds``): Spark starts the Python processes of a data source writer inside the
first trigger (a ``foreachBatch`` function's process starts before it), which only
client-pickled code avoids. Each run copies its base to a folder no earlier run used, so no
process's cache of the files read serves a first micro-batch. Rates are from each trigger's
execution time (the query's progress), medians of interleaved repetitions; the notes give
the peak resident memory of the Python process that applied the batches (ours), sampled from
``/proc``. The growth case applies the same clustered micro-batches (a run of consecutive
ids, and new ones) to a target and to one four times larger: seconds per micro-batch after
the first, larger ÷ smaller. A separate case measures the end-to-end latency of a stream
following a Delta table (``processingTime`` trigger): from a source commit to the change
being visible in the target, in trigger intervals (target: at most 2).
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyspark import cloudpickle
from spark_cdc import AppliedChanges, apply_changes, readStream

from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread, stream_seconds
from tests.bench.worker_memory import Sampler

BENCHMARK = "apply"
TARGET_ROWS, QUICK_TARGET_ROWS = 10_000_000, 100_000
BATCHES, QUICK_BATCHES = (10_000, 100_000, 1_000_000), (1_000, 10_000)
MICRO_BATCHES = 3
# The rows of a target's base applied at once: a batch's resolved rows travel to the driver,
# and 40M at once passed Spark's default spark.driver.maxResultSize (1 GiB).
BASE_BATCH_ROWS = 10_000_000
# How ours applies the changes files (keys, sequence, deletes), for every target it builds.
APPLIED: dict[str, Any] = {
    "keys": ["id"],
    "sequence_by": "seq",
    "apply_as_deletes": "op = 'D'",
    "except_column_list": ["seq", "op"],
}
# The growth case: the same clustered batches into a target and one four times larger.
GROWTH_ROWS, QUICK_GROWTH_ROWS = (10_000_000, 40_000_000), (100_000, 400_000)
GROWTH_CHANGES, QUICK_GROWTH_CHANGES = 100_000, 1_000
STATUSES = np.array(["new", "paid", "shipped", "refunded"])
SCHEMA = "id long, status string, amount double, region string, note string, seq long, op string"
TRIGGER_S = 2.0
DV = "ours, deletion vectors"  # the side applying to a target with deletion vectors

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the foreachBatch functions


def change_columns(
    ids: np.ndarray, seq: int | np.ndarray, rng: np.random.Generator
) -> dict[str, Any]:
    count = len(ids)
    return {
        "id": pa.array(ids, pa.int64()),
        "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), count)]),
        "amount": pa.array(rng.random(count) * 100),
        "region": pa.array(np.where(ids % 2 == 0, "north", "south")),
        "note": pa.array(["bench"] * count, pa.string()),
        "seq": pa.array(np.broadcast_to(seq, count), pa.int64()),
    }


def random_changes(bench: Bench, target_rows: int, count: int) -> str:
    """``MICRO_BATCHES`` Parquet files of ``count`` changes each (built once), the
    sequence each file's number."""
    folder = bench.work / f"apply_changes_{target_rows}_{count}_x{MICRO_BATCHES}"

    def updated(batch: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(target_rows, size=int(count * 0.95), replace=False)

    return change_files(folder, target_rows, count, updated, (count,))


def change_files(
    folder: Path,
    target_rows: int,
    count: int,
    updated: Callable[[int, np.random.Generator], np.ndarray],
    seed: tuple[int, ...],
    micro_batches: int = MICRO_BATCHES,
) -> str:
    """``micro_batches`` files of ``count`` changes (made once): each batch's ``updated``
    ids of the target, then new ids after its last, the first 5% deletes, the sequence
    the file's number."""
    if not (folder / "_complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        for batch in range(micro_batches):
            rng = np.random.default_rng([*seed, batch])
            old = updated(batch, rng)
            first_new = target_rows + batch * count
            ids = np.concatenate([old, np.arange(first_new, first_new + count - len(old))])
            table = pa.table(change_columns(ids, batch + 1, rng))
            op = np.where(np.arange(len(ids)) < int(count * 0.05), "D", "U")
            table = table.append_column("op", pa.array(op))
            pq.write_table(table, folder / f"changes-{batch:03d}.parquet")
        (folder / "_complete").touch()
    return str(folder)


def file_stream(bench: Bench, source: str) -> Any:
    """One micro-batch per file, in name order."""
    reader = bench.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
    return reader.parquet(str(Path(source) / "*.parquet"))


def ours_base(bench: Bench, target_rows: int, scd_type: int, dv: bool = False) -> Path:
    """The target ``apply_changes`` builds from ``target_rows`` inserts (and its state),
    with deletion vectors when ``dv``."""
    base = bench.work / f"apply_ours_{target_rows}_{scd_type}{'_dv' if dv else ''}"
    if not (base / "_bench_complete").exists():
        shutil.rmtree(base, ignore_errors=True)
        source = bench.work / f"apply_base_{target_rows}"
        if not source.exists():
            rng = np.random.default_rng(0)
            table = pa.table(change_columns(np.arange(target_rows), 0, rng))
            source.mkdir(parents=True)
            pq.write_table(
                table.append_column("op", pa.repeat(pa.scalar("U"), target_rows)),
                source / "base.parquet",
            )
        feed = bench.spark.read.schema(SCHEMA).parquet(str(source))
        for first in range(0, target_rows, BASE_BATCH_ROWS):  # each within maxResultSize
            apply_changes(
                feed.filter(feed.id.between(first, first + BASE_BATCH_ROWS - 1)),
                str(base / "target"),
                stored_as_scd_type=scd_type,
                state_location=str(base / "state"),
                table_properties={"delta.enableDeletionVectors": str(dv).lower()},
                **APPLIED,
            )
        (base / "_bench_complete").touch()
    return base


def hand_base(bench: Bench, target_rows: int, scd_type: int) -> Path:
    base = bench.work / f"apply_hand_{target_rows}_{scd_type}"
    if not (base / "_bench_complete").exists():
        shutil.rmtree(base, ignore_errors=True)
        rng = np.random.default_rng(0)
        columns = change_columns(np.arange(target_rows), 0, rng)
        if scd_type == 1:
            columns["_seq"] = columns.pop("seq")
        else:
            columns["__START_AT"] = columns.pop("seq")
            columns["__END_AT"] = pa.nulls(target_rows, pa.int64())
        write_deltalake(str(base / "target"), pa.table(columns))
        (base / "_bench_complete").touch()
    return base


def ours_stream(bench: Bench, source: str, run: Path, scd_type: int) -> Callable[[], Any]:
    """What starts ``apply_changes`` of ``source``'s files into the copy at ``run``."""

    def start() -> Any:
        return apply_changes(
            file_stream(bench, source),
            str(run / "target"),
            stored_as_scd_type=scd_type,
            state_location=str(run / "state"),
            checkpoint_location=str(run / "checkpoint"),
            trigger={"availableNow": True},
            **APPLIED,
        )

    return start


def hand_stream(bench: Bench, source: str, run: Path, scd_type: int) -> Callable[[], Any]:
    """What starts the hand-written ``foreachBatch`` MERGE of ``source``'s files into the
    copy at ``run``."""
    writer = file_stream(bench, source).writeStream
    writer = writer.foreachBatch(hand_written(str(run / "target"), scd_type))
    writer = writer.option("checkpointLocation", str(run / "checkpoint"))
    return lambda: writer.trigger(availableNow=True).start()


_RUNS = iter(range(1 << 62))


def fresh(base: Path, run: Path) -> Path:
    """A copy of ``base`` in a folder no earlier run used: the server's processes keep
    what they read of a table's files by location, and a first micro-batch must read
    its state from storage, as after a restart."""
    return Path(shutil.copytree(base, unused_folder(run, make=False)))


def unused_folder(run: Path, make: bool = True) -> Path:
    """A folder named after ``run`` that no earlier run of this process used."""
    fresh = run.with_name(f"{run.name}-{next(_RUNS)}")
    if make:
        fresh.mkdir(parents=True)
    return fresh


def last_changes(changes: pa.Table) -> pa.Table:
    """Each key's last change (by ``seq``), as a hand-written MERGE must keep to merge."""
    order = np.lexsort((-changes.column("seq").to_numpy(), changes.column("id").to_numpy()))
    changes = changes.take(pa.array(order))
    ids = changes.column("id").to_numpy()
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    return changes.filter(pa.array(first))


def hand_written(target: str, scd_type: int) -> Any:
    """The ``foreachBatch`` function users write today (see the module docstring)."""

    def merge_batch(batch: Any, batch_id: int) -> None:
        import pyarrow as pa
        from deltalake import DeltaTable

        changes = last_changes(batch.toArrow())
        values = ["status", "amount", "region", "note"]
        table = DeltaTable(target)
        if scd_type == 1:
            (
                table.merge(
                    changes, "t.id = s.id", source_alias="s", target_alias="t", streamed_exec=False
                )
                .when_matched_delete(predicate="s.op = 'D' AND s.seq > t._seq")
                .when_matched_update(
                    {**{c: f"s.{c}" for c in values}, "_seq": "s.seq"}, predicate="s.seq > t._seq"
                )
                .when_not_matched_insert(
                    {"id": "s.id", **{c: f"s.{c}" for c in values}, "_seq": "s.seq"},
                    predicate="s.op <> 'D'",
                )
                .execute()
            )
            return
        keyed = changes.append_column("mk", changes.column("id"))
        unkeyed = changes.filter(pa.compute.not_equal(changes.column("op"), "D"))
        unkeyed = unkeyed.append_column("mk", pa.nulls(unkeyed.num_rows, pa.int64()))
        staged = pa.concat_tables([keyed, unkeyed])
        (
            table.merge(
                staged,
                "t.id = s.mk AND t.__END_AT IS NULL",
                source_alias="s",
                target_alias="t",
                streamed_exec=False,
            )
            .when_matched_update({"__END_AT": "s.seq"})
            .when_not_matched_insert(
                {
                    "id": "s.id",
                    **{c: f"s.{c}" for c in values},
                    "__START_AT": "s.seq",
                    "__END_AT": "NULL",
                },
                predicate="s.mk IS NULL",
            )
            .execute()
        )

    return merge_batch


def micro_batch_rates(count: int, start: Callable[[], Any], firsts: list[float]) -> float:
    """Changes per second over the stream's micro-batches after the first, from each
    trigger's execution time; the first trigger's seconds go to ``firsts``."""
    batches: list[list[float]] = []
    stream_seconds(start, batches)
    durations = batches[0]
    if len(durations) != MICRO_BATCHES:
        raise RuntimeError(f"expected {MICRO_BATCHES} micro-batches, the stream ran {durations}")
    firsts.append(durations[0])
    return count * (len(durations) - 1) / sum(durations[1:])


def start_up_seconds(stream: Callable[[], Callable[[], Any]]) -> float:
    """What a stream pays once, inside its first trigger, beyond its work: Spark starting
    its Python processes (a data source writer's, for ours). The first trigger of a stream
    of ``MICRO_BATCHES`` tiny micro-batches less the median of its later ones, the median
    of three fresh streams (``stream()``: what starts one, into a fresh target)."""
    samples = []
    for _ in range(3):
        batches: list[list[float]] = []
        stream_seconds(stream(), batches)
        first, *later = batches[0]
        samples.append(first - statistics.median(later))
    return statistics.median(samples)


def run(bench: Bench) -> list[Figure]:
    target_rows = QUICK_TARGET_ROWS if bench.quick else TARGET_ROWS
    figures: list[Figure] = []
    for scd_type in (1, 2):
        bases = (
            ours_base(bench, target_rows, scd_type),
            hand_base(bench, target_rows, scd_type),
            ours_base(bench, target_rows, scd_type, dv=True),
        )
        for count in QUICK_BATCHES if bench.quick else BATCHES:
            figures.extend(_case(bench, scd_type, count, target_rows, *bases, not figures))
    figures.append(_growth(bench))
    figures.append(_latency(bench))
    return figures


def _case(
    bench: Bench,
    scd_type: int,
    count: int,
    target_rows: int,
    ours_base: Path,
    hand_base: Path,
    dv_base: Path,
    warm_up: bool = False,
) -> list[Figure]:
    """Ours (a default target), the hand-written MERGE and the raw read, and ours on a
    target with deletion vectors beside them: the main figure and the option's."""
    source = random_changes(bench, target_rows, count)
    runs = bench.work / "apply_runs"
    peaks: list[float] = []
    firsts: dict[str, list[float]] = {k: [] for k in ("ours", "hand-written", "raw read", DV)}

    def ours() -> float:
        run = fresh(ours_base, runs / "ours")
        start = ours_stream(bench, source, run, scd_type)
        if bench.server_pid is None:
            return micro_batch_rates(count, start, firsts["ours"])
        with Sampler(bench.server_pid) as sampler:
            rate = micro_batch_rates(count, start, firsts["ours"])
        peaks.append(sampler.peak_kb / 1024)
        return rate

    def ours_dv() -> float:
        run = fresh(dv_base, runs / "ours-dv")
        return micro_batch_rates(count, ours_stream(bench, source, run, scd_type), firsts[DV])

    def hand() -> float:
        run = fresh(hand_base, runs / "hand")
        start = hand_stream(bench, source, run, scd_type)
        return micro_batch_rates(count, start, firsts["hand-written"])

    def raw() -> float:
        checkpoint = runs / "raw-checkpoint"
        shutil.rmtree(checkpoint, ignore_errors=True)
        writer = file_stream(bench, source).writeStream.format("noop")
        writer = writer.option("checkpointLocation", str(checkpoint))
        start = writer.trigger(availableNow=True).start
        return micro_batch_rates(count, start, firsts["raw read"])

    sides = {"ours": ours, "hand-written": hand, "raw read": raw, DV: ours_dv}
    if warm_up:  # the run's first streams start the server's Python workers
        interleaved(sides, 1)
        peaks.clear()
        for kept in firsts.values():
            kept.clear()
    start_up = _start_ups(bench, scd_type)
    paid = {**start_up, DV: start_up["ours"]}  # the noop sink starts no Python process
    samples = interleaved(sides, bench.reps)
    shutil.rmtree(runs, ignore_errors=True)
    rates = medians(samples)
    first = {  # changes/s of the first trigger, less the stream's one-time start-up
        side: count / max(statistics.median(seconds) - paid.get(side, 0.0), 1e-3)
        for side, seconds in firsts.items()
    }
    ratio = rates["ours"] / rates["hand-written"]
    first_ratio = first["ours"] / first["hand-written"]
    wanted = 1.2 if count >= 1_000_000 else 1.0  # the issue's: ahead everywhere, 1.2 at 1M
    case = f"type {scd_type}, {count:,} changes a micro-batch into {target_rows:,} rows"
    dv_ratio = rates[DV] / rates["hand-written"]
    with_dv = Figure(
        BENCHMARK,
        f"{case}, with deletion vectors",
        "ours/hand-written (changes/s, micro-batches after the first)",
        round(dv_ratio, 3),
        medians={DV: round(rates[DV]), "hand-written": round(rates["hand-written"])},
        samples={k: [round(x) for x in samples[k]] for k in (DV, "hand-written")},
        spread=paired_spread(samples[DV], samples["hand-written"]),
        notes=f"table_properties={{'delta.enableDeletionVectors': 'true'}}: "
        f"{rates[DV]:,.0f} changes/s, {dv_ratio / ratio:.2f}x the default target's",
    )
    return [
        Figure(
            BENCHMARK,
            case,
            "ours/hand-written (changes/s, micro-batches after the first)",
            round(ratio, 3),
            target=f"≥ {wanted}",
            met=ratio >= wanted,
            medians={
                **{k: round(v) for k, v in rates.items()},
                **{f"{k}, first micro-batch": round(v) for k, v in first.items()},
                "first micro-batch ratio": round(first_ratio, 3),
                **{f"start-up s ({k})": round(v, 2) for k, v in start_up.items()},
                "peak MB (ours)": max(peaks, default=0),
            },
            samples={k: [round(x) for x in v] for k, v in samples.items()},
            spread=paired_spread(samples["ours"], samples["hand-written"]),
            notes=(
                f"changes/s after the first micro-batch: ours {rates['ours']:,.0f}, hand-written "
                f"{rates['hand-written']:,.0f}, raw read {rates['raw read']:,.0f}; the first "
                f"micro-batch from its trigger's start, less the stream's one-time start-up (ours "
                f"reads its state from storage): ours {first['ours']:,.0f}, hand-written "
                f"{first['hand-written']:,.0f} ({first_ratio:.2f}x); start-up ours "
                f"{start_up['ours']:.2f} s, hand-written {start_up['hand-written']:.2f} s; "
                f"peak memory of "
                f"the applying process (ours) {max(peaks, default=0):,.0f} MB"
            ),
        ),
        with_dv,
    ]


_START_UPS: dict[int, dict[str, float]] = {}


def _start_ups(bench: Bench, scd_type: int) -> dict[str, float]:
    """Each side's one-time start-up (``start_up_seconds``), measured once per SCD type on
    a tiny target and tiny micro-batches: the same for every case of the type."""
    if scd_type not in _START_UPS:
        rows, count = 1_000, 10
        source = change_files(
            bench.work / f"apply_start_up_{scd_type}",
            rows,
            count,
            lambda batch, rng: rng.choice(rows, size=count, replace=False),
            (scd_type,),
        )
        runs = bench.work / "apply_runs" / "start-up"

        def side(base: Path, stream: Callable[..., Callable[[], Any]]) -> Callable[[], Any]:
            return lambda: stream(bench, source, fresh(base, runs), scd_type)

        _START_UPS[scd_type] = {
            "ours": start_up_seconds(side(ours_base(bench, rows, scd_type), ours_stream)),
            "hand-written": start_up_seconds(side(hand_base(bench, rows, scd_type), hand_stream)),
        }
    return _START_UPS[scd_type]


def clustered_changes(bench: Bench, target_rows: int, count: int) -> str:
    """``MICRO_BATCHES`` files of ``count`` changes whose keys are clustered, as new ids
    and recent rows are: updates of a run of consecutive ids in the middle of the target
    (a few of its files) and new ids after its last."""
    folder = bench.work / f"apply_clustered_{target_rows}_{count}_x{MICRO_BATCHES}"
    updates = int(count * 0.95)

    def updated(batch: int, rng: np.random.Generator) -> np.ndarray:
        first = target_rows // 2 + batch * updates
        return np.arange(first, first + updates)

    return change_files(folder, target_rows, count, updated, (target_rows, count))


def _growth(bench: Bench) -> Figure:
    """The same clustered micro-batches (type 1) into a target of ``GROWTH_ROWS[0]`` rows
    and one four times larger: seconds per micro-batch after the first, larger ÷ smaller
    (the issue's target: at most 1.3, a cost that follows the changes, not the table)."""
    small_rows, large_rows = QUICK_GROWTH_ROWS if bench.quick else GROWTH_ROWS
    count = QUICK_GROWTH_CHANGES if bench.quick else GROWTH_CHANGES
    runs = bench.work / "apply_runs"
    firsts: list[float] = []

    def side(rows: int) -> Callable[[], float]:
        def timed() -> float:
            base = ours_base(bench, rows, 1)
            source = clustered_changes(bench, rows, count)
            run = fresh(base, runs / f"growth_{rows}")
            start = ours_stream(bench, source, run, 1)
            return count / micro_batch_rates(count, start, firsts)  # seconds per micro-batch

        return timed

    names = {small_rows: f"{small_rows:,} rows", large_rows: f"{large_rows:,} rows"}
    samples = interleaved({names[r]: side(r) for r in (small_rows, large_rows)}, bench.reps)
    shutil.rmtree(runs, ignore_errors=True)
    case = (
        f"growth: {count:,} clustered changes a micro-batch, {large_rows:,} ÷ {small_rows:,} rows"
    )
    return growth_figure(BENCHMARK, case, samples, names[large_rows], names[small_rows])


def growth_figure(
    benchmark: str, case: str, samples: dict[str, list[float]], large: str, small: str
) -> Figure:
    """Seconds per micro-batch into the ``large`` target over the ``small`` one's, from
    each side's ``samples`` (the issue's target: at most 1.3)."""
    seconds_per_batch = medians(samples)
    ratio = seconds_per_batch[large] / seconds_per_batch[small]
    return Figure(
        benchmark,
        case,
        "seconds per micro-batch after the first, larger target ÷ smaller",
        round(ratio, 3),
        target="≤ 1.3",
        met=ratio <= 1.3,
        medians={k: round(v, 3) for k, v in seconds_per_batch.items()},
        samples={k: [round(x, 3) for x in v] for k, v in samples.items()},
        spread=paired_spread(samples[large], samples[small]),
        notes=", ".join(f"{k}: {v:.2f} s a micro-batch" for k, v in seconds_per_batch.items()),
    )


def _latency(bench: Bench) -> Figure:
    """Seconds from a source commit to its change visible in the target, over the
    trigger interval."""
    folder = bench.work / "apply_latency"
    shutil.rmtree(folder, ignore_errors=True)
    source, target = str(folder / "source"), str(folder / "target")
    rng = np.random.default_rng(1)
    columns = change_columns(np.arange(100), 0, rng)
    columns.pop("seq")
    write_deltalake(source, pa.table(columns))
    feed = readStream(bench.spark).option("rowId", "id").load(source)
    query = apply_changes(
        feed,
        target,
        keys=["id"],
        sequence_by="_commit_version",
        checkpoint_location=str(folder / "checkpoint"),
        trigger={"processingTime": f"{TRIGGER_S} seconds"},
    )
    assert not isinstance(query, AppliedChanges)  # a stream
    latencies = []
    try:
        _wait_for(lambda: DeltaTable.is_deltatable(target), query)  # the first commit
        for step in range(3 if bench.quick else 8):
            key = 1000 + step
            added = change_columns(np.array([key]), 0, rng)
            added.pop("seq")
            time.sleep(rng.uniform(0, TRIGGER_S))
            write_deltalake(source, pa.table(added), mode="append")
            committed = time.perf_counter()
            _wait_for(
                lambda k=key: any(k in a.to_pylist() for a in _ids(DeltaTable(target))), query
            )
            latencies.append(time.perf_counter() - committed)
    finally:
        query.stop()
    median = statistics.median(latencies)
    return Figure(
        BENCHMARK,
        f"end-to-end latency, trigger {TRIGGER_S:.0f} s",
        "commit to visible in the target (trigger intervals)",
        round(median / TRIGGER_S, 3),
        target="≤ 2",
        met=median / TRIGGER_S <= 2,
        medians={"seconds": round(median, 3)},
        samples={"seconds": [round(x, 3) for x in latencies]},
        notes=f"median {median:.2f} s over {len(latencies)} commits",
    )


def _wait_for(done: Callable[[], bool], query: Any, seconds: float = 120) -> None:
    """Until ``done()``; a stream that failed or took ``seconds`` ends the benchmark."""
    deadline = time.monotonic() + seconds
    while not done():
        if query.exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the stream did not apply the change: {query.exception()}")
        time.sleep(0.05)


def _ids(table: DeltaTable) -> list[Any]:
    from deltalake import QueryBuilder

    reader = QueryBuilder().register("t", table).execute("select id from t")
    return [pa.RecordBatchReader.from_stream(reader).read_all().column("id")]
