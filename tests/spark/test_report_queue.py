"""A batch run's end-of-barrier reports run behind its next barrier (spark/report_queue.py).

The unit tests drive :class:`ReportQueue` with plain callables: order, a failure that stops the
rest and surfaces in the main thread with the barrier named, and the hand-over of an input
lease to the next start. The last test is the production path: a real Spark batch run through
the metastore catalog whose WRITTEN report of barrier 1 fails in the background; the run stops
before barrier 2 is reported PROCESSED or committed, and a rerun repairs and finishes it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from sqlalchemy import event

from airflow_provider_tsb.exceptions import FencedError
from airflow_provider_tsb.metastore.records import BarrierState
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.spark.app_run import AppRun
from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
from airflow_provider_tsb.spark.model import Sink, TsbApp
from airflow_provider_tsb.spark.report_queue import ReportQueue
from airflow_provider_tsb.spark.runner import run_batch
from dev import lease_world as lw


def test_reports_run_in_order_on_one_thread_behind_the_caller() -> None:
    ran: list[tuple[int, str]] = []
    main = threading.get_ident()
    with ReportQueue("job") as queue:
        for barrier in (1, 2, 3):
            queue.submit(barrier, "a", lambda b=barrier: (time.sleep(0.01), ran.append((b, "a"))))
            queue.submit(barrier, "b", lambda b=barrier: ran.append((b, "b" if threading.get_ident() != main else "?")))
    assert ran == [(1, "a"), (1, "b"), (2, "a"), (2, "b"), (3, "a"), (3, "b")]


def test_reports_are_held_until_released_while_the_driver_works() -> None:
    """Reports wait while the driver does Python work of its own and run once it waits on
    Spark (:meth:`ReportQueue.release`) or on them (:meth:`ReportQueue.wait`)."""
    ran: list[int] = []
    with ReportQueue("job") as queue:
        queue.submit(1, "WRITTEN of t at version 0", lambda: ran.append(1))
        time.sleep(0.2)
        assert ran == []  # held
        queue.release()
        deadline = time.monotonic() + 10
        while not ran and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ran == [1]
        queue.submit(2, "WRITTEN of t at version 1", lambda: ran.append(2))
        queue.wait()  # releases what is held
        assert ran == [1, 2]


def test_a_failed_report_stops_the_rest_and_is_raised_with_its_barrier() -> None:
    ran: list[int] = []
    queue = ReportQueue("enrich")

    def fenced() -> None:
        raise FencedError("job enrich: a newer attempt started", job_id="enrich", barrier=2, token=1, winner=2)

    queue.submit(1, "WRITTEN of t at version 3", lambda: ran.append(1))
    queue.submit(2, "WRITTEN of t at version 4", fenced)
    queue.submit(3, "WRITTEN of t at version 5", lambda: ran.append(3))
    with pytest.raises(FencedError) as caught:
        queue.wait()
    assert ran == [1]  # barrier 3's report did not run after barrier 2's failed
    assert "while reporting WRITTEN of t at version 4 of barrier 2" in "\n".join(caught.value.__notes__)
    queue.wait()  # raised once
    queue.close()


def test_a_finished_barriers_lease_ends_with_the_next_start_or_at_close() -> None:
    ended: list[str] = []
    queue = ReportQueue("job", release_lease=ended.append)
    queue.end_lease_with_next_start("lease-1")
    assert queue.lease_to_end() == "lease-1"  # the next start record ends it
    assert queue.lease_to_end() is None
    queue.end_lease_with_next_start("lease-2")
    queue.end_lease_with_next_start("lease-3")  # no start between: lease-2 ends at once
    assert ended == ["lease-2"]
    queue.close()
    assert ended == ["lease-2", "lease-3"]


class _FailingOnce(MetastoreCatalog):
    """The production catalog whose first WRITTEN report of ``barrier`` fails (a metastore
    refusing it) after recording nothing."""

    def __init__(self, url: str, barrier: int) -> None:
        super().__init__(url)
        self.fail_at = barrier
        self.main = threading.get_ident()
        self.reported_from: list[bool] = []

    def record_written(self, table: str, barrier: int, version: int, job_id: str, attempt: str | None = None) -> None:
        self.reported_from.append(threading.get_ident() != self.main)
        if barrier == self.fail_at:
            self.fail_at = -1
            raise RuntimeError(f"metastore refused WRITTEN of {table} at barrier {barrier}")
        super().record_written(table, barrier, version, job_id, attempt=attempt)


def _lease_world(tmp_path: Path, barriers: int) -> tuple[str, MetaStore, dict[str, str]]:
    """(url, store, locations) of a SQLite metastore over the lease world with ``barriers`` barriers."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    locations = lw.build(store, str(tmp_path / "wh"), consumer=True)
    for _ in range(barriers):
        lw.write_barrier(store, locations)
    return url, store, locations


