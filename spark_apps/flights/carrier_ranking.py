"""Job ``carrier_ranking``: per carrier, overall flights, cancellations, mean departure delay
(weighted over days) and its rank (1 = least delayed), from ``carrier_daily_delay`` (overwrite).

    tsb job run carrier_ranking --barrier N --dags dags/   # one barrier, as the operator runs it

The operator (and ``tsb job run``) runs
``spark-submit spark_apps/flights/carrier_ranking.py --mode batch --metastore-url env:TSB_METASTORE_URL
--table NAME=LOCATION ...``; ``--plan FILE`` runs the barriers of a plan file instead
(format: :mod:`airflow_provider_tsb.spark.catalog`).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app

DAILY = "flights.carrier_daily_delay"
RANKING = "flights.carrier_ranking"


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Rank carriers by mean departure delay at this barrier."""
    per_carrier = (
        ctx.snapshot(DAILY)
        .groupBy("carrier")
        .agg(
            F.sum("flights").cast("long").alias("flights"),
            F.sum("cancelled").cast("long").alias("cancelled"),
            (F.sum("delay_sum") / F.sum("delay_n")).alias("mean_dep_delay"),
            F.count(F.lit(1)).cast("long").alias("days"),
        )
    )
    ranked = per_carrier.withColumn(
        "delay_rank", F.row_number().over(Window.orderBy(F.col("mean_dep_delay").asc_nulls_last(), "carrier"))
    )
    return {RANKING: ranked}


APP = TsbApp(
    job_id="carrier_ranking",
    sources={DAILY: None},
    sinks={RANKING: Sink(mode="overwrite", max_files=1)},
    process=process,
    description="carriers ranked by mean departure delay",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
