"""Latency of the endpoints behind the UI views at 200 tables and 10,000 barriers.

The lineage view calls ``GET /topology`` and ``GET /tables/.../barriers``; the delay view calls
``GET /delays``. This script builds a topology of 200 tables (100 root tables, 100 jobs each
writing one table) in the embedded SQLite metastore, with 10,000 barriers WRITTEN in every table
(2,000,000 table states), and measures p50/p99 of each endpoint through the FastAPI app
in-process. The baseline in the same run is the same topology with 100 barriers.

    .venv/bin/python -m benchmarks.ui_scale [--tables 200] [--barriers 10000] [--requests 200]

Last line: ``topology_p99_ms=<x> delays_p99_ms=<y> history_p99_ms=<z> growth=<worst p99 ratio big/small>
load=<1-min load>``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from airflow_provider_tsb.api.routes import create_metaservice_app
from airflow_provider_tsb.metastore.models import TableBarrierRow
from airflow_provider_tsb.metastore.store import MetaStore, now_ms
from airflow_provider_tsb.topology import Topology
from benchmarks.harness import median, parser, percentile, report


def build(folder: Path, tables: int, barriers: int) -> tuple[MetaStore, float]:
    start = time.perf_counter()
    store = MetaStore(f"sqlite:///{folder / 'tsb.db'}")
    store.migrate()
    topo = Topology("big", warehouse=str(folder / "wh"))
    jobs = tables // 2
    for i in range(jobs):
        topo.root_table(f"bench.raw.t{i:04d}")
        topo.job(f"job{i:04d}", "app.py", sources=[f"bench.raw.t{i:04d}"], sinks=[f"bench.mart.t{i:04d}"])
    store.registry.register_topology(topo)
    ids = {t.name: t.id for t in store.registry.tables("big")}
    roots = {n: 0 for n in ids if ".raw." in n}
    base = now_ms() - barriers * 60_000
    first = store.barriers.create("big", roots, ts_ms=base)
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO tsb_barrier (topology, barrier_id, ts_ms, ts_kind, created_at_ms, run_key) "
            "WITH RECURSIVE seq(b) AS (SELECT 2 UNION ALL SELECT b + 1 FROM seq WHERE b < ?) "
            "SELECT 'big', b, ? + b * 60000, 'system', ? + b * 60000, NULL FROM seq",
            (barriers, base, base),
        )
        rows = []
        for name, table_id in ids.items():
            root = ".raw." in name
            for b in range(1, barriers + 1):
                if root and b == first.barrier:
                    continue
                created = base + b * 60_000
                rows.append({
                    "table_id": table_id, "barrier_id": b, "state": "WRITTEN", "version": b,
                    "job_id": None if root else "job" + name[-4:],
                    "processed_at_ms": created, "written_at_ms": created + (0 if root else 1000 + (b % 7) * 100),
                    "manifest": None, "inputs": None,
                })
            if len(rows) > 200_000:
                conn.execute(TableBarrierRow.__table__.insert(), rows)
                rows = []
        if rows:
            conn.execute(TableBarrierRow.__table__.insert(), rows)
    return store, time.perf_counter() - start


def measure(store: MetaStore, requests: int) -> dict[str, tuple[float, float]]:
    client = TestClient(create_metaservice_app(store))
    paths = {
        "topology": "/topology?name=big",
        "delays": "/delays?topology=big&limit=50",
        "history": "/tables/bench/mart/t0042/barriers?limit=50",
    }
    out = {}
    for key, path in paths.items():
        assert client.get(path).status_code == 200, client.get(path).text
        samples = []
        for _ in range(requests):
            t0 = time.perf_counter()
            resp = client.get(path)
            samples.append((time.perf_counter() - t0) * 1000)
            assert resp.status_code == 200
        out[key] = (median(samples), percentile(samples, 99))
    return out


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--tables", type=int, default=200)
    options.add_argument("--barriers", type=int, default=10_000)
    options.add_argument("--baseline-barriers", type=int, default=100)
    options.add_argument("--requests", type=int, default=200)
    args = options.parse_args()
    results = {}
    for barriers in (args.baseline_barriers, args.barriers):
        with tempfile.TemporaryDirectory(prefix="tsb-ui-bench-") as folder:
            store, seconds = build(Path(folder), args.tables, barriers)
            print(f"built {args.tables} tables x {barriers} barriers in {seconds:.1f} s")
            results[barriers] = measure(store, args.requests)
            store.dispose()
        for key, (p50, p99) in results[barriers].items():
            print(f"  {barriers:>6} barriers  {key:<9} p50={p50:7.2f} ms  p99={p99:7.2f} ms")
    big, small = results[args.barriers], results[args.baseline_barriers]
    growth = max(big[k][1] / small[k][1] for k in big)
    report("ui_scale", topology_p99_ms=round(big["topology"][1], 2), delays_p99_ms=round(big["delays"][1], 2),
           history_p99_ms=round(big["history"][1], 2), growth=round(growth, 2))


if __name__ == "__main__":
    main()
