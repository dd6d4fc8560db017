"""Start-up time of the ``tsb`` command line (issue 11, "Speed of the tools").

Measures, as the median wall time over ``--runs`` runs (default 5), each a fresh process:

* ``tsb --help``;
* ``tsb versions tsb.mart.counts --metastore-url sqlite:///...`` on a small metastore set up
  here (a registered topology ``bench``: root table ``tsb.raw.words`` -> job ``count`` ->
  ``tsb.mart.counts``, with barrier 1 WRITTEN in both tables, so the command answers);
* ``python -c pass``, the interpreter's own start-up, as the baseline of the same run.

Goals on a 2-core machine: ``tsb --help`` under 1 s, ``tsb versions`` under 2 s. Prints one
line per command, then last line ``help_median_s=<x> versions_median_s=<y> python_median_s=<z>
load=<1-min load>``.

    .venv/bin/python -m benchmarks.cli_startup [--runs 5]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.topology import Topology
from benchmarks.harness import REPO, median, parser, report

ROOT = "tsb.raw.words"
SINK = "tsb.mart.counts"


def make_metastore(folder: Path) -> str:
    """A migrated SQLite metastore with topology ``bench`` registered and barrier 1 WRITTEN.

    Returns its SQLAlchemy URL.
    """
    url = f"sqlite:///{folder / 'tsb.db'}"
    store = MetaStore(url)
    store.migrate()
    topology = Topology("bench", warehouse=str(folder / "warehouse"))
    topology.root_table(ROOT)
    topology.job("count", "count.py", sources=[ROOT], sinks=[SINK])
    store.registry.register_topology(topology)
    store.barriers.create("bench", {ROOT: 0}, run_key="bench-1")  # barrier 1: root at version 0
    store.table_states.record_written(SINK, 1, 1, "count")
    store.dispose()
    return url


def median_wall_s(argv: list[str], runs: int, env: dict[str, str]) -> float:
    """Median wall time, seconds, of ``runs`` runs of ``argv`` (each must exit 0).

    Raises:
        RuntimeError: a run failed (its stderr is in the message).
    """
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return median(times)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the medians (see module docstring). Returns the exit code."""
    options = parser(__doc__)
    options.add_argument("--runs", type=int, default=5, help="runs per command (median reported)")
    args = options.parse_args(argv)
    tsb = [sys.executable, "-m", "airflow_provider_tsb"]
    with tempfile.TemporaryDirectory(prefix="tsb-cli-bench-") as tmp:
        url = make_metastore(Path(tmp))
        # no Airflow configuration leaks in: the metastore is named on the command line
        env = {k: v for k, v in os.environ.items() if k != "TSB_METASTORE_URL"}
        env["AIRFLOW_HOME"] = str(Path(tmp) / "airflow")
        python = median_wall_s([sys.executable, "-c", "pass"], args.runs, env)
        print(f"python -c pass: {python:.3f} s")
        help_s = median_wall_s([*tsb, "--help"], args.runs, env)
        print(f"tsb --help: {help_s:.3f} s")
        versions = median_wall_s([*tsb, "versions", SINK, "--metastore-url", url], args.runs, env)
        print(f"tsb versions {SINK} --metastore-url {url}: {versions:.3f} s")
    report("cli_startup", help_median_s=round(help_s, 3), versions_median_s=round(versions, 3),
           python_median_s=round(python, 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
