"""FLIP-276 example, job ETL2: ``SELECT cnt, count(*) AS cnt2 FROM word_count GROUP BY cnt``.

Recomputed from the snapshot of ``word_count`` at each barrier (overwrite).

    tsb job run wordcount_counts --barrier N --dags dags/   # one barrier, as the operator runs it

The operator (and ``tsb job run``) runs
``spark-submit spark_apps/wordcount/wordcount_counts.py --mode batch --metastore-url env:TSB_METASTORE_URL
--table NAME=LOCATION ...``; ``--plan FILE`` runs the barriers of a plan file instead
(format: :mod:`airflow_provider_tsb.spark.catalog`).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app

WORD_COUNT = "wordcount.word_count"
COUNT_OF_COUNTS = "wordcount.count_of_counts"


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Histogram of the word counts at this barrier."""
    out = ctx.snapshot(WORD_COUNT).groupBy("cnt").agg(F.count(F.lit(1)).cast("long").alias("cnt2"))
    return {COUNT_OF_COUNTS: out}


APP = TsbApp(
    job_id="wordcount_counts",
    sources={WORD_COUNT: None},
    sinks={COUNT_OF_COUNTS: Sink(mode="overwrite", schema="cnt long, cnt2 long", max_files=1)},
    process=process,
    description="FLIP-276 ETL2: count of counts",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
