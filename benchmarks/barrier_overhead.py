"""Overhead of tsb barriers on the flights topology (enrich -> daily delay -> ranking).

Runs the three flights jobs over the same barriers (one day of nycflights13 each) twice in
one Spark session, barrier by barrier through the topology:

* ``plain``: the same ``process()`` functions over the same input versions; Spark writes
  Parquet and delta-rs commits it; no barrier bookkeeping (no txn / epoch / alignment
  checks, no barrier look-ups, no orphan cleanup, no PROCESSED/WRITTEN reports);
* ``tsb``: the full framework (:func:`airflow_provider_tsb.spark.app.run_barrier`).

Prints both times; the last line is ``ratio=<tsb/plain>`` (target <= 1.10).

    .venv/bin/python benchmarks/barrier_overhead.py [--days 6] [--repeat 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_provider_tsb.datasets import nycflights13 as nyc  # noqa: E402
from airflow_provider_tsb.delta.log import table_exists  # noqa: E402
from airflow_provider_tsb.spark import PlanFile, PlanFileCatalog, get_spark, run_barrier  # noqa: E402
from airflow_provider_tsb.spark.app import BarrierContext  # noqa: E402
from airflow_provider_tsb.spark.catalog import BarrierPlan  # noqa: E402
from airflow_provider_tsb.spark.inputs import read_snapshot, spark_schema  # noqa: E402
from airflow_provider_tsb.spark.outputs import _staged_files, merge_rows  # noqa: E402

SCRIPTS = ("enrich_flights.py", "carrier_daily_delay.py", "carrier_ranking.py")
ROOTS = (nyc.FLIGHTS, nyc.WEATHER)


def load(script):
    spec = importlib.util.spec_from_file_location(script[:-3], REPO / "spark_apps" / "flights" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.APP


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
            run_barrier(spark, app, plan, locs, catalog)
    return time.perf_counter() - start


class PlainContext(BarrierContext):
    """``previous(sink)`` = the sink's latest version (no barrier look-up)."""

    def previous(self, sink):
        loc = self.locations[sink]
        if not table_exists(loc):
            ddl = self.app.sinks[sink].schema
            return self.spark.createDataFrame([], ddl) if ddl else None
        return read_snapshot(self.spark, loc, DeltaTable(loc).version())


def plain_write(spark, df, location, mode, keys, max_files, barrier) -> None:
    """Spark writes Parquet, delta-rs commits: no txn, no tags, no reports, no cleanup."""
    existing = DeltaTable(location) if table_exists(location) else None
    if existing is not None:
        schema = spark_schema(existing)
        if mode == "merge":
            df = merge_rows(read_snapshot(spark, location, existing.version()), df, keys)
    else:
        schema = df.schema
    if max_files:
        df = df.coalesce(max_files)
    rel = f"plain/{barrier}/{time.time_ns()}"
    df.write.parquet(f"{location}/{rel}")
    adds = [f.to_add_action() for f in _staged_files(location, rel)]
    delta_schema = DeltaSchema.from_json(json.dumps(schema.jsonValue()))
    if existing is None:
        create_table_with_add_actions(location, delta_schema, adds, mode="error")
    else:
        existing.create_write_transaction(adds, "append" if mode == "append" else "overwrite", delta_schema)


def run_plain(spark, apps, catalog: PlanFileCatalog, barriers: int) -> float:
    """Root versions from the plan; intermediate table version of barrier b is b - 1 (one
    commit per barrier, created at version 0), so no look-ups are needed."""
    entries = catalog.plan.load()["barriers"]
    tables = catalog.tables()
    start = time.perf_counter()
    for barrier in range(1, barriers + 1):
        for app in apps:
            locs = app.resolve_locations(tables)

            def version(name, b):
                if name in ROOTS:
                    return entries[b - 1]["roots"][name]
                return b - 1

            plan = BarrierPlan(
                barrier=barrier,
                ts_ms=entries[barrier - 1]["ts"],
                inputs={n: version(n, barrier) for n in app.sources},
                previous_barrier=barrier - 1 if barrier > 1 else None,
                previous_inputs={n: version(n, barrier - 1) for n in app.sources} if barrier > 1 else {},
            )
            outputs = app.process(PlainContext(spark, app, plan, locs))
            for sink, spec in app.sinks.items():
                plain_write(spark, outputs[sink], locs[sink], spec.mode, spec.keys, spec.max_files, barrier)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    spark = get_spark("tsb-benchmark")
    spark.sparkContext.setLogLevel("ERROR")
    apps = [load(s) for s in SCRIPTS]
    days = nyc.days(dt.date(2013, 1, 1), args.days)
    nyc.flights(), nyc.weather()  # parse the CSVs outside the timings
    totals = {"plain": 0.0, "tsb": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        run_tsb(spark, apps, setup(Path(tmp) / "warmup", apps, days[:2]), 2)  # JIT, Python workers
        for i in range(args.repeat):
            order = ("plain", "tsb") if i % 2 == 0 else ("tsb", "plain")
            for kind in order:
                catalog = setup(Path(tmp) / f"{kind}{i}", apps, days)
                runner = run_plain if kind == "plain" else run_tsb
                totals[kind] += runner(spark, apps, catalog, len(days))
    plain, tsb = totals["plain"], totals["tsb"]
    print(f"days={args.days} jobs={len(apps)} repeat={args.repeat}")
    print(f"plain_seconds={plain:.2f}")
    print(f"tsb_seconds={tsb:.2f}")
    print(f"ratio={tsb / plain:.3f}")


if __name__ == "__main__":
    main()
