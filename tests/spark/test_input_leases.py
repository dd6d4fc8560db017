"""A running job leases the input versions it reads (issue 12 item 2; apache/paimon#5819).

A real Spark job (``run_batch`` through the metastore catalog) reads an input that is
overwritten at every barrier; inside ``process`` of barrier 3 -- after the job has planned its
lazy read of a version that is no longer the newest, before the executors read the files --
snapshot expiry runs with ``keep_barriers=1`` and without the consumer rule. The job's input
lease keeps the files; the barrier commits the right rows. The lease is gone once the barrier
is committed.
"""

from __future__ import annotations

from deltalake import DeltaTable
from pyspark.sql import functions as F

from airflow_provider_tsb.maintenance.expiry import expire_snapshots
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.spark.metastore_catalog import MetastoreCatalog
from airflow_provider_tsb.spark.model import Sink, TsbApp
from airflow_provider_tsb.spark.runner import run_batch
from tsb_dev import lease_world as lw


def test_running_job_keeps_its_input_versions_under_expiry(spark, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    locations = lw.build(store, str(tmp_path / "wh"), consumer=True)
    for _ in range(4):
        lw.write_barrier(store, locations)
    seen: list[tuple[int, list[tuple[int, int]], int]] = []

    def process(ctx):  # noqa: ANN001, ANN202 - the app's process function
        snap = ctx.snapshot(lw.SNAP)  # lazy: files listed, not read yet
        leased = store.leases.leased_ranges(lw.SNAP)
        expired = []
        if ctx.barrier == 3:
            expired = expire_snapshots(store, lw.SNAP, 1, consumers=False)["expired_barriers"]
        seen.append((ctx.barrier, leased, expired))
        out = snap.groupBy().agg(F.count("*").alias("n"), F.min("b").alias("lo"), F.max("b").alias("hi"))
        return {lw.SUMMARY: out.select(F.lit(ctx.barrier).cast("long").alias("b"), "n", "lo", "hi")}

    app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
    done = run_batch(spark, app, MetastoreCatalog(url), {lw.SNAP: locations[lw.SNAP],
                                                        lw.SUMMARY: locations[lw.SUMMARY]}, until_barrier=3)
    assert done == [1, 2, 3]
    # each barrier held [previous version, its version] of snap while it ran; at barrier 3
    # expiry kept barrier 4 (the newest) and the leased range, and expired barrier 1 only
    assert seen == [(1, [(0, 0)], []), (2, [(0, 1)], []), (3, [(1, 2)], [1])]
    summary = DeltaTable(locations[lw.SUMMARY]).to_pyarrow_dataset().to_table(use_threads=False)
    rows = sorted(zip(*(summary.column(c).to_pylist() for c in ("b", "n", "lo", "hi")), strict=True))
    assert rows == [(b, lw.ROWS, b, b) for b in (1, 2, 3)]  # barrier 3 read its version whole
    assert store.leases.leased_ranges(lw.SNAP) == []  # released after each barrier
    store.dispose()
