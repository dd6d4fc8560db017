"""Job ``origin_hourly_delay``: tumbling event-time windows over ``raw.flights`` (FLIP-276 "Align
data ... temporal operator (window)"): per origin airport and hour of ``time_hour``, the flights,
departures (``dep_time`` not null) and mean departure delay. A window is emitted once, by the
first barrier whose event-time watermark reaches its end; a row that arrives after its window
was emitted is dropped and counted.

Per barrier ``n`` with watermark ``W(n)`` (the barrier's ``ts_ms``: min over root tables of
their newest ``time_hour``, so barriers must be event-time ones, ``ts_kind="event"``):

1. the rows appended to ``raw.flights`` in the epoch ``(n-1, n]`` are assigned to their window
   ``[start, end)`` of ``WINDOW``;
2. a row whose window ends at or before ``W(n-1)`` is *late*: that window was emitted by an
   earlier barrier. It is dropped and counted in ``flights.origin_hourly_late`` (one row per
   barrier: ``barrier``, ``watermark_ms``, ``watermark``, ``late_rows``, ``oldest_late_window``);
3. the other rows' partial aggregates are added to the open windows of barrier ``n-1`` (the
   state, ``flights.origin_hourly_open`` as of ``n-1``, read with ``ctx.previous``);
4. the windows with ``end <= W(n)`` are appended to ``flights.origin_hourly_delay``, stamped
   with ``emitted_barrier = n``; the rest are the new state (``flights.origin_hourly_open``,
   overwritten).

All three sinks commit in the barrier, so the state, the emitted windows and the late counter
are always of the same barrier (a retry redoes the barrier from the state of ``n-1``). The
windows table at barrier ``n`` holds exactly the windows with ``end <= W(n)``, aggregated over
the rows visible at ``n`` minus the late ones.

    tsb job run origin_hourly_delay --barrier N --dags dags/   # with TSB_FLIGHTS_WINDOWS=1

The operator (and ``tsb job run``) runs ``spark-submit spark_apps/flights/origin_hourly_delay.py
--mode batch --metastore-url env:TSB_METASTORE_URL --table NAME=LOCATION ...``.
"""

from __future__ import annotations

import sys

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_provider_tsb.spark import BarrierContext, Sink, TsbApp, run_app
from airflow_provider_tsb.spark.inputs import CHANGE_TYPE, INSERT_TYPES

FLIGHTS = "raw.flights"
WINDOWS = "flights.origin_hourly_delay"
OPEN = "flights.origin_hourly_open"
LATE = "flights.origin_hourly_late"
#: the tumbling window length (a Spark interval string, aligned to the epoch)
WINDOW = "1 hour"
KEYS = ("origin", "window_start", "window_end")
OPEN_SCHEMA = (
    "origin STRING, window_start TIMESTAMP, window_end TIMESTAMP, "
    "flights BIGINT, departures BIGINT, delay_n BIGINT, delay_sum DOUBLE"
)
LATE_SCHEMA = "barrier BIGINT, watermark_ms BIGINT, watermark TIMESTAMP, late_rows BIGINT, oldest_late_window TIMESTAMP"


def _partials(rows: DataFrame) -> DataFrame:
    """Partial aggregates per window: counts and the delay sum (mergeable across barriers)."""
    return rows.groupBy(*KEYS).agg(
        F.count(F.lit(1)).cast("long").alias("flights"),
        F.count("dep_time").cast("long").alias("departures"),
        F.count("dep_delay").cast("long").alias("delay_n"),
        F.sum("dep_delay").alias("delay_sum"),
    )


def _merge(state: DataFrame, partials: DataFrame) -> DataFrame:
    """Open windows of the previous barrier plus this epoch's partial aggregates."""
    return state.unionByName(partials).groupBy(*KEYS).agg(
        F.sum("flights").cast("long").alias("flights"),
        F.sum("departures").cast("long").alias("departures"),
        F.sum("delay_n").cast("long").alias("delay_n"),
        F.sum("delay_sum").alias("delay_sum"),
    )


def _at(ms: int) -> Column:
    return F.timestamp_millis(F.lit(ms).cast("long"))


def previous_watermark(ctx: BarrierContext) -> int | None:
    """``W(n-1)`` in epoch ms, from the late counter's previous state; ``None`` at the job's first barrier."""
    return ctx.previous(LATE).agg(F.max("watermark_ms")).first()[0]


def process(ctx: BarrierContext) -> dict[str, DataFrame]:
    """Emit the windows the watermark passed; keep the others open; drop and count late rows."""
    watermark = ctx.watermark
    if watermark is None:
        raise ValueError(
            f"job origin_hourly_delay: barrier {ctx.barrier} has no event-time watermark; event-time "
            "windows need event-time barriers: generate the topology's barriers with ts_kind='event'"
        )
    before = previous_watermark(ctx)
    window = F.window("time_hour", WINDOW)
    rows = (
        ctx.changes(FLIGHTS)
        .where(F.col(CHANGE_TYPE).isin(*INSERT_TYPES))  # raw.flights is append-only
        .select("origin", window.start.alias("window_start"), window.end.alias("window_end"), "dep_time", "dep_delay")
    )
    late = (F.col("window_end") <= _at(before)) if before is not None else F.lit(False)
    merged = _merge(ctx.previous(OPEN), _partials(rows.where(~late)))
    closed = F.col("window_end") <= _at(watermark)
    emitted = merged.where(closed).select(
        *KEYS, "flights", "departures", "delay_n", "delay_sum",
        F.when(F.col("delay_n") > 0, F.col("delay_sum") / F.col("delay_n")).alias("mean_dep_delay"),
        F.lit(ctx.barrier).cast("long").alias("emitted_barrier"),
    )
    counter = rows.where(late).agg(
        F.lit(ctx.barrier).cast("long").alias("barrier"),
        F.lit(watermark).cast("long").alias("watermark_ms"),
        _at(watermark).alias("watermark"),
        F.count(F.lit(1)).cast("long").alias("late_rows"),
        F.min("window_start").alias("oldest_late_window"),
    )
    return {WINDOWS: emitted, OPEN: merged.where(~closed), LATE: counter}


APP = TsbApp(
    job_id="origin_hourly_delay",
    sources={FLIGHTS: None},
    sinks={
        WINDOWS: Sink(mode="append", max_files=1),
        OPEN: Sink(mode="overwrite", schema=OPEN_SCHEMA, max_files=1),
        LATE: Sink(mode="append", schema=LATE_SCHEMA, max_files=1),
    },
    process=process,
    description="hourly event-time windows per origin: departures, mean departure delay; late rows dropped, counted",
)

if __name__ == "__main__":
    sys.exit(run_app(APP))
