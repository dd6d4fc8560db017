"""Scale benchmark of version resolution on a PostgreSQL metastore.

Loads ``--tables`` tables x ``--barriers`` barriers (default 1,000 x 10,000 = 10M
``tsb_table_barrier`` rows) and the same tables x ``--small-barriers`` (default 100), then
measures p50/p99 latency of REPEATABLE_READ resolution for random ``--q-size``-table queries:

* directly (``store.resolution.resolve``), and
* through the REST API (uvicorn on 127.0.0.1 serving the MetaService router, httpx client,
  ``POST /versions``).

Rows are generated inside PostgreSQL (``INSERT ... SELECT FROM generate_series``, the fastest bulk
path: no data crosses the wire) with the secondary indexes dropped during the load and rebuilt
afterwards, then ``ANALYZE``. Tables lag behind the newest barrier by 0-2 barriers, the barrier
after a table's newest WRITTEN one is PROCESSED, so resolution does real work.

PostgreSQL: ``$TSB_BENCH_PG_URL`` (a server URL whose database part is replaced) or a throwaway
cluster started with ``dev/pg.py``. The last line is exactly
``p99_ms=<REST p99 at the large size> growth=<REST p99 large / REST p99 small> direct_p99_ms=<in-process
p99 at the large size> load=<1-minute load average, lowest-highest over the run>``.

Usage: ``.venv/bin/python -m benchmarks.metastore_scale [--tables 1000] [--barriers 10000] [--queries 2000]``.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import threading
import time
import uuid

from benchmarks.flights_bench import free_port
from benchmarks.harness import LoadWatch, parser, percentile, report

TOPOLOGY = "bench"


def create_database(server: object, name: str) -> str:
    if isinstance(server, str):
        import sqlalchemy as sa

        engine = sa.create_engine(server, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine.dispose()
        return server.rsplit("/", 1)[0] + "/" + name
    return server.create_database(name)  # type: ignore[attr-defined]


def fill(url: str, tables: int, barriers: int, roots: int) -> tuple[object, list[str], float]:
    """Create and fill a metastore; returns (store, table names, load seconds)."""
    from airflow_provider_tsb.metastore.store import MetaStore

    store = MetaStore(url)
    store.migrate()
    started = time.perf_counter()
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        now = int(time.time() * 1000)
        cur.execute("INSERT INTO tsb_topology (name, created_at_ms, lock_version) VALUES (%s, %s, 0)", (TOPOLOGY, now))
        cur.execute(
            """INSERT INTO tsb_table (id, name, topology, kind, location, created_at_ms)
               SELECT t, 'bench.db.t' || t, %s, CASE WHEN t <= %s THEN 'root' ELSE 'intermediate' END,
                      '/warehouse/bench/db/t' || t, %s
               FROM generate_series(1, %s) AS t""",
            (TOPOLOGY, roots, now, tables),
        )
        cur.execute(
            """INSERT INTO tsb_barrier (topology, barrier_id, ts_ms, ts_kind, created_at_ms)
               SELECT %s, b, %s + b * 1000, 'system', %s + b * 1000 FROM generate_series(1, %s) AS b""",
            (TOPOLOGY, now, now, barriers),
        )
        cur.execute("DROP INDEX IF EXISTS ix_tsb_table_barrier_state")
        cur.execute("DROP INDEX IF EXISTS ix_tsb_table_barrier_version")
        cur.execute("ALTER TABLE tsb_table_barrier DROP CONSTRAINT pk_tsb_table_barrier")
        cur.execute("ALTER TABLE tsb_table_barrier DROP CONSTRAINT fk_tsb_table_barrier_table_id_tsb_table")
        # table t lags (t % 3) barriers behind for intermediate tables; the next barrier is PROCESSED
        cur.execute(
            """INSERT INTO tsb_table_barrier
                   (table_id, barrier_id, state, version, job_id, processed_at_ms, written_at_ms)
               SELECT t, b,
                      CASE WHEN t > %(roots)s AND b > %(n)s - (t %% 3) THEN 'PROCESSED' ELSE 'WRITTEN' END,
                      CASE WHEN t > %(roots)s AND b > %(n)s - (t %% 3) THEN NULL ELSE b END,
                      CASE WHEN t > %(roots)s THEN 'job' || t END,
                      %(now)s + b * 1000 + 10, %(now)s + b * 1000 + 20
               FROM generate_series(1, %(tables)s) AS t, generate_series(1, %(n)s) AS b
               WHERE t <= %(roots)s OR b <= %(n)s - (t %% 3) + 1""",
            {"roots": roots, "n": barriers, "now": now, "tables": tables},
        )
        cur.execute(
            "ALTER TABLE tsb_table_barrier ADD CONSTRAINT pk_tsb_table_barrier PRIMARY KEY (table_id, barrier_id)"
        )
        cur.execute("CREATE INDEX ix_tsb_table_barrier_state ON tsb_table_barrier (table_id, state, barrier_id)")
        cur.execute("CREATE INDEX ix_tsb_table_barrier_version ON tsb_table_barrier (table_id, version)")
        cur.execute(
            "ALTER TABLE tsb_table_barrier ADD CONSTRAINT fk_tsb_table_barrier_table_id_tsb_table "
            "FOREIGN KEY (table_id) REFERENCES tsb_table (id)"
        )
        cur.execute("SELECT setval(pg_get_serial_sequence('tsb_table', 'id'), %s)", (tables,))
        raw.commit()
        cur.close()
        raw.driver_connection.autocommit = True
        cur = raw.driver_connection.cursor()
        cur.execute("VACUUM ANALYZE tsb_table_barrier")
        cur.execute("ANALYZE")
        cur.execute("SELECT count(*) FROM tsb_table_barrier")
        rows = cur.fetchone()[0]
        raw.driver_connection.autocommit = False
    finally:
        raw.close()
    seconds = time.perf_counter() - started
    print(f"  loaded {tables} tables x {barriers} barriers = {rows:,} table-barrier rows in {seconds:.1f} s",
          flush=True)
    return store, [f"bench.db.t{t}" for t in range(1, tables + 1)], seconds


def serve(store: object) -> tuple[str, object, threading.Thread]:
    import uvicorn

    from airflow_provider_tsb.api.routes import create_metaservice_app

    app = create_metaservice_app(store, prefix="/tsb/api/v1")  # type: ignore[arg-type]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/tsb/api/v1", server, thread


def measure(store: object, names: list[str], queries: int, q_size: int, seed: int) -> dict[str, list[float]]:
    import httpx

    from airflow_provider_tsb.consistency import ConsistencyLevel

    rng = random.Random(seed)
    sets = [rng.sample(names, q_size) for _ in range(queries)]
    direct: list[float] = []
    for i, q in enumerate(sets):
        t0 = time.perf_counter()
        res = store.resolution.resolve(q, ConsistencyLevel.REPEATABLE_READ)  # type: ignore[attr-defined]
        elapsed = (time.perf_counter() - t0) * 1000
        if i >= 50:  # warm-up
            direct.append(elapsed)
        assert res.barrier is not None
    base, server, thread = serve(store)
    rest: list[float] = []
    try:
        with httpx.Client(timeout=30) as client:
            for i, q in enumerate(sets):
                t0 = time.perf_counter()
                r = client.post(f"{base}/versions", json={"tables": q, "level": "REPEATABLE_READ"})
                elapsed = (time.perf_counter() - t0) * 1000
                r.raise_for_status()
                if i >= 50:
                    rest.append(elapsed)
    finally:
        server.should_exit = True  # type: ignore[attr-defined]
        thread.join(timeout=10)
    return {"direct": direct, "rest": rest}


def summarize(label: str, samples: dict[str, list[float]]) -> dict[str, float]:
    out = {}
    for kind, values in samples.items():
        p50, p99 = percentile(values, 50), percentile(values, 99)
        out[kind] = p99
        print(f"  {label:>16} {kind:>6}: p50={p50:.2f} ms p99={p99:.2f} ms mean={statistics.mean(values):.2f} ms "
              f"(n={len(values)})", flush=True)
    return out


def main() -> int:
    options = parser(__doc__)
    options.add_argument("--tables", type=int, default=1000)
    options.add_argument("--barriers", type=int, default=10_000)
    options.add_argument("--small-barriers", type=int, default=100)
    options.add_argument("--roots", type=int, default=50, help="root tables among --tables")
    options.add_argument("--queries", type=int, default=2000, help="resolutions measured per size and path")
    options.add_argument("--q-size", type=int, default=10, help="tables per query")
    options.add_argument("--seed", type=int, default=276)
    args = options.parse_args()

    server: object
    started_here = None
    if os.environ.get("TSB_BENCH_PG_URL"):
        server = os.environ["TSB_BENCH_PG_URL"]
    else:
        from dev.pg import start_postgres

        started_here = server = start_postgres()
    try:
        results = {}
        with LoadWatch() as loads:
            for barriers in (args.barriers, args.small_barriers):
                print(f"== {args.tables} tables x {barriers} barriers", flush=True)
                url = create_database(server, f"tsb_bench_{uuid.uuid4().hex[:8]}")
                store, names, _ = fill(url, args.tables, barriers, min(args.roots, args.tables))
                results[barriers] = summarize(f"{barriers} barriers", measure(store, names, args.queries,
                                                                              args.q_size, args.seed))
                store.dispose()  # type: ignore[attr-defined]
        big, small = results[args.barriers], results[args.small_barriers]
        growth = big["rest"] / small["rest"]
        print(f"direct p99: {big['direct']:.2f} ms at {args.barriers} barriers, {small['direct']:.2f} ms at "
              f"{args.small_barriers} (growth {big['direct'] / small['direct']:.2f})")
        report("metastore_scale", p99_ms=round(big["rest"], 2), growth=round(growth, 2),
               direct_p99_ms=round(big["direct"], 2), load=loads.range)
    finally:
        if started_here is not None:
            started_here.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
