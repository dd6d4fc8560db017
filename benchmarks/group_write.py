"""What one Spark job for several barriers saves: the write of a micro-batch of ready barriers.

On a local Spark Connect server (a fresh one, or ``--remote``), ``--barriers`` barriers of
``--rows`` rows each, each barrier's input one small Parquet file (as a root table's append
commits one), are written three ways, ``--rounds`` times:

* ``single``: one Spark job per barrier (the baseline: the same rows and files, a job each);
* ``group``: one Spark job for all of them, a union of one branch per barrier partitioned by
  the barrier, as ``outputs.stage_outputs`` writes a micro-batch's ``append`` sink;
* ``group_local``: the same with each barrier's rows shipped from the client as a local
  relation instead of a Parquet scan (is the scan the cost?).

Each barrier's output is the input with one column computed, so the work is Spark's fixed cost
per job, per union branch, per task and per file. Last line (medians over the rounds after the
first): ``barriers= rows= single_ms= group_ms= group_local_ms= single_per_barrier_ms=
group_per_barrier_ms= load=``.

    .venv/bin/python -m benchmarks.group_write [--barriers 12] [--rows 100] [--rounds 4] [--remote sc://...]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from functools import reduce
from pathlib import Path

from benchmarks.flights_bench import engine_server
from benchmarks.harness import median, parser, report

COLUMN = "_tsb_barrier"


def main() -> int:
    options = parser(__doc__, remote=True)
    options.add_argument("--barriers", type=int, default=12, help="barriers in the micro-batch")
    options.add_argument("--rows", type=int, default=100, help="rows per barrier")
    options.add_argument("--rounds", type=int, default=4, help="rounds (the first is a warm-up, not counted)")
    args = options.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    base = Path(tempfile.mkdtemp(prefix="tsb-group-write-"))
    times: dict[str, list[float]] = {"single": [], "group": [], "group_local": []}
    try:
        with engine_server("connect", args.remote, base / "connect") as remote:
            spark = SparkSession.builder.remote(str(remote)).getOrCreate()
            files = {}
            for b in range(args.barriers):
                spark.range(b * args.rows, (b + 1) * args.rows).select("id", F.rand().alias("v")).coalesce(1) \
                    .write.parquet(str(base / "in" / str(b)))
                files[b] = [str(p) for p in (base / "in" / str(b)).glob("*.parquet")]
            schema = spark.read.parquet(*files[0]).schema

            def scanned(b: int):
                return spark.read.schema(schema).parquet(*files[b]).select("id", (F.col("v") + 1).alias("v"))

            def local(b: int):
                rows = spark.createDataFrame(pq.read_table(files[b][0]), schema=schema)
                return rows.select("id", (F.col("v") + 1).alias("v"))

            def group(frame_of) -> None:  # noqa: ANN001 - a function of the barrier
                union = reduce(lambda a, c: a.unionByName(c),
                               (frame_of(b).withColumn(COLUMN, F.lit(b)) for b in range(args.barriers)))
                union.schema  # noqa: B018 - the schema request stage_outputs makes
                union.write.mode("error").partitionBy(COLUMN).parquet(str(base / "out" / f"{frame_of.__name__}{r}"))

            for r in range(args.rounds):
                began = time.perf_counter()
                for b in range(args.barriers):
                    scanned(b).write.mode("error").parquet(str(base / "out" / f"single{r}" / str(b)))
                times["single"].append(time.perf_counter() - began)
                began = time.perf_counter()
                group(scanned)
                times["group"].append(time.perf_counter() - began)
                began = time.perf_counter()
                group(local)
                times["group_local"].append(time.perf_counter() - began)
                print(f"round {r + 1}: " + " ".join(f"{k}_ms={1000 * v[-1]:.0f}" for k, v in times.items()), flush=True)
            spark.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ms = {k: 1000 * median(v[1:] or v) for k, v in times.items()}
    n = args.barriers
    report("group_write", barriers=n, rows=args.rows, single_ms=round(ms["single"]), group_ms=round(ms["group"]),
           group_local_ms=round(ms["group_local"]), single_per_barrier_ms=round(ms["single"] / n),
           group_per_barrier_ms=round(ms["group"] / n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
