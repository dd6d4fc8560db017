"""Job ``enrich_flights``: new flights of the barrier joined with the weather at their origin
and hour (both root tables read at the same barrier), plus planes and airlines (static dims).

    spark-submit spark_apps/flights/enrich_flights.py --plan plan.json --report r.json
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.datasets.nycflights13 import FLIGHTS, WEATHER, csv_path
from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app
from airflow_provider_tsb.spark.inputs import CHANGE_TYPE, COMMIT_VERSION, INSERT_TYPES

ENRICHED = "flights.flights_enriched"
PLANES_SCHEMA = (
    "tailnum string, plane_year int, type string, manufacturer string, model string, "
    "engines int, seats int, speed int, engine string"
)


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Append the enriched flights ingested in the epoch (n-1, n]."""
    spark = ctx.spark
    new = (
        ctx.changes(FLIGHTS)
        .where(F.col(CHANGE_TYPE).isin(*INSERT_TYPES))  # raw.flights is append-only
        .drop(CHANGE_TYPE, COMMIT_VERSION)
    )
    weather = ctx.snapshot(WEATHER).select("origin", "time_hour", "temp", "wind_speed", "precip", "visib")
    planes = spark.read.csv(csv_path("planes"), header=True, nullValue="NA", schema=PLANES_SCHEMA).select(
        "tailnum", "plane_year", "manufacturer", "seats"
    )
    airlines = spark.read.csv(csv_path("airlines"), header=True, schema="carrier string, airline string")
    out = (
        new.join(weather, on=["origin", "time_hour"], how="left")
        .join(F.broadcast(planes), on="tailnum", how="left")
        .join(F.broadcast(airlines), on="carrier", how="left")
    )
    return {ENRICHED: out}


APP = TsbApp(
    job_id="enrich_flights",
    sources={FLIGHTS: None, WEATHER: None},
    sinks={ENRICHED: Sink(mode="append", max_files=2)},
    process=process,
    description="flights + weather at the same barrier + planes + airlines",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
