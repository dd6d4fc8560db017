"""Streaming mode: a long-running job whose micro-batches are barriers, on either engine.

* **submit** engine (the app is its own Spark driver): a Structured Streaming query, below.
* **connect** engine (the app is a Spark Connect client): the client drives the micro-batches
  itself (:func:`run_client_micro_batches`). Spark Connect runs a ``foreachBatch`` function in
  a Python process of the *server*, not in the client (pyspark raises
  ``STREAMING_CONNECT_SERIALIZATION_ERROR`` for a function that holds the client's session or
  catalog), so the barrier protocol could not stay in the job. Instead the client long-polls
  the catalog with the same :class:`~airflow_provider_tsb.spark.barrier_source.BarrierFeed`
  the source uses and runs :func:`~airflow_provider_tsb.spark.runner.run_barrier_group` per
  micro-batch: the same micro-batches, the same stop rules, no Python worker on the Spark side. Its
  checkpoint is the sinks' Delta logs (a restarted client resumes after the barrier its sinks
  hold; replays are discarded by the txn).

The Structured Streaming query:

The source ``spark.readStream.format("tsb")`` (a Python Data Source) has offsets
``{"barrier": n}``; a micro-batch covers the next barriers that are WRITTEN in all the job's
inputs, at most ``max_barriers_per_trigger`` of them (one with ``1``), and yields a control row
``(barrier, plan JSON)`` per barrier. The sink is ``foreachBatch`` running
:func:`airflow_provider_tsb.spark.runner.run_barrier_group` (one barrier:
:func:`~airflow_provider_tsb.spark.runner.run_barrier`), i.e. the exactly-once commit protocol,
a commit per barrier. The checkpoint's offset log maps micro-batch -> barriers, so a restarted
query replays the same barriers (whose commits the txn check then discards).
After restoring the sinks to an earlier barrier, delete the checkpoint.

The source (:mod:`airflow_provider_tsb.spark.barrier_source`) runs in Spark Python workers: its
offsets in one the driver starts, which re-opens the catalog from its spec
(:func:`airflow_provider_tsb.spark.catalog.open_catalog`, which imports every built-in kind); its
``read()`` on executors, which import only that module (see its doc).

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
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from airflow_provider_tsb.delta.log import CommitMemo, shared_commit_reads
from airflow_provider_tsb.spark.barrier_source import (  # noqa: F401 - re-exported
    SOURCE_SCHEMA,
    BarrierFeed,
    BarrierPartition,
    TsbDataSource,
    TsbStreamReader,
)
from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan
from airflow_provider_tsb.spark.model import TsbApp
from airflow_provider_tsb.spark.plans import DEFAULT_MAX_BARRIERS_PER_TRIGGER
from airflow_provider_tsb.spark.runner import run_barrier_group, sinks_base_barrier, start_run
from airflow_provider_tsb.spark.session import is_connect

log = logging.getLogger("airflow_provider_tsb.spark")


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
    max_barriers_per_trigger: int = 1,
) -> DataFrame:
    """The streaming DataFrame of the job's barriers (a control row per barrier, up to
    ``max_barriers_per_trigger`` barriers per micro-batch).

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
        .option("max_barriers_per_trigger", str(max_barriers_per_trigger))
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
    max_barriers_per_trigger: int = DEFAULT_MAX_BARRIERS_PER_TRIGGER,
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
        max_barriers_per_trigger: ready barriers one micro-batch takes at most, on either engine
            (:mod:`~airflow_provider_tsb.spark.barrier_group`; ``1``: a micro-batch per barrier).

    A query that fails because a Spark Python worker missed its start-up window (a busy
    machine; :func:`python_worker_start_failed`) is restarted from its checkpoint, up to
    :data:`MAX_QUERY_RESTARTS` times with backoff.

    Raises:
        pyspark.errors.StreamingQueryException: a micro-batch failed (e.g. misaligned input).
    """
    base = start_run(app, catalog, locations)
    final = catalog.final_barrier(app.job_id, final_since_ms) if final_since_ms is not None else None
    if base is not None and final is not None and base >= final:
        log.info("job %s: sinks already hold final barrier %s; input ended, nothing to do", app.job_id, final)
        catalog.heartbeat(app.job_id)
        return []
    stops = {"until_barrier": until_barrier, "max_barriers": max_barriers, "idle_timeout_s": idle_timeout_s,
             "final_since_ms": final_since_ms, "wait_s": trigger_interval_s, "poll_s": poll_interval_s}
    if is_connect(spark):
        done = run_client_micro_batches(spark, app, catalog, locations, after=base,
                                        max_barriers_per_trigger=max_barriers_per_trigger, **stops)
    else:
        ckpt = checkpoint or os.path.join(locations[sorted(app.sinks)[0]], "_tsb_checkpoints", app.job_id)
        done = _run_source_query(spark, app, catalog, locations, ckpt, base,
                                 max_barriers_per_trigger=max_barriers_per_trigger, **stops)
    catalog.heartbeat(app.job_id)
    return done


def _run_source_query(
    spark: SparkSession, app: TsbApp, catalog: BarrierCatalog, locations: Mapping[str, str], ckpt: str,
    base: int | None, *, until_barrier: int | None, max_barriers: int | None, idle_timeout_s: float | None,
    final_since_ms: int | None, wait_s: float, poll_s: float, max_barriers_per_trigger: int = 1,
) -> list[int]:
    """The submit engine's part of :func:`run_streaming`: the barrier source's streaming query,
    restarted from its checkpoint ``ckpt`` when a Python worker missed its start-up window;
    returns the barriers committed."""
    progress = _Progress()
    restarts = 0
    while True:
        remaining = None if max_barriers is None else max_barriers - len(progress.barriers)
        query = _start_query(
            spark, app, catalog, locations, progress, ckpt, until_barrier=until_barrier, max_barriers=remaining,
            final_since_ms=final_since_ms, after=base, wait_s=wait_s, poll_s=poll_s,
            max_barriers_per_trigger=max_barriers_per_trigger,
        )
        _watch(query, progress, until_barrier=until_barrier, max_barriers=max_barriers, idle_timeout_s=idle_timeout_s)
        exc = query.exception()
        if exc is None:
            return progress.barriers
        if not python_worker_start_failed(exc) or restarts >= MAX_QUERY_RESTARTS:
            raise exc
        restarts += 1
        wait = min(2.0 ** restarts, 30.0)
        log.warning(
            "job %s: the streaming query stopped because a Spark Python worker did not start in time (a busy "
            "machine: %s); restarting it from its checkpoint in %.0f s (restart %d of %d)",
            app.job_id, _first_line(exc), wait, restarts, MAX_QUERY_RESTARTS,
        )
        time.sleep(wait)
        base = sinks_base_barrier(app, locations)


#: times a streaming query is restarted (from its checkpoint) after a Python worker failed to start
MAX_QUERY_RESTARTS = 10
#: Spark's errors for a Python worker that missed its connect-back window: the driver waits a
#: fixed 10 s for a new worker process (``PythonWorkerFactory``); a loaded machine can miss it
WORKER_START_FAILURES = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)


def python_worker_start_failed(exc: BaseException) -> bool:
    """True when a streaming query failed because a Spark Python worker did not start in time
    (retrying the query, which resumes from its checkpoint, is safe and usually enough)."""
    text = str(exc)
    return any(marker in text for marker in WORKER_START_FAILURES)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:200] if lines else type(exc).__name__


def _start_query(
    spark: SparkSession, app: TsbApp, catalog: BarrierCatalog, locations: Mapping[str, str], progress: _Progress,
    checkpoint: str, *, until_barrier: int | None, max_barriers: int | None, final_since_ms: int | None,
    after: int | None, wait_s: float, poll_s: float, max_barriers_per_trigger: int = 1,
) -> StreamingQuery:
    """Start the barrier query whose ``foreachBatch`` runs the micro-batch's barriers
    (:func:`run_barrier_group`: one input lease, a commit each, in order; submit engine)."""

    memo = CommitMemo()  # commit files read, shared by the micro-batches (shared_commit_reads)

    def handle(batch: DataFrame, batch_id: int) -> None:
        # control rows only (a barrier descriptor each), never table data
        began = time.time()
        rows = batch.collect()
        source_s = time.time() - began
        plans = sorted((BarrierPlan.from_json(row["plan"]) for row in rows), key=lambda p: p.barrier)
        if not plans:
            return
        poll = max(0.0, began - plans[0].ready_at_ms / 1000) if plans[0].ready_at_ms else 0.0
        with shared_commit_reads(memo):
            done = run_barrier_group(spark, app, plans, locations, catalog, before={"poll": poll, "source": source_s})
        with progress.lock:
            progress.barriers.extend(done)
            progress.last_progress = time.monotonic()
            for plan in plans:
                if plan.ends_input_since(final_since_ms):
                    progress.final = plan.barrier

    return (
        barrier_stream(
            spark, app, catalog, locations, until_barrier=until_barrier, max_barriers=max_barriers,
            final_since_ms=final_since_ms, after=after, wait_s=wait_s, poll_s=poll_s,
            max_barriers_per_trigger=max_barriers_per_trigger,
        )
        .writeStream.queryName(f"tsb_{app.job_id}")
        .foreachBatch(handle)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")  # the source's long poll paces idle polls
        .start()
    )


def _watch(
    query: StreamingQuery, progress: _Progress, *, until_barrier: int | None, max_barriers: int | None,
    idle_timeout_s: float | None,
) -> None:
    """Wait until a stop rule of :func:`run_streaming` holds or the query fails; stop it."""
    try:
        while query.isActive:
            with progress.lock:
                done = list(progress.barriers)
                idle = time.monotonic() - progress.last_progress
                ended = progress.final
            if ended is not None:
                log.info("committed final barrier %s (end of input); stopping %s", ended, query.name)
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


def run_client_micro_batches(
    spark: SparkSession,
    app: TsbApp,
    catalog: BarrierCatalog,
    locations: Mapping[str, str],
    *,
    after: int | None,
    until_barrier: int | None = None,
    max_barriers: int | None = None,
    idle_timeout_s: float | None = None,
    final_since_ms: int | None = None,
    wait_s: float = 1.0,
    poll_s: float = 0.05,
    max_barriers_per_trigger: int = DEFAULT_MAX_BARRIERS_PER_TRIGGER,
) -> list[int]:
    """Streaming mode on Spark Connect: the client runs micro-batches of ready barriers, in order.

    Each turn long-polls the catalog for the next ready barriers (:class:`BarrierFeed`, at most
    ``wait_s`` seconds, a look-up every ``poll_s``) and runs up to ``max_barriers_per_trigger``
    of them as one micro-batch (:func:`~airflow_provider_tsb.spark.runner.run_barrier_group`; the
    phase ``poll`` of the first one's timing is the wait from it being ready to its start).
    Stops after a final barrier generated since ``final_since_ms`` is committed, after
    ``until_barrier`` or ``max_barriers`` barriers, or after ``idle_timeout_s`` s without one.

    Args:
        after: the barrier the sinks hold (``None``: empty sinks).

    Returns the barriers committed (or found committed), ascending.

    Raises:
        whatever :func:`run_barrier_group` raises for a barrier (the micro-batch failed).
    """
    feed = BarrierFeed(
        catalog.spec(), app.job_id, {n: locations[n] for n in app.sources}, until_barrier=until_barrier,
        max_barriers=max_barriers, final_since_ms=final_since_ms, wait_s=wait_s, poll_s=poll_s, catalog=catalog,
    )
    current = -1 if after is None else after
    done: list[int] = []
    last_progress = time.monotonic()
    memo = CommitMemo()  # commit files read, shared by the micro-batches (shared_commit_reads)
    while not feed.ended(current):
        if max_barriers is not None and len(done) >= max_barriers:
            break
        if until_barrier is not None and current >= until_barrier:
            break
        plans = feed.next_plans_after(current, max_barriers_per_trigger)
        if not plans:
            if idle_timeout_s is not None and time.monotonic() - last_progress >= idle_timeout_s:
                log.info("job %s: no barrier for %.1f s; stopping (idle timeout)", app.job_id, idle_timeout_s)
                break
            continue
        poll = max(0.0, time.time() - plans[0].ready_at_ms / 1000) if plans[0].ready_at_ms else 0.0
        with shared_commit_reads(memo):
            done.extend(run_barrier_group(spark, app, plans, locations, catalog, before={"poll": poll}))
        current = plans[-1].barrier
        last_progress = time.monotonic()
    if feed.final is not None and current >= feed.final:
        log.info("job %s: committed final barrier %s (end of input); stopping", app.job_id, feed.final)
    return done
