"""Streaming mode: a Structured Streaming query whose micro-batches are barriers.

The source ``spark.readStream.format("tsb")`` (a Python Data Source) has offsets
``{"barrier": n}``; each micro-batch covers exactly one barrier, the next one that is WRITTEN
in all the job's inputs, and yields one control row ``(barrier, plan JSON)``. The sink is
``foreachBatch`` running :func:`airflow_provider_tsb.spark.runner.run_barrier`, i.e. the
exactly-once commit protocol. The checkpoint's offset log maps micro-batch -> barrier, so a
restarted query replays the same barriers (whose commits the txn check then discards).
After restoring the sinks to an earlier barrier, delete the checkpoint.

The source runs in a Spark Python worker, so it re-opens the catalog from its spec
(:func:`airflow_provider_tsb.spark.catalog.open_catalog`, which imports every built-in kind).

End of input (FLIP-147): a barrier generated with ``final=True`` is the last one of a bounded
input. The source offers nothing after it, and :func:`run_streaming` stops once it is committed
(with ``final_since_ms``, only a final barrier generated at or after that time counts, so a new
run is not stopped by the previous run's final barrier, and a retried run whose sinks already
hold its final barrier ends at once).
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

from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan, open_catalog
from airflow_provider_tsb.spark.model import TsbApp
from airflow_provider_tsb.spark.runner import report_written_heads, run_barrier, sinks_base_barrier

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
    them, so a stopping query never starts a barrier it will not finish), and
    ``final_since_ms`` (nothing is offered after a final barrier generated since then; empty:
    after any final barrier).
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
        self.final_since_ms = int(options["final_since_ms"]) if options.get("final_since_ms") else None
        self.wait_s = float(options.get("wait_s") or 0.0)
        self.poll_s = max(0.01, float(options.get("poll_s") or 0.05))
        self._offered: set[int] = set()
        self._final: int | None = None

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
        if self._final is not None and after >= self._final:
            return {"barrier": after}  # end of input: nothing after the final barrier
        deadline = time.monotonic() + self.wait_s
        plan = self._next(after)
        while plan is None and time.monotonic() + self.poll_s < deadline:
            time.sleep(self.poll_s)
            plan = self._next(after)
        if plan is not None and self.until_barrier is not None and plan.barrier > self.until_barrier:
            plan = None
        if plan is not None and self.max_barriers is not None and plan.barrier not in self._offered:
            if len(self._offered) >= self.max_barriers:
                plan = None
        if plan is not None:
            self._offered.add(plan.barrier)
            if plan.ends_input_since(self.final_since_ms):
                self._final = plan.barrier
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
    final: int | None = None
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
    final_since_ms: int | None = None,
    after: int | None = None,
    wait_s: float = 0.0,
    poll_s: float = 0.05,
) -> DataFrame:
    """The streaming DataFrame of the job's barriers (one control row per micro-batch).

    ``after``: the barrier the sinks are at (read from their Delta logs when ``None``);
    ``wait_s``/``poll_s``: the source's long poll, seconds (see :class:`TsbStreamReader`).
    """
    spark.dataSource.register(TsbDataSource)
    if after is None:
        after = sinks_base_barrier(app, locations)
    return (
        spark.readStream.format("tsb")
        .option("catalog", json.dumps(catalog.spec()))
        .option("job_id", app.job_id)
        .option("sources", json.dumps({n: locations[n] for n in app.sources}))
        .option("start_after", str(-1 if after is None else after))
        .option("until_barrier", "" if until_barrier is None else str(until_barrier))
        .option("max_barriers", "" if max_barriers is None else str(max_barriers))
        .option("final_since_ms", "" if final_since_ms is None else str(final_since_ms))
        .option("wait_s", str(wait_s))
        .option("poll_s", str(poll_s))
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
    final_since_ms: int | None = None,
    poll_interval_s: float = 0.05,
) -> list[int]:
    """Streaming mode: run the barrier query until a stop condition, return the barriers done.

    Stops after committing a final barrier (FLIP-147 end of input; generated at or after
    ``final_since_ms`` epoch ms when given), after ``max_barriers`` micro-batches, after
    committing ``until_barrier``, or after ``idle_timeout_s`` seconds without a new barrier;
    with none of them it runs until the input ends. If the sinks already hold a final barrier
    generated since ``final_since_ms`` (a retry after the job finished), it returns at once.

    Args:
        trigger_interval_s: longest wait, seconds, for a barrier inside one offset poll (the
            source's long poll); an idle query makes one micro-batch attempt per interval.
        poll_interval_s: seconds between catalog look-ups while the source waits: a ready
            barrier starts its micro-batch within about this delay.

    Raises:
        pyspark.errors.StreamingQueryException: a micro-batch failed (e.g. misaligned input).
    """
    ckpt = checkpoint or os.path.join(locations[sorted(app.sinks)[0]], "_tsb_checkpoints", app.job_id)
    progress = _Progress()
    report_written_heads(app, locations, catalog)
    base = sinks_base_barrier(app, locations)
    final = catalog.final_barrier(app.job_id, final_since_ms) if final_since_ms is not None else None
    if base is not None and final is not None and base >= final:
        log.info("job %s: sinks already hold final barrier %s; input ended, nothing to do", app.job_id, final)
        catalog.heartbeat(app.job_id)
        return []

    def handle(batch: DataFrame, batch_id: int) -> None:
        # control rows only (<= 1 barrier descriptor), never table data
        began = time.time()
        rows = batch.collect()
        source_s = time.time() - began
        for row in rows:
            plan = BarrierPlan.from_json(row["plan"])
            poll_s = max(0.0, began - plan.ready_at_ms / 1000) if plan.ready_at_ms else 0.0
            run_barrier(spark, app, plan, locations, catalog, before={"poll": poll_s, "source": source_s})
            with progress.lock:
                progress.barriers.append(plan.barrier)
                progress.last_progress = time.monotonic()
                if plan.ends_input_since(final_since_ms):
                    progress.final = plan.barrier

    query = (
        barrier_stream(
            spark, app, catalog, locations, until_barrier=until_barrier, max_barriers=max_barriers,
            final_since_ms=final_since_ms, after=base, wait_s=trigger_interval_s, poll_s=poll_interval_s,
        )
        .writeStream.queryName(f"tsb_{app.job_id}")
        .foreachBatch(handle)
        .option("checkpointLocation", ckpt)
        .trigger(processingTime="0 seconds")  # the source's long poll paces idle polls
        .start()
    )
    try:
        while query.isActive:
            with progress.lock:
                done = list(progress.barriers)
                idle = time.monotonic() - progress.last_progress
                ended = progress.final
            if ended is not None:
                log.info("job %s: committed final barrier %s (end of input); stopping", app.job_id, ended)
                break
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
    catalog.heartbeat(app.job_id)
    return progress.barriers
