"""Appends to a root table: ``append_rows`` against a load of the table per append.

``append_rows`` (root-table ingestion, :mod:`airflow_provider_tsb.delta.roots`) commits through
this process's loaded table, moved to the newest commit on disk first. The baseline does the
same appends of the same rows to a second table the way ``append_rows`` did before
(``write_deltalake`` on the location, which loads the table, then ``DeltaTable(...).version()``
for the new version, a second load). Both tables grow to ``--appends`` versions, one row
batch of ``--rows`` rows each; the arms alternate in turns of 10 appends. Last line::

    appends=<n> append_rows_ms=<mean> reload_each_ms=<mean> speedup=<baseline / append_rows> load=<lowest-highest>

    .venv/bin/python -m benchmarks.root_append [--appends 300] [--rows 100]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from airflow_provider_tsb.delta.roots import append_rows
from benchmarks.harness import LoadWatch, parser, report


def reload_each(location: str, rows: pa.Table) -> int:
    """The baseline: one append that loads the table for the write and again for its version."""
    write_deltalake(location, rows, mode="append")
    return DeltaTable(location).version()


def main() -> int:
    options = parser(__doc__)
    options.add_argument("--appends", type=int, default=300, help="appends to each table")
    options.add_argument("--rows", type=int, default=100, help="rows per append")
    args = options.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tsb-root-append-"))
    arms = {"append_rows": (append_rows, str(base / "tsb")), "reload_each": (reload_each, str(base / "baseline"))}
    spent = dict.fromkeys(arms, 0.0)
    versions: dict[str, int] = {}
    with LoadWatch() as loads:
        for start in range(0, args.appends, 10):
            for name, (append, location) in arms.items():
                for i in range(start, min(start + 10, args.appends)):
                    rows = pa.table({"id": pa.array(range(i * args.rows, (i + 1) * args.rows), pa.int64())})
                    began = time.perf_counter()
                    versions[name] = append(location, rows)
                    spent[name] += time.perf_counter() - began
    if versions["append_rows"] != args.appends - 1 or versions["reload_each"] != args.appends - 1:
        print(f"wrong versions after {args.appends} appends: {versions}")
        return 1
    tsb, plain = (spent[k] * 1000 / args.appends for k in ("append_rows", "reload_each"))
    report("root_append", appends=args.appends, append_rows_ms=round(tsb, 1), reload_each_ms=round(plain, 1),
           speedup=round(plain / tsb, 2), load=loads.range)
    return 0


if __name__ == "__main__":
    sys.exit(main())
