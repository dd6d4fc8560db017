"""Job ``enrich_flights``: new flights of the barrier joined with the weather at their origin
and hour (both root tables read at the same barrier), plus planes and airlines (static dims).

    tsb job run enrich_flights --barrier N --dags dags/   # one barrier, as the operator runs it

The operator (and ``tsb job run``) runs
``spark-submit spark_apps/flights/enrich_flights.py --mode batch --metastore-url env:TSB_METASTORE_URL
--table NAME=LOCATION ...``; ``--plan FILE`` runs the barriers of a plan file instead
(format: :mod:`airflow_provider_tsb.spark.catalog`).
"""

from __future__ import annotations

import functools
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app
from airflow_provider_tsb.spark.inputs import CHANGE_TYPE, COMMIT_VERSION, INSERT_TYPES
from tsb_examples.datasets import nycflights13
from tsb_examples.datasets.nycflights13 import FLIGHTS, WEATHER

ENRICHED = "flights.flights_enriched"


@functools.cache
def dimensions(spark: SparkSession) -> tuple[DataFrame, DataFrame]:
    """Planes and airlines: static, so built once per driver from the CSVs as local relations
    (broadcast from the driver, no file scan per barrier)."""
    return (
        spark.createDataFrame(nycflights13.dimension("planes")),
        spark.createDataFrame(nycflights13.dimension("airlines")),
    )


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Append the enriched flights ingested in the epoch (n-1, n]."""
    spark = ctx.spark
    new = (
        ctx.changes(FLIGHTS)
        .where(F.col(CHANGE_TYPE).isin(*INSERT_TYPES))  # raw.flights is append-only
        .drop(CHANGE_TYPE, COMMIT_VERSION)
    )
    # data skipping: only the weather files whose time_hour range meets the new flights' range
    hours = ctx.change_ranges(FLIGHTS, ["time_hour"])
    weather = ctx.snapshot(WEATHER, within=hours).select("origin", "time_hour", "temp", "wind_speed", "precip", "visib")
    planes, airlines = dimensions(spark)
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
