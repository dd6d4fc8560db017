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
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from airflow_provider_tsb.delta.log import CommitMemo, shared_commit_reads
from airflow_provider_tsb.spark.app_run import AppRun, StreamOptions
from airflow_provider_tsb.spark.barrier_source import (  # noqa: F401 - re-exported
    SOURCE_SCHEMA,
    BarrierFeed,
    BarrierPartition,
    TsbDataSource,
    TsbStreamReader,
)
from airflow_provider_tsb.spark.catalog import BarrierCatalog, BarrierPlan
from airflow_provider_tsb.spark.runner import run_barrier_group, start_run
from airflow_provider_tsb.spark.session import is_connect

log = logging.getLogger("airflow_provider_tsb.spark")


@dataclass
class _Progress:
    barriers: list[int] = field(default_factory=list)
    final: int | None = None
    last_progress: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


def barrier_stream(run: AppRun, options: StreamOptions, *, after: int | None = None,
                   max_barriers: int | None = None) -> DataFrame:
    """The streaming DataFrame of the job's barriers (a control row per barrier, up to
    ``options.max_barriers_per_trigger`` barriers per micro-batch), after barrier ``after`` (the
    one the sinks are at: read from their Delta logs when ``None``); ``max_barriers``: those
    still to come (default ``options.max_barriers``). The source long-polls up to
    ``options.trigger_interval_s``, a look-up every ``options.poll_interval_s``
    (:class:`TsbStreamReader`).
    """
    spark = run.spark
    spark.dataSource.register(TsbDataSource)
    if after is None:
        after = run.base_barrier()
    remaining = options.max_barriers if max_barriers is None else max_barriers
    return (
        spark.readStream.format("tsb")
        .option("catalog", json.dumps(_catalog(run).spec()))
        .option("job_id", run.job_id)
        .option("sources", json.dumps(run.sources()))
        .option("start_after", str(-1 if after is None else after))
        .option("until_barrier", _opt(options.until_barrier))
        .option("max_barriers", _opt(remaining))
        .option("final_since_ms", _opt(options.final_since_ms))
        .option("wait_s", str(options.trigger_interval_s))
        .option("poll_s", str(options.poll_interval_s))
        .option("max_barriers_per_trigger", str(options.max_barriers_per_trigger))
        .load()
    )


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


def _catalog(run: AppRun) -> BarrierCatalog:
    if run.catalog is None:
        raise ValueError(f"job {run.job_id}: a streaming run needs a barrier catalog to take its barriers from")
    return run.catalog


def run_streaming(run: AppRun, options: StreamOptions | None = None) -> list[int]:
    """Streaming mode: run the barrier query until a stop rule of ``options`` holds
    (:class:`~airflow_provider_tsb.spark.app_run.StreamOptions`), return the barriers done.

    If the sinks already hold a final barrier generated since ``options.final_since_ms`` (a
    retry after the job finished), it returns at once. A query that fails because a Spark
    Python worker missed its start-up window (a busy machine; :func:`python_worker_start_failed`)
    is restarted from its checkpoint, up to :data:`MAX_QUERY_RESTARTS` times with backoff.

    Raises:
        pyspark.errors.StreamingQueryException: a micro-batch failed (e.g. misaligned input).
        ValueError: ``run`` has no catalog.
    """
    options = options or StreamOptions()
    catalog = _catalog(run)
    base = start_run(run)
    since = options.final_since_ms
    final = catalog.final_barrier(run.job_id, since) if since is not None else None
    if base is not None and final is not None and base >= final:
        log.info("job %s: sinks already hold final barrier %s; input ended, nothing to do", run.job_id, final)
        catalog.heartbeat(run.job_id)
        return []
    if is_connect(run.spark):
        done = run_client_micro_batches(run, options, after=base)
    else:
        ckpt = options.checkpoint or os.path.join(run.locations[sorted(run.app.sinks)[0]], "_tsb_checkpoints",
                                                  run.job_id)
        done = _run_source_query(run, options, ckpt, base)
    catalog.heartbeat(run.job_id)
    return done


