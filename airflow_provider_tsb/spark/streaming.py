"""Streaming mode: a Structured Streaming query whose micro-batches are barriers.

The source ``spark.readStream.format("tsb")`` (a Python Data Source) has offsets
``{"barrier": n}``; each micro-batch covers exactly one barrier, the next one that is WRITTEN
in all the job's inputs, and yields one control row ``(barrier, plan JSON)``. The sink is
``foreachBatch`` running :func:`airflow_provider_tsb.spark.app.run_barrier`, i.e. the
exactly-once commit protocol. The checkpoint's offset log maps micro-batch -> barrier, so a
restarted query replays the same barriers (whose commits the txn check then discards).
After restoring the sinks to an earlier barrier, delete the checkpoint.

The source runs in a Spark Python worker, so it re-opens the catalog from its spec
(:func:`airflow_provider_tsb.spark.catalog.open_catalog`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from airflow_provider_tsb.spark.app import TsbApp, report_written_heads, run_barrier, sinks_base_barrier
from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan, open_catalog

log = logging.getLogger("airflow_provider_tsb.spark")
SOURCE_SCHEMA = "barrier long, plan string"


class BarrierPartition(InputPartition):
    """One micro-batch's only partition: the serialized :class:`BarrierPlan`."""

    def __init__(self, plan_json: str) -> None:
        super().__init__(plan_json)
        self.plan_json = plan_json


class TsbStreamReader(DataSourceStreamReader):
    """Offsets are ``{"barrier": n}`` (``-1`` before the first barrier); one barrier per batch.

    Options: ``catalog`` (JSON catalog spec), ``job_id``, ``sources`` (JSON
    ``{table: location}``), ``start_after`` (barrier the sinks are at, ``-1`` for none),
    optional ``until_barrier`` and ``max_barriers`` (the reader never offers a barrier past
    them, so a stopping query never starts a barrier it will not finish).
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        self.catalog_spec = json.loads(options["catalog"])
        self._catalog: BarrierCatalog | None = None
        self.job_id = options["job_id"]
        self.sources = json.loads(options["sources"])
        self.start_after = int(options.get("start_after", "-1"))
        self._current = self.start_after
        self.until_barrier = int(options["until_barrier"]) if options.get("until_barrier") else None
        self.max_barriers = int(options["max_barriers"]) if options.get("max_barriers") else None
        self._offered: set[int] = set()

    def __getstate__(self) -> dict:
        """Pickled for the read tasks: without the (unpicklable, driver-side) catalog."""
        state = dict(self.__dict__)
        state["_catalog"] = None
        return state

    @property
    def catalog(self) -> BarrierCatalog:
        """The catalog, opened lazily from its spec in this process."""
        if self._catalog is None:
            self._catalog = open_catalog(self.catalog_spec)
        return self._catalog

    def _next(self, after: int) -> BarrierPlan | None:
        plans = self.catalog.pending_barriers(self.job_id, self.sources, None if after < 0 else after, limit=1)
        return plans[0] if plans else None

    def initialOffset(self) -> dict:  # noqa: N802 - Spark API
        """The barrier the sinks were at when the query was first started."""
        return {"barrier": self.start_after}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:  # noqa: N802
        """The next barrier after ``start`` that is WRITTEN in all inputs (or ``start``)."""
        after = int(start["barrier"]) if start is not None else self._current
        plan = self._next(after)
        if plan is not None and self.until_barrier is not None and plan.barrier > self.until_barrier:
            plan = None
        if plan is not None and self.max_barriers is not None and plan.barrier not in self._offered:
            if len(self._offered) >= self.max_barriers:
                plan = None
        if plan is not None:
            self._offered.add(plan.barrier)
        self._current = plan.barrier if plan is not None else after
        return {"barrier": self._current}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One partition holding the plan of barrier ``end`` (none for an empty range)."""
        if int(start["barrier"]) == int(end["barrier"]):
            return []
        plan = self._next(int(start["barrier"]))
        if plan is None or plan.barrier != int(end["barrier"]):
            raise RuntimeError(
                f"tsb source for job {self.job_id}: micro-batch ({start}, {end}] expected barrier "
                f"{end['barrier']} after {start['barrier']}, catalog returned "
                f"{None if plan is None else plan.barrier} (sinks restored without resetting the checkpoint?)"
            )
        return [BarrierPartition(plan.to_json())]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, str]]:
        """Yield the control row ``(barrier, plan JSON)``."""
        plan_json = partition.plan_json  # type: ignore[attr-defined]
        yield (int(json.loads(plan_json)["barrier"]), plan_json)

    def commit(self, end: dict) -> None:
        """Nothing to do: the Delta commits are the durable state."""


