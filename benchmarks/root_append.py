"""Appends to a root table: ``append_rows`` against a load of the table per append.

``append_rows`` (root-table ingestion, :mod:`airflow_provider_tsb.delta.roots`) commits through
this process's loaded table, moved to the newest commit on disk first. The baseline does the
same appends of the same rows to a second table the way ``append_rows`` did before
(``write_deltalake`` on the location, which loads the table, then ``DeltaTable(...).version()``
for the new version, a second load). Both tables grow to ``--appends`` versions, one row
batch of ``--rows`` rows each; the arms alternate in turns of 10 appends. Last line::

    appends=<n> append_rows_ms=<mean> reload_each_ms=<mean> speedup=<baseline / append_rows> load=<before,after>

    .venv/bin/python benchmarks/root_append.py [--appends 300] [--rows 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from airflow_provider_tsb.delta.roots import append_rows  # noqa: E402


def reload_each(location: str, rows: pa.Table) -> int:
    """The baseline: one append that loads the table for the write and again for its version."""
    write_deltalake(location, rows, mode="append")
    return DeltaTable(location).version()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=300, help="appends to each table")
    parser.add_argument("--rows", type=int, default=100, help="rows per append")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="tsb-root-append-"))
    arms = {"append_rows": (append_rows, str(base / "tsb")), "reload_each": (reload_each, str(base / "baseline"))}
    spent = dict.fromkeys(arms, 0.0)
    versions: dict[str, int] = {}
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
    print(f"appends={args.appends} append_rows_ms={tsb:.1f} reload_each_ms={plain:.1f} speedup={plain / tsb:.2f} "
          f"load={load_before:.1f},{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
