"""Sinks that real tables need (issue 13 item 5): a CDC feed into a partitioned event log and a
partitioned current-state table kept by merge with deletes.

Source ``raw.cdc``: change rows ``(id, region, op, value[, note])`` appended per barrier, ``op``
one of ``I`` (insert), ``U`` (update), ``D`` (delete); at most one row per id per barrier.

* ``sinks.events``: every change row, appended, partitioned by ``region``;
* ``sinks.current``: the current row of each id: ``merge`` by ``id`` with
  ``delete_when="op = 'D'"``, partitioned by ``region``. Only the files holding a changed id are
  rewritten at each barrier.

A new nullable column of the source (``note``) flows into both sinks (additive schema evolution).

    spark-submit spark_apps/sinks/cdc_sinks.py --mode batch --metastore-url env:TSB_METASTORE_URL \
        --table raw.cdc=... --table sinks.events=... --table sinks.current=...
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app

CDC = "raw.cdc"
EVENTS = "sinks.events"
CURRENT = "sinks.current"


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """The epoch's change rows, as-is, for both sinks (the merge sink spreads them over 4 files
    by id range, so that a barrier touches only some of the table's files)."""
    rows = ctx.changes(CDC).where(F.col("_change_type") == "insert").drop("_change_type", "_commit_version")
    return {EVENTS: rows, CURRENT: rows.repartitionByRange(4, "id")}


APP = TsbApp(
    job_id="cdc_sinks",
    sources={CDC: None},
    sinks={
        EVENTS: Sink(mode="append", partition_by=("region",)),
        CURRENT: Sink(mode="merge", keys=("id",), delete_when="op = 'D'", partition_by=("region",)),
    },
    process=process,
    description="CDC feed -> partitioned event log + current state (merge with deletes)",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
