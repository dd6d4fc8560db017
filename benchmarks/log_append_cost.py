"""Cost of one barrier-log append by the log's length: delta-rs's commit against tsb's direct one.

Appends ``--rows`` one-row barrier-log entries (schema :data:`~airflow_provider_tsb.delta.barrier_log.SCHEMA`,
each commit with the log's ``txn``) to a fresh local Delta table, no compaction in between, two ways:

* ``delta_rs`` (the baseline): ``write_deltalake`` on a kept ``DeltaTable``, as barrier generation
  appended before 2026-11-29;
* ``direct``: :func:`~airflow_provider_tsb.delta.direct_append.append_file` (a Parquet file and a
  commit file written by tsb, put-if-absent by hard link).

Then reads each table back with delta-rs and checks every row and the newest ``txn``. Prints the
median wall time (ms) of the first and last 20 appends of each way; last line
``rows= delta_rs_first_ms= delta_rs_last_ms= direct_first_ms= direct_last_ms=``::

    .venv/bin/python benchmarks/log_append_cost.py [--rows 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_provider_tsb.delta.barrier_log import SCHEMA  # noqa: E402
from airflow_provider_tsb.delta.direct_append import append_file  # noqa: E402

APP_ID = "tsb-barrier-log:bench"
EDGE = 20


def entry(barrier: int) -> pa.Table:
    return pa.Table.from_pylist([{
        "topology": "bench", "barrier": barrier, "ts_ms": barrier, "ts_kind": "system", "final": False,
        "created_at_ms": barrier, "run_key": f"r{barrier}", "root_versions": [("tsb.raw.words", barrier)],
    }], schema=SCHEMA)


def run(location: str, way: str, rows: int) -> list[float]:
    write_deltalake(location, entry(0), configuration={"delta.checkpointInterval": "1000000000"})
    table = DeltaTable(location)
    times = []
    for barrier in range(1, rows + 1):
        start = time.perf_counter()
        if way == "delta_rs":
            write_deltalake(table, entry(barrier), mode="append", commit_properties=CommitProperties(
                app_transactions=[Transaction(APP_ID, barrier)]))
        else:
            append_file(location, entry(barrier), app_id=APP_ID, txn_version=barrier)
        times.append((time.perf_counter() - start) * 1000)
    check = DeltaTable(location)
    found = sorted(check.to_pyarrow_table().column("barrier").to_pylist())
    if found != list(range(rows + 1)) or check.transaction_version(APP_ID) != rows:
        raise SystemExit(f"{way}: the log read back holds {len(found)} rows, txn {check.transaction_version(APP_ID)}")
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200)
    args = p.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="tsb-log-append-") as folder:
        for way in ("delta_rs", "direct"):
            times = run(f"{folder}/{way}", way, args.rows)
            first, last = statistics.median(times[:EDGE]), statistics.median(times[-EDGE:])
            print(f"{way}: first {EDGE} median {first:.2f} ms, last {EDGE} median {last:.2f} ms")
            figures[f"{way}_first_ms"], figures[f"{way}_last_ms"] = first, last
    print(f"rows={args.rows} " + " ".join(f"{k}={v:.2f}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
