"""nycflights13 topology: enrich_flights -> carrier_daily_delay -> carrier_ranking.

The run also pins what ``enrich_flights`` does with late weather (README "Event-time windows and
late data"): the EWR weather of 2013-01-01 15:00 UTC is held back from barrier 1 and arrives with
barrier 2; the 18 flights of that hour keep null weather at barrier 2 (an append sink joins each
flight once, with the weather visible at the barrier that first sees it).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

from airflow_provider_tsb.delta import version_of_barrier
from airflow_provider_tsb.delta.roots import append_rows
from airflow_provider_tsb.spark import PlanFile, PlanFileCatalog, read_snapshot, run_batch
from airflow_provider_tsb.spark.app_run import AppRun
from dev.dataplane import load_app_module, rows_at_barrier
from tsb_examples.datasets import nycflights13 as nyc

ENRICHED = "flights.flights_enriched"
DAILY = "flights.carrier_daily_delay"
RANKING = "flights.carrier_ranking"


@pytest.mark.delta_spark
def test_flights_topology_consistent_at_every_barrier(spark, tmp_path: Path) -> None:
    tables = {name: str(tmp_path / name) for name in (nyc.FLIGHTS, nyc.WEATHER, ENRICHED, DAILY, RANKING)}
    plan = PlanFile(str(tmp_path / "plan.json"))
    plan.set_tables(tables)
    days = nyc.days(dt.date(2013, 1, 1), 2)
    late_hour = pa.scalar(dt.datetime(2013, 1, 1, 15, tzinfo=dt.UTC), pa.timestamp("us", tz="UTC"))
    weather1 = nyc.weather_of_day(days[0])
    held = pc.and_(pc.equal(weather1["origin"], "EWR"), pc.equal(weather1["time_hour"], late_hour))
    append_rows(tables[nyc.FLIGHTS], nyc.flights_of_day(days[0]))
    append_rows(tables[nyc.WEATHER], weather1.filter(pc.invert(held)))  # EWR 15:00 arrives late
    plan.append_barrier([nyc.FLIGHTS, nyc.WEATHER])
    append_rows(tables[nyc.WEATHER], weather1.filter(held))
    nyc.ingest_day(tables[nyc.FLIGHTS], tables[nyc.WEATHER], days[1])
    plan.append_barrier([nyc.FLIGHTS, nyc.WEATHER])
    catalog = PlanFileCatalog(plan.path)
    for script in ("enrich_flights.py", "carrier_daily_delay.py", "carrier_ranking.py"):
        app = load_app_module(f"flights/{script}").APP
        assert run_batch(AppRun(spark, app, catalog, app.resolve_locations(catalog.tables()))) == [1, 2]

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
    # late weather: the flights of EWR 01-01 15:00 UTC were joined at barrier 1 without it and keep
    # null weather at barrier 2, where the weather row is visible (documented: README)
    raw_weather = read_snapshot(spark, tables[nyc.WEATHER], raw[1]["roots"][nyc.WEATHER])
    at_hour = (F.col("origin") == "EWR") & (F.col("time_hour") == late_hour.as_py())
    assert raw_weather.where(at_hour).count() == 1
    late_flights = enriched.where(at_hour)
    assert late_flights.count() == 18 and late_flights.where(F.col("temp").isNotNull()).count() == 0
    # day 1 groups were not changed by barrier 2
    d1 = daily.where(F.col("day") == 1).orderBy("carrier").collect()
    first = read_snapshot(spark, tables[DAILY], version_of_barrier(tables[DAILY], 1)).orderBy("carrier").collect()
    assert d1 == first
    _interop(spark, tables, len(days))


def _plain(value: object) -> object:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _interop(spark, tables: dict[str, str], barriers: int) -> None:
    """Issue 58 item 5: every sink tsb wrote, read by Spark's Delta reader at each barrier's
    version, equals delta-rs's read of it (the control plane's readers), row for row; Delta's
    ``DESCRIBE HISTORY`` shows each barrier commit's barrier and job in ``userMetadata``."""
    import json

    from deltalake import DeltaTable

    from airflow_provider_tsb.spark.inputs import delta_version

    for name in (ENRICHED, DAILY, RANKING):
        location = tables[name]
        history = {r["version"]: r["userMetadata"] for r in
                   spark.sql(f"DESCRIBE HISTORY delta.`{location}`").select("version", "userMetadata").collect()}
        for b in range(1, barriers + 1):
            version = version_of_barrier(location, b)
            ours = delta_version(spark, location, version)
            columns = ours.columns
            by_spark = sorted((tuple(_plain(v) for v in r) for r in ours.collect()), key=repr)
            arrow = DeltaTable(location, version=version).to_pyarrow_table().select(columns)
            by_rs = sorted((tuple(_plain(v) for v in r.values()) for r in arrow.to_pylist()), key=repr)
            assert by_spark == by_rs and by_spark, (name, b)
            meta = json.loads(history[version])
            assert meta["tsb.barrier"] == b and meta["tsb.job"], (name, b, meta)
