"""``python -m tests.bench`` (``make bench``): run the benchmarks on a local Spark Connect
server, write ``results.json`` and the chart (``docs/img/bench-chart.png``, committed so that
the page shows it on GitHub as in the site), print the table docs/benchmarks.md shows.

    python -m tests.bench [--only streaming,batch,...] [--quick] [--reps N] [--out DIR]
        [--chart PNG]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from spark_cdc.testing.local_server import start_local_server

from tests.bench.common import Bench, Figure
from tests.bench.machine import describe_machine
from tests.bench.report import draw_chart, table

BENCHMARKS = (
    "streaming",
    "delta_batch",
    "batch",
    "delta_source",
    "latency",
    "scaling",
    "engines",
    "worker_memory",
    "net_changes",
    "default_partitions",
    "long_lived",
    "apply",
    "apply_iceberg",
    "apply_iceberg_growth",
    "apply_scheduled",
    "iceberg_source",
    "postgres_source",
    "postgres_follow",
    "snapshot",
    "envelopes",
    "first_load",
)
# What ``--only NAME`` runs with it: ``apply`` is every target format's.
INCLUDED = {"apply": ("apply_iceberg", "apply_iceberg_growth", "apply_scheduled")}

# The server settings the benchmarks run with, recorded with the results (docs/benchmarks.md,
# "Benchmarks"). One shuffle partition per core: each is a state store that every
# micro-batch loads and commits. The throughput collector: a streaming aggregate that
# buffers whole rows makes garbage at the rate it reads.
CHART = Path(__file__).resolve().parents[2] / "docs" / "img" / "bench-chart.png"

SERVER_CONF = {
    "spark.sql.shuffle.partitions": str(os.cpu_count() or 2),
    "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated names")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per side (median)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--chart", type=Path, default=CHART, help="where the PNG chart goes")
    parser.add_argument("--work", type=Path, help="folder for tables (kept between runs)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    names += [n for given in names for n in INCLUDED.get(given, ()) if n not in names]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")

    work = args.work or Path(tempfile.gettempdir()) / "spark-cdc-bench"
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    conf = dict(SERVER_CONF)
    for name in names:  # a benchmark may need more of the server (net_changes: a connector)
        extra = getattr(importlib.import_module(f"tests.bench.{name}"), "server_conf", None)
        if extra is not None:
            conf.update(extra(work))
    server = start_local_server(conf=conf, log_path=work / "server.log")
    started = time.time()
    figures: list[Figure] = []
    spark = None
    try:
        spark = SparkSession.builder.remote(server.url).getOrCreate()
        bench = Bench(
            spark=spark,
            work=work,
            reps=1 if args.quick else args.reps,
            quick=args.quick,
            server_pid=server.process.pid,
            server_conf=conf,
        )
        for name in names:
            module = importlib.import_module(f"tests.bench.{name}")
            print(f"== {name}", flush=True)
            for figure in module.run(bench):
                figures.append(figure)
                print(f"   {figure.case}: {figure.ratio_label} = {figure.ratio}", flush=True)
    finally:
        if spark is not None:  # an open session blocks the server's shutdown
            spark.stop()
        server.stop()

    kept = _earlier_figures(args.out / "results.json", names, args.quick)
    figures = kept + figures
    results = {
        "machine": describe_machine(),
        "server_conf": conf,
        "quick": args.quick,
        "reps": 1 if args.quick else args.reps,
        "seconds": round(time.time() - started, 1),
        "figures": [f.as_json() for f in figures],
        "kept_from_earlier_runs": sorted({f.benchmark for f in kept}),
    }
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    args.chart.parent.mkdir(parents=True, exist_ok=True)
    draw_chart(figures, args.chart)
    print(table(figures))
    print(f"wrote {args.out / 'results.json'} and {args.chart}")
    return 0


def _earlier_figures(path: Path, names: list[str], quick: bool) -> list[Figure]:
    """A run of some benchmarks (``--only``) keeps the other benchmarks' figures of the last
    run of the same kind (quick or not): each figure is a ratio of sides run together, so
    figures of different runs stand side by side."""
    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    if bool(earlier.get("quick")) != quick:
        return []
    figures = [Figure.from_json(data) for data in earlier.get("figures", [])]
    return [f for f in figures if f.benchmark not in names]


if __name__ == "__main__":
    sys.exit(main())
