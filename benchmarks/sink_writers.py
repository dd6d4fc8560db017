"""A barrier's commit into a sink, two writers side by side on one Spark Connect server: tsb's
staged write with its delta-rs commit against Delta's own idempotent write.

Per barrier, the same output (``--rows`` rows of ``spark.range``, one file) goes into two fresh
Delta tables, the arms alternating barrier by barrier, the same work each:

* ``staged`` (today's): :func:`airflow_provider_tsb.spark.barrier_commit.write_barrier` with no
  catalog: the sink's log read, the executors' Parquet write into an attempt directory, the
  footers read on the driver, one delta-rs commit with the epoch-scoped txn and the barrier tag;
* ``delta``: the same call with ``writer="delta"``
  (:mod:`airflow_provider_tsb.spark.delta_writer`): ``df.write.format("delta")`` with
  ``txnAppId`` = the job, ``txnVersion`` = the barrier and the tag as ``userMetadata``, then the
  table's log read for the version holding it. Delta's writer collects the files' statistics.

Each arm's replay of its last barrier must add no version (exactly once). Last line
``barriers= rows= staged_ms= delta_ms= ratio= load=`` (medians per barrier, the first two of
each arm left out: they pay the classes' loading; ``ratio`` = delta ÷ staged)::

    .venv/bin/python -m benchmarks.sink_writers [--barriers 12] [--rows 1000] [--delta-conf KEY=VALUE ...]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions
from airflow_provider_tsb.spark.session import get_spark
from benchmarks.harness import median, parser, report
from dev.dataplane import write_sink
from dev.local_airflow import free_port


def staged(spark: object, location: str, barrier: int, rows: int) -> int:
    """tsb's write of one barrier; the version holding it."""
    df = spark.range(rows).selectExpr("id", f"{barrier} AS barrier", "current_timestamp() AS at")  # type: ignore[attr-defined]
    result = write_sink(spark, df.coalesce(1), table="tsb.bench.staged", location=location, job_id="bench",
                        barrier=barrier, inputs={"tsb.raw.in": barrier})
    return int(result.version)  # type: ignore[attr-defined]


def delta(spark: object, location: str, barrier: int, rows: int) -> int:
    """tsb's write of one barrier with Delta's own writer (``writer="delta"``); the version holding it."""
    df = spark.range(rows).selectExpr("id", f"{barrier} AS barrier", "current_timestamp() AS at")  # type: ignore[attr-defined]
    result = write_sink(spark, df.coalesce(1), table="tsb.bench.delta", location=location, job_id="bench",
                        barrier=barrier, inputs={"tsb.raw.in": barrier}, writer="delta")
    return int(result.version)  # type: ignore[attr-defined]


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--barriers", type=int, default=12)
    options.add_argument("--rows", type=int, default=1000)
    options.add_argument("--delta-conf", action="append", default=[], metavar="KEY=VALUE",
                         help="a Spark SQL setting for both arms (e.g. a Delta writer tuning); repeatable")
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = ConnectServer(Path(tmp) / "spark", ConnectServerOptions(port=free_port()))
        url = server.start().url
        arms = {"staged": staged, "delta": delta}
        figures: dict[str, list[float]] = {name: [] for name in arms}
        try:
            spark = get_spark("sink-writers", remote=url)
            for setting in args.delta_conf:
                key, _, value = setting.partition("=")
                spark.conf.set(key, value)
            for barrier in range(1, args.barriers + 1):
                for name, write in arms.items():
                    tick = time.perf_counter()
                    version = write(spark, f"{tmp}/{name}", barrier, args.rows)
                    figures[name].append((time.perf_counter() - tick) * 1000)
                    assert version == barrier - 1, (name, barrier, version)
                    print(f"barrier {barrier} {name}: {figures[name][-1]:.0f} ms (version {version})", flush=True)
            for name, write in arms.items():  # a replay of the last barrier commits nothing
                assert write(spark, f"{tmp}/{name}", args.barriers, args.rows) == args.barriers - 1, name
            count = spark.read.format("delta").load(f"{tmp}/staged").count()
            assert count == spark.read.format("delta").load(f"{tmp}/delta").count() == args.barriers * args.rows
            spark.stop()
        finally:
            server.stop()
    med = {name: median(values[2:]) for name, values in figures.items()}
    report("sink_writers", barriers=args.barriers, rows=args.rows, staged_ms=round(med["staged"]),
           delta_ms=round(med["delta"]), ratio=round(med["delta"] / med["staged"], 2))


if __name__ == "__main__":
    main()
