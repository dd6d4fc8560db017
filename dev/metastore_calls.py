"""The catalog calls a job makes per barrier on the metastore, and what each costs.

Runs a one-input job (``dev.lease_world``'s ``sum_job``: a snapshot of ``snap``, an append
sink) in batch mode through :class:`~airflow_provider_tsb.spark.metastore_catalog.MetastoreCatalog`
on SQLite over ``--barriers`` barriers, local Spark, and times every catalog call (the
``metastore`` phase of the jobs' ``tsb-timing`` lines). Prints one line per kind of call
(``per_barrier``, ``mean_ms``), then ``metastore_ms_per_barrier=``.

    .venv/bin/python -m dev.metastore_calls [--barriers 25]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--barriers", type=int, default=25)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from pyspark.sql import functions as F

    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.spark import metastore_catalog as mc
    from airflow_provider_tsb.spark.app_run import AppRun
    from airflow_provider_tsb.spark.model import Sink, TsbApp
    from airflow_provider_tsb.spark.runner import run_batch
    from airflow_provider_tsb.spark.session import get_spark
    from dev import lease_world as lw

    calls: dict[str, list[float]] = collections.defaultdict(list)
    original = mc.MetastoreCatalog._retry

    def timed(self: Any, what: str, fn: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return original(self, what, fn)
        finally:
            calls[" ".join(what.split()[:3])].append(time.perf_counter() - started)

    mc.MetastoreCatalog._retry = timed  # type: ignore[method-assign]
    spark = get_spark("tsb-metastore-calls", master="local[1]")

    def process(ctx: Any) -> dict[str, Any]:
        snap = ctx.snapshot(lw.SNAP)
        out = snap.groupBy().agg(F.count("*").alias("n"), F.min("b").alias("lo"), F.max("b").alias("hi"))
        return {lw.SUMMARY: out.select(F.lit(ctx.barrier).cast("long").alias("b"), "n", "lo", "hi")}

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'tsb.db'}"
        store = MetaStore(url)
        store.migrate()
        locations = lw.build(store, str(Path(tmp) / "wh"), consumer=True)
        for _ in range(args.barriers):
            lw.write_barrier(store, locations)
        app = TsbApp("sum_job", {lw.SNAP: locations[lw.SNAP]}, {lw.SUMMARY: Sink(mode="append")}, process)
        done = run_batch(AppRun(spark, app, mc.MetastoreCatalog(url), dict(locations)))
        store.dispose()
    total = 0.0
    for kind, seconds in sorted(calls.items(), key=lambda kv: -sum(kv[1])):
        total += sum(seconds)
        print(f"{kind:40s} per_barrier={len(seconds) / len(done):.2f} mean_ms={1000 * sum(seconds) / len(seconds):.2f}")
    print(f"barriers={len(done)} metastore_ms_per_barrier={1000 * total / len(done):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
