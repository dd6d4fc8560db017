"""A running job leases the input versions it reads (issue 12 item 2; apache/paimon#5819).

A real Spark job (``run_batch`` through the metastore catalog) reads an input that is
overwritten at every barrier; inside ``process`` of barrier 3 -- after the job has planned its
lazy read of a version that is no longer the newest, before the executors read the files --
snapshot expiry runs with ``keep_barriers=1`` and without the consumer rule (at barrier 4 of 5). The batch run's
input lease (one for the run, narrowed as its barriers are done) keeps the files; the barrier
commits the right rows. The lease is gone once the run is over.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from airflow_provider_tsb.exceptions import ExpiredVersionError, UnknownJobError
from airflow_provider_tsb.maintenance.expiry import expire_snapshots
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.spark.app_run import AppRun
from airflow_provider_tsb.spark.input_leases import LeaseRequest
from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
from airflow_provider_tsb.spark.model import Sink, TsbApp
from airflow_provider_tsb.spark.runner import run_batch
from dev import lease_world as lw


def _lease_world(tmp_path: Path, barriers: int) -> tuple[str, MetaStore, dict[str, str]]:
    """A SQLite metastore with ``dev.lease_world``'s topology and ``barriers`` barriers."""
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    locations = lw.build(store, str(tmp_path / "wh"), consumer=True)
    for _ in range(barriers):
        lw.write_barrier(store, locations)
    return url, store, locations


def test_running_job_keeps_its_input_versions_under_expiry(spark, tmp_path) -> None:
    url, store, locations = _lease_world(tmp_path, barriers=5)
    seen: list[tuple[int, list[tuple[int, int]], int]] = []

    def process(ctx):  # noqa: ANN001, ANN202 - the app's process function
        snap = ctx.snapshot(lw.SNAP)  # lazy: files listed, not read yet
        leased = store.leases.leased_ranges(lw.SNAP)
        expired = []
        if ctx.barrier == 4:
            expired = expire_snapshots(store, lw.SNAP, 1, consumers=False)["expired_barriers"]
        seen.append((ctx.barrier, leased, expired))
        out = snap.groupBy().agg(F.count("*").alias("n"), F.min("b").alias("lo"), F.max("b").alias("hi"))
        return {lw.SUMMARY: out.select(F.lit(ctx.barrier).cast("long").alias("b"), "n", "lo", "hi")}

    app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
    done = run_batch(AppRun(spark, app, MetastoreCatalog(url), {lw.SNAP: locations[lw.SNAP],
                                                        lw.SUMMARY: locations[lw.SUMMARY]}), until_barrier=4)
    assert done == [1, 2, 3, 4]
    # the run leased snap's versions of barriers 1..4 (0..3) from its start; each barrier done
    # narrows it to the epochs still to come, behind the next barrier (on the report queue,
    # released when that barrier's write starts): at barrier 4's read it holds barriers 3..4's
    # (1..3), so expiry kept barrier 5 (the newest) and that range, and expired barrier 1 only
    assert seen == [(1, [(0, 3)], []), (2, [(0, 3)], []), (3, [(0, 3)], []), (4, [(1, 3)], [1])]
    summary = DeltaTable(locations[lw.SUMMARY]).to_pyarrow_dataset().to_table(use_threads=False)
    rows = sorted(zip(*(summary.column(c).to_pylist() for c in ("b", "n", "lo", "hi")), strict=True))
    assert rows == [(b, lw.ROWS, b, b) for b in (1, 2, 3, 4)]  # barrier 4 read its version whole
    assert store.leases.leased_ranges(lw.SNAP) == []  # released when the run ended
    store.dispose()


def test_a_run_whose_range_holds_an_expired_version_leases_barrier_by_barrier(spark, tmp_path) -> None:
    """Snap's version 1 is expired while version 0 is kept (a reader leases it): the run cannot
    lease its whole range, so each barrier leases its own epoch: barrier 1 (version 0) is
    committed, barrier 2 (versions 0..1) fails with the expiry error naming the table and the
    barrier, and no lease of the job is left."""
    url, store, locations = _lease_world(tmp_path, barriers=4)
    reader, _ = store.leases.create({lw.SNAP: 0}, 600.0, holder="a reader")
    assert expire_snapshots(store, lw.SNAP, 1, consumers=False)["expired_barriers"] == [2, 3]  # versions 1, 2

    def process(ctx):  # noqa: ANN001, ANN202 - the app's process function
        out = ctx.snapshot(lw.SNAP).groupBy().agg(F.count("*").alias("n"), F.min("b").alias("lo"),
                                                  F.max("b").alias("hi"))
        return {lw.SUMMARY: out.select(F.lit(ctx.barrier).cast("long").alias("b"), "n", "lo", "hi")}

    app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
    with pytest.raises(ExpiredVersionError, match=rf"barrier 2 \(Delta version 1\) of table '{lw.SNAP}'"):
        run_batch(AppRun(spark, app, MetastoreCatalog(url),
                         {lw.SNAP: locations[lw.SNAP], lw.SUMMARY: locations[lw.SUMMARY]}))
    assert store.job_runs.job_barrier_statuses("sum_job", [1, 2]) == {1: "succeeded", 2: "failed"}
    summary = DeltaTable(locations[lw.SUMMARY]).to_pyarrow_dataset().to_table(use_threads=False)
    assert summary.column("b").to_pylist() == [1] and summary.column("n").to_pylist() == [lw.ROWS]
    assert store.leases.leased_ranges(lw.SNAP) == [(0, 0)]  # the reader's only
    store.leases.release(reader)
    store.dispose()


