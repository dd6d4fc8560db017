"""Cost of one barrier-log append by the log's length: delta-rs's commit against tsb's direct one.

Appends ``--rows`` one-row barrier-log entries (schema :data:`~airflow_provider_tsb.delta.barrier_log.SCHEMA`,
each commit with the log's ``txn``) to a fresh local Delta table, no compaction in between, two ways:

* ``delta_rs`` (the baseline): ``write_deltalake`` on a kept ``DeltaTable``, as barrier generation
  appended before 2026-11-29;
* ``direct``: :func:`~airflow_provider_tsb.delta.direct_append.append_file` (a Parquet file and a
  commit file written by tsb, put-if-absent by hard link).

Then reads each table back with delta-rs and checks every row and the newest ``txn``. Prints the
median wall time (ms) of the first and last 20 appends of each way; last line
``rows= delta_rs_first_ms= delta_rs_last_ms= direct_first_ms= direct_last_ms= load=``::

    .venv/bin/python -m benchmarks.log_append_cost [--rows 200]
"""

from __future__ import annotations

import tempfile
import time

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from airflow_provider_tsb.delta.barrier_log import SCHEMA
from airflow_provider_tsb.delta.direct_append import append_file
from benchmarks.harness import median, parser, report

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
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=200)
    args = p.parse_args(argv)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="tsb-log-append-") as folder:
        for way in ("delta_rs", "direct"):
            times = run(f"{folder}/{way}", way, args.rows)
            first, last = median(times[:EDGE]), median(times[-EDGE:])
            print(f"{way}: first {EDGE} median {first:.2f} ms, last {EDGE} median {last:.2f} ms")
            figures[f"{way}_first_ms"], figures[f"{way}_last_ms"] = first, last
    report("log_append_cost", rows=args.rows, **{k: round(v, 2) for k, v in figures.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
