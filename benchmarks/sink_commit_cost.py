"""A sink's delta-rs commit as its live files grow: why ``append`` sinks compact by default.

Two Delta tables get the same ``--commits`` one-file commits, each one
``create_write_transaction`` with an app ``txn``, as a barrier's commit makes them
(:func:`airflow_provider_tsb.delta.commit.commit_barrier_files`). The *growing* table keeps every
file live (an ``append`` sink without compaction: a file per barrier). The baseline, the
*compacted* table, does the same commits and, every ``--compact-every`` commits, a delta-rs
``optimize.compact`` outside the timing (an ``append`` sink's default auto compaction, at 50
small files: ``APPEND_MIN_FILES``). The arms alternate commit by commit. Per window of
``--window`` commits, the median commit of each arm; the last line compares the last window::

    commits=<n> growing_last_median_ms=<a> compacted_last_median_ms=<b> ratio=<a/b> growing_files=<f> load=<1-min>

    .venv/bin/python benchmarks/sink_commit_cost.py [--commits 3000] [--window 500] [--compact-every 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction

ROWS = pa.table({"id": pa.array(range(10), pa.int64()), "v": pa.array([1.0] * 10)})


def commit_one(table: DeltaTable, location: str, n: int) -> float:
    """Write one small Parquet file under ``location`` and commit it as barrier ``n``; ms of the commit."""
    name = f"part-{n:06d}.parquet"
    pq.write_table(ROWS, f"{location}/{name}")
    add = AddAction(name, os.path.getsize(f"{location}/{name}"), {}, int(time.time() * 1000), True, None)
    props = CommitProperties(app_transactions=[Transaction("bench-job", n, int(time.time() * 1000))])
    tick = time.perf_counter()
    table.create_write_transaction([add], "append", table.schema(), commit_properties=props)
    table.update_incremental()
    return (time.perf_counter() - tick) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--window", type=int, default=500, help="commits per reported window")
    parser.add_argument("--compact-every", type=int, default=50, help="the baseline's compaction interval")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tsb-sink-commit-"))
    arms = {"growing": str(root / "growing"), "compacted": str(root / "compacted")}
    tables = {}
    for name, location in arms.items():
        write_deltalake(location, ROWS)
        tables[name] = DeltaTable(location)
    times: dict[str, list[float]] = {name: [] for name in arms}
    for n in range(1, args.commits + 1):
        for name, location in arms.items():
            times[name].append(commit_one(tables[name], location, n))
        if n % args.compact_every == 0:
            tables["compacted"].optimize.compact()
            tables["compacted"].update_incremental()
        if n % args.window == 0:
            window = {name: statistics.median(t[-args.window:]) for name, t in times.items()}
            print(f"{n} commits: median growing {window['growing']:.1f} ms, compacted {window['compacted']:.1f} ms",
                  flush=True)
    last = {name: statistics.median(t[-args.window:]) for name, t in times.items()}
    files = len(tables["growing"].file_uris())
    print(f"commits={args.commits} growing_last_median_ms={last['growing']:.1f} "
          f"compacted_last_median_ms={last['compacted']:.1f} ratio={last['growing'] / last['compacted']:.2f} "
          f"growing_files={files} load={os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
