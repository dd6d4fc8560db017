"""Job ``carrier_daily_delay``: per carrier and day, flights, cancelled (``dep_time`` null),
mean and p90 of ``dep_delay``. Incremental: only the (carrier, day) groups touched in the
epoch are recomputed from the snapshot (reading only the files whose day statistics meet the
epoch's: Delta data skipping) and upserted (merge).

    tsb job run carrier_daily_delay --barrier N --dags dags/   # one barrier, as the operator runs it

The operator (and ``tsb job run``) runs
``spark-submit spark_apps/flights/carrier_daily_delay.py --mode batch --metastore-url env:TSB_METASTORE_URL
--table NAME=LOCATION ...``; ``--plan FILE`` runs the barriers of a plan file instead
(format: :mod:`airflow_provider_tsb.spark.catalog`).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app

ENRICHED = "flights.flights_enriched"
DAILY = "flights.carrier_daily_delay"
KEYS = ("carrier", "year", "month", "day")


def daily_delay(flights: DataFrame) -> DataFrame:
    """Aggregate flights per (carrier, year, month, day); exact, deterministic aggregates."""
    return flights.groupBy(*KEYS).agg(
        F.count(F.lit(1)).cast("long").alias("flights"),
        F.sum(F.when(F.col("dep_time").isNull(), 1).otherwise(0)).cast("long").alias("cancelled"),
        F.count("dep_delay").cast("long").alias("delay_n"),
        F.sum("dep_delay").alias("delay_sum"),
        (F.sum("dep_delay") / F.count("dep_delay")).alias("mean_dep_delay"),
        F.percentile(F.col("dep_delay"), F.lit(0.9)).alias("p90_dep_delay"),
    )


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Recompute the groups changed in the epoch (n-1, n]."""
    touched = ctx.changes(ENRICHED).select(*KEYS).distinct()
    # data skipping: read only the files whose (year, month, day) statistics meet the epoch's
    days = ctx.change_ranges(ENRICHED, ["year", "month", "day"])
    rows = ctx.snapshot(ENRICHED, within=days).join(touched, on=list(KEYS), how="left_semi")
    return {DAILY: daily_delay(rows)}


APP = TsbApp(
    job_id="carrier_daily_delay",
    sources={ENRICHED: None},
    sinks={DAILY: Sink(mode="merge", keys=KEYS, max_files=2)},
    process=process,
    description="per carrier and day: flights, cancelled, mean and p90 departure delay",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
