"""The full-year catch-up of the flights topology on a Spark standalone cluster, 1 and 2 workers.

For each arm: a standalone cluster started from pyspark's jars (``dev/spark_cluster.py``:
a master and N workers of 1 core and 2 GB each, executors running the bare Python with only
pyarrow/pandas/numpy), a flights topology with one barrier per 2013 day plus a final one
(``full_year``'s preparation), and the batch catch-up: one ``spark-submit`` per job
as ``TsbSparkJobOperator`` builds it through the Spark connection (client deploy mode,
``--py-files`` with the provider, ``tsb_examples.spark_conf.cluster_spark_conf`` with
``spark.cores.max`` = N), job after job. All workers share this machine's CPUs, so the figure
shows the cluster's overhead (executor launch, shuffle over the network stack, task
scheduling across JVMs), not a speed-up. Prints per arm the wall time, the time per barrier
(wall / barriers) and the median per-barrier job time from the jobs' ``tsb-timing`` records;
checks the FLIP-276 invariants at REPEATABLE_READ at the last barrier. Last line:

    workers1_s=<catch-up seconds, 1 worker> workers2_s=<catch-up seconds, 2 workers> load=<1-min load>

    .venv/bin/python -m benchmarks.cluster_scaling [--days 365] [--workers 1,2] [--keep DIR]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.flights_bench import JOBS, FlightsBench, check_invariants, timing_records
from benchmarks.harness import median, parser, report

TIMEOUT_S = 3 * 3600


def run_arm(base: Path, workers: int, days: list[dt.date], bare_python: str) -> dict[str, float]:
    from dev.spark_cluster import start_cluster
    from tsb_examples.spark_conf import cluster_spark_conf

    cluster = start_cluster(base / "cluster", workers=workers, cores=1, memory="2g")
    try:
        bench = FlightsBench(base / "bench", spark_master=cluster.master_url)
        conf = {**cluster_spark_conf(bare_python), "spark.cores.max": str(workers), "spark.executor.memory": "1g"}
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
            {"conn_type": "spark", "host": cluster.master_url, "extra": {"deploy-mode": "client", "conf": conf}})
        t0 = time.monotonic()
        for day in days:
            bench.ingest_day(day)
            bench.generate()
        bench.end_input()
        bench.generate(final=True)
        print(f"workers={workers}: {len(days)} days ingested, {len(days) + 1} barriers generated in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        logs = bench.root / "logs"
        start = time.monotonic()
        for job_id in JOBS:
            bench.launch(job_id, "batch", logs).wait(TIMEOUT_S)
        seconds = time.monotonic() - start
        barriers = len(days) + 1
        ok = all(check_invariants(bench, barriers).values())
        records = timing_records(sorted(logs.glob("*.log")))
        per_job = {j: median([r["total_s"] for r in records if r["job"] == j]) for j in JOBS}
        print(f"workers={workers}: catch-up {seconds:.1f} s for {barriers} barriers "
              f"({seconds / barriers:.3f} s per barrier); median per-barrier time "
              + ", ".join(f"{j} {s:.3f} s" for j, s in per_job.items())
              + f"; invariants {'hold' if ok else 'FAIL'}", flush=True)
        if not ok:
            raise SystemExit(f"workers={workers}: FLIP-276 invariants do not hold at barrier {barriers}")
        return {"seconds": seconds, "per_barrier": seconds / barriers}
    finally:
        cluster.stop()


def main() -> int:
    options = parser(__doc__, keep=True)
    options.add_argument("--days", type=int, default=365, help="2013 days, one barrier each (1..365)")
    options.add_argument("--workers", default="1,2", help="comma-separated worker counts, one arm each")
    args = options.parse_args()
    if not 1 <= args.days <= 365:
        options.error("--days must be 1..365")
    from dev.spark_cluster import bare_python
    from tsb_examples.datasets import nycflights13 as nyc

    days = nyc.days(dt.date(2013, 1, 1), args.days)
    python = bare_python()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tsb-cluster-"))
    results = {}
    for workers in (int(w) for w in args.workers.split(",")):
        results[workers] = run_arm(base / f"workers{workers}", workers, days, python)
    report("cluster_scaling", **{f"workers{w}_s": round(r["seconds"], 1) for w, r in results.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