def _run_source_query(run: AppRun, options: StreamOptions, ckpt: str, base: int | None) -> list[int]:
    """The submit engine's part of :func:`run_streaming`: the barrier source's streaming query,
    restarted from its checkpoint ``ckpt`` when a Python worker missed its start-up window;
    returns the barriers committed."""
    progress = _Progress()
    restarts = 0
    while True:
        remaining = None if options.max_barriers is None else options.max_barriers - len(progress.barriers)
        query = _start_query(run, options, progress, ckpt, after=base, max_barriers=remaining)
        _watch(query, progress, options)
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
            run.job_id, _first_line(exc), wait, restarts, MAX_QUERY_RESTARTS,
        )
        time.sleep(wait)
        base = run.base_barrier()


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


def _start_query(run: AppRun, options: StreamOptions, progress: _Progress, checkpoint: str, *,
                 after: int | None, max_barriers: int | None) -> StreamingQuery:
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
            done = run_barrier_group(run, plans, before={"poll": poll, "source": source_s})
        with progress.lock:
            progress.barriers.extend(done)
            progress.last_progress = time.monotonic()
            for plan in plans:
                if plan.ends_input_since(options.final_since_ms):
                    progress.final = plan.barrier

    return (
        barrier_stream(run, options, after=after, max_barriers=max_barriers)
        .writeStream.queryName(f"tsb_{run.job_id}")
        .foreachBatch(handle)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")  # the source's long poll paces idle polls
        .start()
    )


def _watch(query: StreamingQuery, progress: _Progress, options: StreamOptions) -> None:
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
            if options.max_barriers is not None and len(done) >= options.max_barriers:
                break
            if options.until_barrier is not None and done and done[-1] >= options.until_barrier:
                break
            timeout = options.idle_timeout_s
            if timeout is not None and idle >= timeout and not query.status["isDataAvailable"]:
                break
            query.awaitTermination(0.2)
    finally:
        if query.isActive:
            query.stop()


def run_client_micro_batches(run: AppRun, options: StreamOptions, *, after: int | None) -> list[int]:
    """Streaming mode on Spark Connect: the client runs micro-batches of ready barriers, in order.

    Each turn long-polls the catalog for the next ready barriers (:class:`BarrierFeed`, at most
    ``options.trigger_interval_s`` seconds, a look-up every ``options.poll_interval_s``) and runs
    up to ``options.max_barriers_per_trigger`` of them as one micro-batch
    (:func:`~airflow_provider_tsb.spark.runner.run_barrier_group`; the phase ``poll`` of the
    first one's timing is the wait from it being ready to its start), until a stop rule of
    ``options`` holds.

    Args:
        after: the barrier the sinks hold (``None``: empty sinks).

    Returns the barriers committed (or found committed), ascending.

    Raises:
        whatever :func:`run_barrier_group` raises for a barrier (the micro-batch failed).
    """
    catalog = _catalog(run)
    feed = BarrierFeed(
        catalog.spec(), run.job_id, run.sources(), until_barrier=options.until_barrier,
        max_barriers=options.max_barriers, final_since_ms=options.final_since_ms, wait_s=options.trigger_interval_s,
        poll_s=options.poll_interval_s, catalog=catalog,
    )
    current = -1 if after is None else after
    done: list[int] = []
    last_progress = time.monotonic()
    memo = CommitMemo()  # commit files read, shared by the micro-batches (shared_commit_reads)
    while not feed.ended(current):
        if options.max_barriers is not None and len(done) >= options.max_barriers:
            break
        if options.until_barrier is not None and current >= options.until_barrier:
            break
        plans = feed.next_plans_after(current, options.max_barriers_per_trigger)
        if not plans:
            if options.idle_timeout_s is not None and time.monotonic() - last_progress >= options.idle_timeout_s:
                log.info("job %s: no barrier for %.1f s; stopping (idle timeout)", run.job_id, options.idle_timeout_s)
                break
            continue
        poll = max(0.0, time.time() - plans[0].ready_at_ms / 1000) if plans[0].ready_at_ms else 0.0
        with shared_commit_reads(memo):
            done.extend(run_barrier_group(run, plans, before={"poll": poll}))
        current = plans[-1].barrier
        last_progress = time.monotonic()
    if feed.final is not None and current >= feed.final:
        log.info("job %s: committed final barrier %s (end of input); stopping", run.job_id, feed.final)
    return done
