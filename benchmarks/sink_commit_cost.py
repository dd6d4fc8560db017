"""A sink's delta-rs commit as its live files and its log grow: why ``append`` sinks compact by
default, and why snapshot expiry cleans up the log.

Two Delta tables get the same ``--commits`` one-file commits, each one
``create_write_transaction`` with an app ``txn``, as a barrier's commit makes them
(:func:`airflow_provider_tsb.delta.commit.commit_barrier_files`). The *growing* table keeps every
file live (an ``append`` sink without compaction: a file per barrier). The baseline, the
*compacted* table, does the same commits and, every ``--compact-every`` commits, a delta-rs
``optimize.compact`` outside the timing (an ``append`` sink's default auto compaction, at 50
small files: ``APPEND_MIN_FILES``). The *cleaned* table does what the compacted one does and,
at each compaction, the metadata cleanup snapshot expiry runs keeping the newest ``--keep``
versions (:func:`airflow_provider_tsb.delta.log_cleanup.cleanup_metadata`, outside the timing;
the compacted table is its baseline). The arms alternate commit by commit. Per window of
``--window`` commits, the median commit of each arm; the last line compares the last window::

    commits=<n> growing_last_median_ms=<a> compacted_last_median_ms=<b> ratio=<a/b>
      cleaned_last_median_ms=<c> cleanup_ratio=<b/c> growing_files=<f> log_files=<compacted>/<cleaned> load=<1-min>

    .venv/bin/python -m benchmarks.sink_commit_cost [--commits 3000] [--window 500] [--compact-every 50] [--keep 100]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction

from airflow_provider_tsb.delta.log_cleanup import cleanup_metadata, list_log
from benchmarks.harness import median, parser, report

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
    options = parser(__doc__)
    options.add_argument("--commits", type=int, default=3000)
    options.add_argument("--window", type=int, default=500, help="commits per reported window")
    options.add_argument("--compact-every", type=int, default=50, help="the baseline's compaction interval")
    options.add_argument("--keep", type=int, default=100, help="versions the cleaned arm's log cleanup keeps")
    args = options.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tsb-sink-commit-"))
    arms = {name: str(root / name) for name in ("growing", "compacted", "cleaned")}
    tables = {}
    for name, location in arms.items():
        write_deltalake(location, ROWS)
        tables[name] = DeltaTable(location)
    times: dict[str, list[float]] = {name: [] for name in arms}
    for n in range(1, args.commits + 1):
        for name, location in arms.items():
            times[name].append(commit_one(tables[name], location, n))
        if n % args.compact_every == 0:
            for name in ("compacted", "cleaned"):
                tables[name].optimize.compact()
                tables[name].update_incremental()
            cleanup_metadata(arms["cleaned"], tables["cleaned"].version() - args.keep)
        if n % args.window == 0:
            window = {name: median(t[-args.window:]) for name, t in times.items()}
            print(f"{n} commits: median growing {window['growing']:.1f} ms, compacted {window['compacted']:.1f} ms, "
                  f"cleaned {window['cleaned']:.1f} ms", flush=True)
    last = {name: median(t[-args.window:]) for name, t in times.items()}
    files = len(tables["growing"].file_uris())
    logs = {name: len(list_log(arms[name]).commits) for name in ("compacted", "cleaned")}
    report("sink_commit_cost", commits=args.commits, growing_last_median_ms=round(last["growing"], 1),
           compacted_last_median_ms=round(last["compacted"], 1), ratio=round(last["growing"] / last["compacted"], 2),
           cleaned_last_median_ms=round(last["cleaned"], 1),
           cleanup_ratio=round(last["compacted"] / last["cleaned"], 2), growing_files=files,
           log_files=f"{logs['compacted']}/{logs['cleaned']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
