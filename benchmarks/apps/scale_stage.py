"""One stage of ``topology_scale.py``'s generated topologies: appends the rows its sources
gained in the epoch ``(n-1, n]`` to its sink, with ``hop`` one more.

Its job id, sources and sink come from the environment the operator gives the job:
``TSB_JOB_ID`` (set by the operator), ``TSB_SCALE_SOURCES`` (comma-separated table names) and
``TSB_SCALE_SINK`` (the operator's ``env_vars``); ``TSB_SCALE_COMPACTION=<min_files>`` turns
on the sink's auto compaction (``Sink(compaction=Compaction(min_files=...))``);
``TSB_SCALE_MICRO_BATCH=0`` leaves out ``process_micro_batch`` (each barrier of a micro-batch
then gets its own ``process`` plan). Rows: ``id long, v double, hop int, ts
timestamp``.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Compaction, MicroBatchContext, Sink, TsbApp, run_app

SOURCES = [s for s in os.environ.get("TSB_SCALE_SOURCES", "").split(",") if s]
SINK = os.environ.get("TSB_SCALE_SINK", "")
COLUMNS = "id long, v double, hop int, ts timestamp"
COMPACTION = int(os.environ.get("TSB_SCALE_COMPACTION", "0") or 0)
MICRO_BATCH = os.environ.get("TSB_SCALE_MICRO_BATCH", "1") != "0"


def hop(changes: list[DataFrame], *keep: str) -> DataFrame:
    """The inserted rows of ``changes`` (one frame per source), one hop further, with ``keep``."""
    frames = [df.where(F.col("_change_type") == "insert")
              .select("id", "v", (F.col("hop") + 1).cast("int").alias("hop"), "ts", *keep) for df in changes]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """The rows inserted into every source in the epoch, one hop further."""
    return {SINK: hop([ctx.changes(source) for source in SOURCES])}


def process_micro_batch(ctx: MicroBatchContext) -> dict[str, DataFrame]:
    """:func:`process` for several barriers at once (row-wise: one scan for all their epochs)."""
    return {SINK: hop([ctx.changes(source) for source in SOURCES], ctx.barrier_column)}


if __name__ == "__main__":
    if not SOURCES or not SINK:
        sys.exit("scale_stage.py: set TSB_SCALE_SOURCES and TSB_SCALE_SINK (topology_scale.py does)")
    app = TsbApp(
        job_id=os.environ["TSB_JOB_ID"],
        sources={s: None for s in SOURCES},
        sinks={SINK: Sink(mode="append", schema=COLUMNS,
                          compaction=Compaction(min_files=COMPACTION) if COMPACTION else None)},
        process=process,
        process_micro_batch=process_micro_batch if MICRO_BATCH else None,
        description=f"{'+'.join(SOURCES)} -> {SINK}",
    )
    sys.exit(run_app(app))
