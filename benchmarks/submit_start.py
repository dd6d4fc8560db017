"""A job's ``spark-submit`` with and without the class-data archive of Spark's driver classes.

The word count's ``wordcount_words`` job (a merge sink over the root table's changes) runs for
one barrier at a time as the operator starts it (``spark-submit --master local[1]`` with the
examples' JIT setting, metastore catalog on SQLite), alternately with the archive in the driver's Java options
(:mod:`airflow_provider_tsb.spark.class_data`) and without: the same job, the same barrier
size, minus the archive. Each run's wall seconds and CPU seconds (the job's process tree) are
printed, then the last line::

    runs=N with_s=<median wall> without_s=<median wall> with_cpu_s=<median> without_cpu_s=<median>
    ratio=<with_s / without_s> load=<1-min load at start>

(one line).

    .venv/bin/python -m benchmarks.submit_start [--runs 5]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import load, median, parser, report


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process tree) of one job run; raises on failure."""
    cpu0, wall0 = children_cpu_s(), time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    wall, cpu = time.monotonic() - wall0, children_cpu_s() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, cpu


def main() -> int:
    options = parser(__doc__)
    options.add_argument("--runs", type=int, default=5, help="runs per arm (alternating)")
    args = options.parse_args()
    from airflow_provider_tsb.spark.class_data import ClassDataArchive
    from dev.job_processes import SPARK_SUBMIT, job_command, job_env, wordcount_deployment

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    archive = ClassDataArchive(spark_submit=SPARK_SUBMIT)
    seconds = archive.create()
    print(f"archive {archive.path} ({f'written in {seconds:.1f} s' if seconds else 'there already'})")
    root = Path(tempfile.mkdtemp(prefix="tsb-submit-start-"))
    dep = wordcount_deployment(root, f"sqlite:///{root / 'tsb.db'}", barriers=2 * args.runs)
    env = job_env(dep.url)
    load_at_start = load()
    arms: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
    for barrier in range(1, 2 * args.runs + 1):
        arm = "with" if barrier % 2 else "without"
        command = job_command(dep, "wordcount_words", barrier)
        if arm == "without":  # the same Java options minus the archive's
            i = command.index("--driver-java-options") + 1
            command[i] = command[i].replace(archive.java_options(), "").strip()
        wall, cpu = timed_run(command, env, root)
        arms[arm].append((wall, cpu))
        print(f"barrier {barrier:>2} {arm:>7}: {wall:5.1f} s wall, {cpu:5.1f} CPU-s", flush=True)
    med = {arm: (median(w for w, _ in runs), median(c for _, c in runs)) for arm, runs in arms.items()}
    report("submit_start", runs=args.runs, with_s=round(med["with"][0], 2), without_s=round(med["without"][0], 2),
           with_cpu_s=round(med["with"][1], 2), without_cpu_s=round(med["without"][1], 2),
           ratio=round(med["with"][0] / med["without"][0], 3), load=load_at_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
