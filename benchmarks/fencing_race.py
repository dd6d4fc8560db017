"""Zombie fencing under real races: two attempts of one job on one barrier, many times.

Each race starts ``wordcount_words`` twice for the same barrier as two real ``spark-submit``
processes (the operator's command line, metastore catalog), the second 0-1.5 s after the
first, like an Airflow zombie and its retry; then counts Delta commits of the barrier, what a
reader could see of the loser, and the processes that failed with the fencing error (see
``dev/fencing.py``). The last line is exactly::

    races=N commits_per_barrier_max=1 orphans_visible=0 fenced_errors=M other_failures=0 load=<1-min load>

    /work/bin/heavy .venv/bin/python -m benchmarks.fencing_race --races 20 [--postgres]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import parser, report


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--races", type=int, default=20)
    p.add_argument("--postgres", action="store_true", help="metastore on a throwaway PostgreSQL (dev/pg.py)")
    p.add_argument("--workdir", help="folder for the tables and logs (default: a temporary folder)")
    args = p.parse_args(argv)
    from dev.fencing import run_races

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(args.workdir or tempfile.mkdtemp(prefix="tsb-fencing-"))
    root.mkdir(parents=True, exist_ok=True)
    server = None
    if args.postgres:
        from dev.pg import start_postgres

        server = start_postgres()
        url = server.create_database("tsb_fencing")
    else:
        url = f"sqlite:///{root / 'tsb.db'}"
    start = time.monotonic()
    try:
        counts = run_races(root, url, args.races)
    finally:
        if server is not None:
            server.stop()
    for example in counts.examples[:6]:
        print(example)
    print(f"metastore={'postgresql' if args.postgres else 'sqlite'} seconds={time.monotonic() - start:.0f} "
          f"workdir={root}")
    report("fencing_race", races=counts.races, commits_per_barrier_max=counts.commits_per_barrier_max,
           orphans_visible=counts.orphans_visible, fenced_errors=counts.fenced_errors,
           other_failures=counts.other_failures)
    ok = counts.commits_per_barrier_max == 1 and counts.orphans_visible == 0 and counts.other_failures == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
