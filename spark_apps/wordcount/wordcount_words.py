"""FLIP-276 example, job ETL1: ``word_count = SELECT word, count(*) AS cnt FROM words GROUP BY word``.

Incremental per barrier: the counts of the words changed in the epoch (n-1, n] are the
previous counts plus the signed changes; they are upserted (merge by ``word``).

    tsb job run wordcount_words --barrier N --dags dags/   # one barrier, as the operator runs it

The operator (and ``tsb job run``) runs
``spark-submit spark_apps/wordcount/wordcount_words.py --mode batch --metastore-url env:TSB_METASTORE_URL
--table NAME=LOCATION ...``; ``--plan FILE`` runs the barriers of a plan file instead
(format: :mod:`airflow_provider_tsb.spark.catalog`).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, change_sign, run_app

WORDS = "raw.words"
WORD_COUNT = "wordcount.word_count"


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Upsert rows ``(word, cnt)`` for the words whose count changed at this barrier."""
    delta = ctx.changes(WORDS).groupBy("word").agg(F.sum(change_sign()).cast("long").alias("d"))
    previous = ctx.previous(WORD_COUNT)
    assert previous is not None  # Sink.schema is declared
    updated = (
        delta.join(previous, on="word", how="left")
        .select("word", (F.coalesce(F.col("cnt"), F.lit(0)) + F.col("d")).cast("long").alias("cnt"))
        .where(F.col("d") != 0)
    )
    return {WORD_COUNT: updated}


APP = TsbApp(
    job_id="wordcount_words",
    sources={WORDS: None},
    sinks={WORD_COUNT: Sink(mode="merge", keys=("word",), schema="word string, cnt long", max_files=2)},
    process=process,
    description="FLIP-276 ETL1: count of each word",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
