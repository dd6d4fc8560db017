"""Overhead of tsb barriers on the flights topology (enrich -> daily delay -> ranking).

Runs the three flights jobs over the same barriers (one day of nycflights13 each) twice in
one Spark session, barrier by barrier through the topology:

* ``plain``: the same ``process()`` functions over the same input versions; Spark writes
  Parquet and delta-rs commits it; no barrier bookkeeping (no txn / epoch / alignment
  checks, no barrier look-ups, no orphan cleanup, no PROCESSED/WRITTEN reports);
* ``tsb``: the full framework (:func:`airflow_provider_tsb.spark.app.run_barrier`).

The arms alternate over ``--pairs`` pairs (plain first in even pairs, tsb first in odd ones,
each on fresh tables), so a slow spell of the machine hits both arms alike. One run's ratio
varied from 0.70 to 1.03 on the same code before; the median over pairs is the figure, its
min and max show the spread. Prints each pair, then last line
``ratio=<median tsb/plain> min=<x> max=<y> pairs=<n> plain_seconds=<s> tsb_seconds=<s> load=<1-min load>``
(target <= 1.10).

    .venv/bin/python -m benchmarks.barrier_overhead [--days 6] [--pairs 5]
"""

from __future__ import annotations

import datetime as dt
import tempfile
import time
from pathlib import Path

from airflow_provider_tsb.spark import PlanFile, PlanFileCatalog, get_spark, run_barrier
from airflow_provider_tsb.spark.app_run import AppRun
from benchmarks.harness import REPO, median, parser, report
from benchmarks.plain import load_app, run_plain_barrier
from tsb_examples.datasets import nycflights13 as nyc

SCRIPTS = ("enrich_flights.py", "carrier_daily_delay.py", "carrier_ranking.py")
ROOTS = (nyc.FLIGHTS, nyc.WEATHER)


def setup(root: Path, apps, days) -> PlanFileCatalog:
    tables = {n: str(root / n) for n in ROOTS}
    for app in apps:
        tables.update({n: str(root / n) for n in app.sinks})
    plan = PlanFile(str(root / "plan.json"))
    plan.set_tables(tables)
    for day in days:
        nyc.ingest_day(tables[nyc.FLIGHTS], tables[nyc.WEATHER], day)
        plan.append_barrier(list(ROOTS))
    return PlanFileCatalog(plan.path, str(root / "report.json"))


def run_tsb(spark, apps, catalog: PlanFileCatalog, barriers: int) -> float:
    start = time.perf_counter()
    for barrier in range(1, barriers + 1):
        for app in apps:
            locs = app.resolve_locations(catalog.tables())
            sources = {n: locs[n] for n in app.sources}
            plan = catalog.pending_barriers(app.job_id, sources, barrier - 1 if barrier > 1 else None, limit=1)[0]
            run_barrier(AppRun(spark, app, catalog, locs), plan)
    return time.perf_counter() - start


def run_plain(spark, apps, catalog: PlanFileCatalog, barriers: int) -> float:
    """The same ``process()`` and write path without bookkeeping (:mod:`benchmarks.plain`)."""
    entries = catalog.plan.load()["barriers"]
    tables = catalog.tables()
    start = time.perf_counter()
    for barrier in range(1, barriers + 1):
        for app in apps:
            run_plain_barrier(spark, app, barrier, entries, ROOTS, app.resolve_locations(tables))
    return time.perf_counter() - start


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--days", type=int, default=6, help="barriers (one 2013 day each) per arm")
    options.add_argument("--pairs", type=int, default=5, help="alternated (plain, tsb) pairs, at least 5")
    args = options.parse_args()
    if args.pairs < 1 or args.days < 1:
        options.error("--pairs and --days must be at least 1")
    spark = get_spark("tsb-benchmark")
    spark.sparkContext.setLogLevel("ERROR")
    apps = [load_app(REPO / "spark_apps" / "flights" / s) for s in SCRIPTS]
    days = nyc.days(dt.date(2013, 1, 1), args.days)
    nyc.flights(), nyc.weather()  # parse the CSVs outside the timings
    ratios: list[float] = []
    totals = {"plain": 0.0, "tsb": 0.0}
    print(f"days={args.days} jobs={len(apps)} pairs={args.pairs}")
    with tempfile.TemporaryDirectory() as tmp:
        # warm-up, not counted: both arms once over all the days (JIT, Python workers, caches);
        # a cold first pair made plain look slower than tsb before
        for kind, runner in (("plain", run_plain), ("tsb", run_tsb)):
            runner(spark, apps, setup(Path(tmp) / f"warmup-{kind}", apps, days), len(days))
        for i in range(args.pairs):
            order = ("plain", "tsb") if i % 2 == 0 else ("tsb", "plain")
            seconds = {}
            for kind in order:
                catalog = setup(Path(tmp) / f"{kind}{i}", apps, days)
                runner = run_plain if kind == "plain" else run_tsb
                seconds[kind] = runner(spark, apps, catalog, len(days))
                totals[kind] += seconds[kind]
            ratios.append(seconds["tsb"] / seconds["plain"])
            print(f"pair {i + 1} ({order[0]} first): plain {seconds['plain']:.2f} s, tsb {seconds['tsb']:.2f} s, "
                  f"ratio {ratios[-1]:.3f}", flush=True)
    report("barrier_overhead", ratio=round(median(ratios), 3), min=round(min(ratios), 3), max=round(max(ratios), 3),
           pairs=len(ratios), plain_seconds=round(totals["plain"], 2), tsb_seconds=round(totals["tsb"], 2))


if __name__ == "__main__":
    main()
