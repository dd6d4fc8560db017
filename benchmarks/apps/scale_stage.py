"""One stage of ``topology_scale.py``'s generated topologies: appends the rows its sources
gained in the epoch ``(n-1, n]`` to its sink, with ``hop`` one more.

Its job id, sources and sink come from the environment the operator gives the job:
``TSB_JOB_ID`` (set by the operator), ``TSB_SCALE_SOURCES`` (comma-separated table names) and
``TSB_SCALE_SINK`` (the operator's ``env_vars``); ``TSB_SCALE_COMPACTION=<min_files>`` turns
on the sink's auto compaction (``Sink(compaction=Compaction(min_files=...))``). Rows: ``id long, v double, hop int, ts
timestamp``.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Compaction, Sink, TsbApp, run_app

SOURCES = [s for s in os.environ.get("TSB_SCALE_SOURCES", "").split(",") if s]
SINK = os.environ.get("TSB_SCALE_SINK", "")
COLUMNS = "id long, v double, hop int, ts timestamp"
COMPACTION = int(os.environ.get("TSB_SCALE_COMPACTION", "0") or 0)


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """The rows inserted into every source in the epoch, one hop further."""
    frames = [
        ctx.changes(source)
        .where(F.col("_change_type") == "insert")
        .select("id", "v", (F.col("hop") + 1).cast("int").alias("hop"), "ts")
        for source in SOURCES
    ]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return {SINK: out}


if __name__ == "__main__":
    if not SOURCES or not SINK:
        sys.exit("scale_stage.py: set TSB_SCALE_SOURCES and TSB_SCALE_SINK (topology_scale.py does)")
    app = TsbApp(
        job_id=os.environ["TSB_JOB_ID"],
        sources={s: None for s in SOURCES},
        sinks={SINK: Sink(mode="append", schema=COLUMNS,
                          compaction=Compaction(min_files=COMPACTION) if COMPACTION else None)},
        process=process,
        description=f"{'+'.join(SOURCES)} -> {SINK}",
    )
    sys.exit(run_app(app))
