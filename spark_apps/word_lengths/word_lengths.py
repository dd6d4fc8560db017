"""A second team's job on the wordcount root table: ``length_count = SELECT length(word) AS length,
count(*) AS cnt FROM words GROUP BY length(word)``.

Its topology (``dags/word_lengths_topology.py``) declares ``raw.words`` as a root table too, so
it shares the wordcount topology's barrier domain (issue 13 item 1): at every barrier,
``sum(length_count.cnt) == sum(word_count.cnt) == count(words)`` across the two topologies.

Incremental per barrier like ``wordcount_words``: the signed changes of the epoch (n-1, n]
are added to the previous counts and upserted (merge by ``length``).
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, change_sign, run_app

WORDS = "raw.words"
LENGTH_COUNT = "word_lengths.length_count"


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Upsert rows ``(length, cnt)`` for the word lengths whose count changed at this barrier."""
    delta = (
        ctx.changes(WORDS)
        .groupBy(F.length("word").cast("long").alias("length"))
        .agg(F.sum(change_sign()).cast("long").alias("d"))
    )
    previous = ctx.previous(LENGTH_COUNT)
    assert previous is not None  # Sink.schema is declared
    updated = (
        delta.join(previous, on="length", how="left")
        .select("length", (F.coalesce(F.col("cnt"), F.lit(0)) + F.col("d")).cast("long").alias("cnt"))
        .where(F.col("d") != 0)
    )
    return {LENGTH_COUNT: updated}


APP = TsbApp(
    job_id="word_lengths",
    sources={WORDS: None},
    sinks={LENGTH_COUNT: Sink(mode="merge", keys=("length",), schema="length long, cnt long", max_files=2)},
    process=process,
    description="count of words per word length, on the wordcount topology's root table",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