def test_a_barrier_ends_its_lease_with_its_timing_in_one_transaction(tmp_path) -> None:
    """The end of a barrier (its timing, the job's heartbeat, the release of its input lease)
    is one metastore transaction: when the report is refused (the job is unknown), the lease
    is not ended either; when it is recorded, the lease is gone with it."""
    url, store, locations = _lease_world(tmp_path, barriers=1)
    catalog = MetastoreCatalog(url)
    lease_id = catalog.create_lease({lw.SNAP: (0, 0)}, 60.0, "job sum_job barrier 1")
    assert store.leases.leased_ranges(lw.SNAP) == [(0, 0)]
    with pytest.raises(UnknownJobError, match="no_such_job"):
        catalog.record_job_barrier("no_such_job", 1, "succeeded", finished_at_ms=5, release_lease=lease_id)
    assert store.leases.leased_ranges(lw.SNAP) == [(0, 0)]  # rolled back with the refused timing
    catalog.record_job_barrier("sum_job", 1, "succeeded", finished_at_ms=5, release_lease=lease_id)
    assert store.leases.leased_ranges(lw.SNAP) == []
    timing = store.job_runs.job_barriers(["sum_job"], [1])[0]
    assert (timing.status, timing.finished_at_ms) == ("succeeded", 5)
    assert store.registry.job("sum_job").current_barrier == 1
    store.dispose()


def test_a_barrier_takes_its_lease_with_its_start_in_one_transaction(tmp_path) -> None:
    """The start of a barrier (its ``running`` timing, the job's heartbeat, its input lease) is
    one metastore transaction: a lease on an expired version is refused with the start, and a
    start refused for an unknown job takes no lease."""
    url, store, locations = _lease_world(tmp_path, barriers=3)
    catalog = MetastoreCatalog(url)
    wanted = LeaseRequest({lw.SNAP: (0, 1)}, 60.0, "job sum_job barrier 2")
    with pytest.raises(UnknownJobError, match="no_such_job"):
        catalog.record_job_barrier("no_such_job", 2, "running", started_at_ms=5, take_lease=wanted)
    assert store.leases.leased_ranges(lw.SNAP) == []
    lease_id = catalog.record_job_barrier("sum_job", 2, "running", started_at_ms=5, take_lease=wanted)
    assert lease_id is not None and store.leases.leased_ranges(lw.SNAP) == [(0, 1)]
    assert store.job_runs.job_barrier_statuses("sum_job", [2]) == {2: "running"}
    catalog.record_job_barrier("sum_job", 2, "succeeded", finished_at_ms=6, release_lease=lease_id)
    assert store.leases.leased_ranges(lw.SNAP) == []

    assert 1 in expire_snapshots(store, lw.SNAP, 1, consumers=False)["expired_barriers"]  # version 0
    with pytest.raises(ExpiredVersionError, match=lw.SNAP):
        catalog.record_job_barrier("sum_job", 3, "running", started_at_ms=7,
                                   take_lease=LeaseRequest({lw.SNAP: (0, 2)}, 60.0, "job sum_job barrier 3"))
    assert store.job_runs.job_barrier_statuses("sum_job", [3]) == {}  # the start was not recorded either
    assert store.leases.leased_ranges(lw.SNAP) == []
    store.dispose()


def test_a_failed_barrier_records_failed_and_ends_its_lease(spark, tmp_path) -> None:
    """A barrier whose ``process`` raises is recorded FAILED and its input lease is released at
    once (not left to lapse); the barriers before it stay committed."""
    url, store, locations = _lease_world(tmp_path, barriers=2)

    def process(ctx):  # noqa: ANN001, ANN202 - the app's process function
        assert store.leases.leased_ranges(lw.SNAP), "the barrier reads under its input lease"
        if ctx.barrier == 2:
            raise RuntimeError("boom at barrier 2")
        snap = ctx.snapshot(lw.SNAP)
        return {lw.SUMMARY: snap.groupBy().agg(F.count("*").alias("n")).select(
            F.lit(ctx.barrier).cast("long").alias("b"), "n", F.lit(0).cast("long").alias("lo"),
            F.lit(0).cast("long").alias("hi"))}

    app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
    with pytest.raises(RuntimeError, match="boom at barrier 2"):
        run_batch(AppRun(spark, app, MetastoreCatalog(url),
                         {lw.SNAP: locations[lw.SNAP], lw.SUMMARY: locations[lw.SUMMARY]}))
    statuses = store.job_runs.job_barrier_statuses("sum_job", [1, 2])
    assert statuses == {1: "succeeded", 2: "failed"}
    assert store.leases.leased_ranges(lw.SNAP) == []
    assert DeltaTable(locations[lw.SUMMARY]).to_pyarrow_dataset().count_rows() == 1
    store.dispose()