class TsbDataSource(DataSource):
    """``spark.readStream.format("tsb")``: barrier-aligned micro-batches (see module doc)."""

    @classmethod
    def name(cls) -> str:
        """Format name."""
        return "tsb"

    def schema(self) -> str:
        """Control rows: ``barrier long, plan string``."""
        return SOURCE_SCHEMA

    def streamReader(self, schema: object) -> DataSourceStreamReader:  # noqa: N802 - Spark API
        """The barrier stream reader."""
        return TsbStreamReader(self.options)


@dataclass
class _Progress:
    barriers: list[int] = field(default_factory=list)
    last_progress: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


def barrier_stream(
    spark: SparkSession,
    app: TsbApp,
    catalog: BarrierCatalog,
    locations: Mapping[str, str],
    *,
    until_barrier: int | None = None,
    max_barriers: int | None = None,
) -> DataFrame:
    """The streaming DataFrame of the job's barriers (one control row per micro-batch)."""
    spark.dataSource.register(TsbDataSource)
    after = sinks_base_barrier(app, locations)
    return (
        spark.readStream.format("tsb")
        .option("catalog", json.dumps(catalog.spec()))
        .option("job_id", app.job_id)
        .option("sources", json.dumps({n: locations[n] for n in app.sources}))
        .option("start_after", str(-1 if after is None else after))
        .option("until_barrier", "" if until_barrier is None else str(until_barrier))
        .option("max_barriers", "" if max_barriers is None else str(max_barriers))
        .load()
    )


def run_streaming(
    spark: SparkSession,
    app: TsbApp,
    catalog: BarrierCatalog,
    locations: Mapping[str, str],
    *,
    checkpoint: str | None = None,
    until_barrier: int | None = None,
    max_barriers: int | None = None,
    idle_timeout_s: float | None = None,
    trigger_interval_s: float = 0.5,
) -> list[int]:
    """Streaming mode: run the barrier query until a stop condition, return the barriers done.

    Stops after ``max_barriers`` micro-batches, after committing ``until_barrier``, or after
    ``idle_timeout_s`` seconds without a new barrier (runs forever if none is given).

    Raises:
        pyspark.errors.StreamingQueryException: a micro-batch failed (e.g. misaligned input).
    """
    ckpt = checkpoint or os.path.join(locations[sorted(app.sinks)[0]], "_tsb_checkpoints", app.job_id)
    progress = _Progress()
    report_written_heads(app, locations, catalog)

    def handle(batch: DataFrame, batch_id: int) -> None:
        # control rows only (<= 1 barrier descriptor), never table data
        for row in batch.collect():
            plan = BarrierPlan.from_json(row["plan"])
            run_barrier(spark, app, plan, locations, catalog)
            with progress.lock:
                progress.barriers.append(plan.barrier)
                progress.last_progress = time.monotonic()
        catalog.heartbeat(app.job_id)

    query = (
        barrier_stream(spark, app, catalog, locations, until_barrier=until_barrier, max_barriers=max_barriers)
        .writeStream.queryName(f"tsb_{app.job_id}")
        .foreachBatch(handle)
        .option("checkpointLocation", ckpt)
        .trigger(processingTime=f"{trigger_interval_s} seconds")
        .start()
    )
    try:
        while query.isActive:
            with progress.lock:
                done = list(progress.barriers)
                idle = time.monotonic() - progress.last_progress
            if max_barriers is not None and len(done) >= max_barriers:
                break
            if until_barrier is not None and done and done[-1] >= until_barrier:
                break
            if idle_timeout_s is not None and idle >= idle_timeout_s and not query.status["isDataAvailable"]:
                break
            query.awaitTermination(0.2)
    finally:
        if query.isActive:
            query.stop()
    exc = query.exception()
    if exc is not None:
        raise exc
    return progress.barriers
