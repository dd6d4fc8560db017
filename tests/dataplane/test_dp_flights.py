"""nycflights13 topology: enrich_flights -> carrier_daily_delay -> carrier_ranking."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.sql import functions as F

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.spark import PlanFile, PlanFileCatalog, read_snapshot, run_batch
from tests.support.dataplane import load_app_module, rows_at_barrier
from tsb_examples.datasets import nycflights13 as nyc

ENRICHED = "flights.flights_enriched"
DAILY = "flights.carrier_daily_delay"
RANKING = "flights.carrier_ranking"


def test_flights_topology_consistent_at_every_barrier(spark, tmp_path: Path) -> None:
    tables = {name: str(tmp_path / name) for name in (nyc.FLIGHTS, nyc.WEATHER, ENRICHED, DAILY, RANKING)}
    plan = PlanFile(str(tmp_path / "plan.json"))
    plan.set_tables(tables)
    days = nyc.days(dt.date(2013, 1, 1), 2)
    for day in days:
        nyc.ingest_day(tables[nyc.FLIGHTS], tables[nyc.WEATHER], day)
        plan.append_barrier([nyc.FLIGHTS, nyc.WEATHER])
    catalog = PlanFileCatalog(plan.path)
    for script in ("enrich_flights.py", "carrier_daily_delay.py", "carrier_ranking.py"):
        app = load_app_module(f"flights/{script}").APP
        assert run_batch(spark, app, catalog, app.resolve_locations(catalog.tables())) == [1, 2]

    raw = plan.load()["barriers"]
    for b in range(1, len(days) + 1):
        raw_flights = read_snapshot(spark, tables[nyc.FLIGHTS], raw[b - 1]["roots"][nyc.FLIGHTS])
        enriched = read_snapshot(spark, tables[ENRICHED], version_of_barrier(tables[ENRICHED], b))
        daily = read_snapshot(spark, tables[DAILY], version_of_barrier(tables[DAILY], b))
        n = raw_flights.count()
        assert enriched.count() == n == sum(nyc.flights_of_day(d).num_rows for d in days[:b])
        assert daily.agg(F.sum("flights")).first()[0] == n
        assert enriched.where(F.col("temp").isNotNull()).count() > 0.9 * n  # weather of the same barrier
        ranking = rows_at_barrier(spark, tables[RANKING], b)
        assert sum(r[1] for r in ranking) == n
        assert sorted(r[-1] for r in ranking) == list(range(1, len(ranking) + 1))
    # day 1 groups were not changed by barrier 2
    d1 = daily.where(F.col("day") == 1).orderBy("carrier").collect()
    first = read_snapshot(spark, tables[DAILY], version_of_barrier(tables[DAILY], 1)).orderBy("carrier").collect()
    assert d1 == first