def test_a_failed_background_report_stops_the_run_before_the_next_commit(spark, tmp_path: Path) -> None:
    url, store, locations = _lease_world(tmp_path, 3)

    def process(ctx):  # noqa: ANN001, ANN202 - the app's process function
        out = ctx.snapshot(lw.SNAP).groupBy().agg(F.count("*").alias("n"))
        return {lw.SUMMARY: out.select(F.lit(ctx.barrier).cast("long").alias("b"), "n")}

    app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
    tables = {lw.SNAP: locations[lw.SNAP], lw.SUMMARY: locations[lw.SUMMARY]}
    catalog = _FailingOnce(url, barrier=1)
    with pytest.raises(RuntimeError, match="refused WRITTEN of .* at barrier 1") as caught:
        run_batch(AppRun(spark, app, catalog, tables))
    assert "of barrier 1 (in the background" in "\n".join(caught.value.__notes__)
    assert catalog.reported_from == [True]  # made by the report thread, not the job's main thread
    # barrier 1 is committed in Delta, not WRITTEN; barrier 2 ran but was neither reported nor committed
    assert DeltaTable(locations[lw.SUMMARY]).version() == 0
    assert store.table_states.get(lw.SUMMARY, 1).state == BarrierState.PROCESSED
    assert store.table_states.get(lw.SUMMARY, 2) is None
    assert store.job_runs.job_barrier_statuses("sum_job", [1, 2]) == {1: "running", 2: "failed"}
    assert store.leases.leased_ranges(lw.SNAP) == []  # barrier 1's ended with 2's start, 2's with its failure

    done = run_batch(AppRun(spark, app, MetastoreCatalog(url), tables))  # the rerun repairs barrier 1 from the log
    assert done == [2, 3]
    states = [store.table_states.get(lw.SUMMARY, b) for b in (1, 2, 3)]
    assert [(s.state, s.version) for s in states] == [(BarrierState.WRITTEN, v) for v in (0, 1, 2)]
    rows = DeltaTable(locations[lw.SUMMARY]).to_pyarrow_table().column("b").to_pylist()
    assert sorted(rows) == [1, 2, 3]  # exactly once
    assert store.registry.job("sum_job").current_barrier == 3
    assert store.leases.leased_ranges(lw.SNAP) == []
    store.dispose()


def _count_commits(catalog: MetastoreCatalog) -> list[int]:
    commits = [0]
    event.listen(catalog.store.core.engine, "commit", lambda _conn: commits.__setitem__(0, commits[0] + 1))
    return commits


def test_reports_released_together_commit_in_one_transaction_or_not_at_all(tmp_path: Path) -> None:
    """With the catalog's ``in_one_transaction``, the reports one release lets go are one
    metastore transaction: a failure in the last undoes the first, and the note names the last."""
    url, store, _ = _lease_world(tmp_path, 0)
    catalog = MetastoreCatalog(url)
    commits = _count_commits(catalog)
    queue = ReportQueue("sum_job", transaction=catalog.in_one_transaction)
    for barrier in (1, 2):
        queue.submit(barrier, "the job's running record",
                     lambda b=barrier: catalog.record_job_barrier("sum_job", b, "running", started_at_ms=1))
    queue.wait()
    assert commits[0] == 1  # two records, one transaction
    assert store.job_runs.job_barrier_statuses("sum_job", [1, 2]) == {1: "running", 2: "running"}

    def refused() -> None:
        raise RuntimeError("metastore refused it")
    queue.submit(1, "the job's succeeded record",
                 lambda: catalog.record_job_barrier("sum_job", 1, "succeeded", finished_at_ms=2))
    queue.submit(2, "WRITTEN of t at version 7", refused)
    with pytest.raises(RuntimeError, match="refused") as caught:
        queue.wait()
    assert "while reporting WRITTEN of t at version 7 of barrier 2" in "\n".join(caught.value.__notes__)
    assert store.job_runs.job_barrier_statuses("sum_job", [1, 2]) == {1: "running", 2: "running"}  # undone
    queue.close()


def test_a_batch_run_reports_each_barrier_in_about_one_transaction(spark, tmp_path: Path) -> None:
    """The production path (run_batch on the metastore catalog): a barrier's WRITTEN, its
    succeeded record and the next barrier's running record go in one transaction; counted by
    the engine's COMMITs over a run of 6 barriers, all WRITTEN at the end."""
    url, store, locations = _lease_world(tmp_path, 6)

    def process(ctx):  # noqa: ANN001, ANN202 - the app's process function
        return {lw.SUMMARY: ctx.changes(lw.SNAP).groupBy().agg(F.count("*").alias("n"))
                .select(F.lit(ctx.barrier).cast("long").alias("b"), "n")}

    app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
    catalog = MetastoreCatalog(url)
    commits = _count_commits(catalog)
    assert run_batch(AppRun(spark, app, catalog, {lw.SNAP: locations[lw.SNAP], lw.SUMMARY: locations[lw.SUMMARY]})) == \
        [1, 2, 3, 4, 5, 6]
    states = [store.table_states.get(lw.SUMMARY, b) for b in range(1, 7)]
    assert [(s.state, s.version) for s in states] == [(BarrierState.WRITTEN, v) for v in range(6)]
    assert store.job_runs.job_barrier_statuses("sum_job", list(range(1, 7))) == {b: "succeeded" for b in range(1, 7)}
    # per barrier: PROCESSED, then one transaction for WRITTEN, succeeded, the lease's narrowing and
    # the next start (2; each its own before: 5); plus the run's own (attempt, leases, pending): 21 of 37
    assert commits[0] <= 2 * 6 + 9, commits[0]
