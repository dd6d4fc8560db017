"""What a micro-batch group's Spark job costs per barrier: the bound of the sustained rate.

A root table gets ``--barriers`` one-file commits of 100 rows. For each group size ``n`` in
``--sizes``, each barrier's output is its epoch's changes (``read_changes``, inserts, as a
streaming ``append`` stage's ``process`` returns them), and the group arm stages them with
:func:`airflow_provider_tsb.spark.outputs.stage_outputs` (one Spark job for the group: the union
of the barriers' plans, written partitioned by barrier) into an ``append`` sink, as a streaming
job's group does before its commits. The micro-batch arm stages them as an app with
``process_micro_batch`` does (:mod:`airflow_provider_tsb.spark.micro_batch`): the changes of
all ``n`` epochs as one scan, each row tagged with its barrier, one Spark job. The baseline
stages the same ``n`` barriers one Spark job each
(:func:`~airflow_provider_tsb.spark.outputs.stage_output`: a group of one). The arms
alternate, ``--rounds`` times, on one warm Spark Connect server; the medians are printed::

    n=<n> group_s=<s> group_per_barrier_ms=<ms> micro_batch_s=<s> micro_batch_per_barrier_ms=<ms>
        single_s=<s> speedup=<single/group> micro_batch_speedup=<single/micro-batch>
    sizes=<...> per_barrier_growth=<...> micro_batch_per_barrier_growth=<...> load=<1-min>

    .venv/bin/python -m benchmarks.group_write_cost [--sizes 4,16,44] [--rounds 3]
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import functions as F

from airflow_provider_tsb.delta.sink_log import SinkLog
from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions
from airflow_provider_tsb.spark.frames import BARRIER_COLUMN
from airflow_provider_tsb.spark.inputs import read_changes
from airflow_provider_tsb.spark.outputs import stage_output, stage_outputs, tag_outputs
from airflow_provider_tsb.spark.session import get_spark
from airflow_provider_tsb.spark.write_options import WriteOptions, WriteTarget
from benchmarks.flights_bench import free_port
from benchmarks.harness import median, parser, report

JOB = "bench_stage"


def outputs(spark: object, source: str, barriers: list[int]) -> dict[int, object]:
    """``{barrier: its epoch's inserted rows}`` (barrier ``b`` is the source's version ``b``)."""
    return {b: read_changes(spark, source, b - 1, b).where(F.col("_change_type") == "insert").select("id", "v")
            for b in barriers}


def group_arm(spark: object, source: str, sink: str, barriers: list[int]) -> float:
    """Seconds to stage ``barriers`` with one Spark job (``stage_outputs``)."""
    tick = time.perf_counter()
    log = SinkLog.read(sink, JOB)
    frames = outputs(spark, source, barriers)
    target = WriteTarget("tsb.bench.sink", sink, JOB, barriers[0], {}, 0)
    rel = {b: f"tsb_staging/{JOB}/g/{b}/{uuid.uuid4().hex}" for b in barriers}
    staged = stage_outputs(spark, tag_outputs(frames), barriers, target, WriteOptions(mode="append"), log, rel,
                           f"tsb_staging/{JOB}/g/{uuid.uuid4().hex}")
    assert staged is not None and sum(f.num_records for b in barriers for f in staged[b].files) == 100 * len(barriers)
    return time.perf_counter() - tick


def micro_batch_arm(spark: object, source: str, sink: str, barriers: list[int]) -> float:
    """Seconds to stage ``barriers`` as a ``process_micro_batch`` app does: the changes of all
    their epochs as one scan tagged by barrier (``read_changes(barriers=...)``), one Spark job."""
    tick = time.perf_counter()
    log = SinkLog.read(sink, JOB)
    tagged = (read_changes(spark, source, barriers[0] - 1, barriers[-1], barriers=[(b, b) for b in barriers])
              .where(F.col("_change_type") == "insert").select("id", "v", BARRIER_COLUMN))
    target = WriteTarget("tsb.bench.sink", sink, JOB, barriers[0], {}, 0)
    rel = {b: f"tsb_staging/{JOB}/m/{b}/{uuid.uuid4().hex}" for b in barriers}
    staged = stage_outputs(spark, tagged, barriers, target, WriteOptions(mode="append"), log, rel,
                           f"tsb_staging/{JOB}/m/{uuid.uuid4().hex}")
    assert staged is not None and all(sum(f.num_records for f in staged[b].files) == 100 for b in barriers)
    return time.perf_counter() - tick


def single_arm(spark: object, source: str, sink: str, barriers: list[int]) -> float:
    """Seconds to stage the same barriers one Spark job each (``stage_output``)."""
    tick = time.perf_counter()
    rows = 0
    for b in barriers:
        log = SinkLog.read(sink, JOB)
        frame = outputs(spark, source, [b])[b]
        staged = stage_output(spark, frame, WriteTarget("tsb.bench.sink", sink, JOB, b, {}, 0),
                              WriteOptions(mode="append"), log, f"tsb_staging/{JOB}/s/{b}/{uuid.uuid4().hex}")
        rows += sum(f.num_records for f in staged.files)
    assert rows == 100 * len(barriers)
    return time.perf_counter() - tick


def main() -> int:
    options = parser(__doc__)
    options.add_argument("--sizes", default="4,16,44", help="group sizes, comma-separated")
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="tsb-group-write-"))
    source, sink = str(root / "source"), str(root / "sink")
    for i in range(max(sizes) + 1):
        write_deltalake(source, pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64()),
                                          "v": pa.array([float(i)] * 100)}), mode="append")
    write_deltalake(sink, pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.float64())}))
    server = ConnectServer(root / "spark", ConnectServerOptions(port=free_port()))
    status = server.start()
    spark = get_spark("group-write-cost", remote=status.url, conf={"spark.sql.shuffle.partitions": "2"})
    per_barrier: dict[int, float] = {}
    micro_per_barrier: dict[int, float] = {}
    try:
        group_arm(spark, source, sink, list(range(1, 3)))  # warm-up
        micro_batch_arm(spark, source, sink, list(range(1, 3)))
        single_arm(spark, source, sink, [1])
        for n in sizes:
            barriers = list(range(1, n + 1))
            group, micro, single = [], [], []
            for _ in range(args.rounds):
                group.append(group_arm(spark, source, sink, barriers))
                micro.append(micro_batch_arm(spark, source, sink, barriers))
                single.append(single_arm(spark, source, sink, barriers))
            g, m, s = median(group), median(micro), median(single)
            per_barrier[n] = g / n * 1000
            micro_per_barrier[n] = m / n * 1000
            print(f"n={n} group_s={g:.3f} group_per_barrier_ms={per_barrier[n]:.1f} micro_batch_s={m:.3f} "
                  f"micro_batch_per_barrier_ms={micro_per_barrier[n]:.1f} single_s={s:.3f} speedup={s / g:.2f} "
                  f"micro_batch_speedup={s / m:.2f}", flush=True)
    finally:
        spark.stop()
        server.stop()
    top, low = max(sizes), min(sizes)
    report("group_write_cost", sizes=args.sizes, per_barrier_growth=round(per_barrier[top] / per_barrier[low], 2),
           micro_batch_per_barrier_growth=round(micro_per_barrier[top] / micro_per_barrier[low], 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
