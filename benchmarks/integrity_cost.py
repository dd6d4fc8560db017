"""Cost of verifying a served version's Delta log against its recorded live-file figures (issue 25 item 4).

One real Delta table of ``--files`` data files (default 100, one append each, ``--rows`` rows per
file), read at its newest version with the Arrow reader ``--reads`` times (default 20) three ways:

* ``plain``: the read as it was before issue 25 (``open_table`` + ``scan_to_arrow``, no check);
* ``first``: :func:`~airflow_provider_tsb.read.version_reads.read_table_arrow` with the recorded
  figures and an empty verification cache (every read is a process's first read of the version:
  the live-file count and size are summed from the loaded snapshot's add actions);
* ``cached``: the same read with the version verified already (the usual case: once per
  (table, version) per process).

Also the verification alone (``figures_of`` on the loaded table). Prints the medians and, last
line, ``plain_ms=<x> first_ms=<y> cached_ms=<z> verify_ms=<v> overhead_first_pct=<p> load=<1 min>``.

    .venv/bin/python -m benchmarks.integrity_cost [--files 100] [--rows 1000] [--reads 20]
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from airflow_provider_tsb.caches import CACHES
from airflow_provider_tsb.delta.integrity import figures_of
from airflow_provider_tsb.delta.log import open_table
from airflow_provider_tsb.read.version_reads import read_table_arrow, scan_to_arrow
from benchmarks.harness import load, median, parser, report


@dataclass(frozen=True)
class Served:
    """A resolved WRITTEN version with its recorded figures (the shape of ``TableVersion``)."""

    table: str
    location: str
    version: int
    barrier: int
    state: str
    staged: dict[str, Any] | None
    file_count: int
    size_bytes: int


def _median_ms(fn: Any, reads: int, before: Any = None) -> float:
    times = []
    for _ in range(reads):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return median(times)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--files", type=int, default=100)
    options.add_argument("--rows", type=int, default=1000)
    options.add_argument("--reads", type=int, default=20)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        loc = str(Path(tmp) / "t")
        for i in range(args.files):
            write_deltalake(loc, pa.table({"k": range(i * args.rows, (i + 1) * args.rows)}), mode="append")
        table = open_table(loc)
        figures = figures_of(table)
        served = Served("tsb.bench.t", loc, table.version(), 1, "WRITTEN", None, figures.files, figures.size_bytes)
        assert read_table_arrow(served).num_rows == args.files * args.rows
        plain = _median_ms(lambda: scan_to_arrow(open_table(loc, served.version)), args.reads)
        unverified = lambda: CACHES.clear("delta.integrity.verified")  # noqa: E731
        first = _median_ms(lambda: read_table_arrow(served), args.reads, before=unverified)
        cached = _median_ms(lambda: read_table_arrow(served), args.reads)
        verify = _median_ms(lambda: figures_of(table), args.reads)
    load_now = load()
    print(f"table: {figures}, {args.files * args.rows} rows; {args.reads} reads each; load {load_now}")
    print(f"plain read {plain:.1f} ms, first verified read {first:.1f} ms, cached {cached:.1f} ms, "
          f"verification alone {verify:.2f} ms")
    report("integrity_cost", plain_ms=round(plain, 1), first_ms=round(first, 1), cached_ms=round(cached, 1),
           verify_ms=round(verify, 2), overhead_first_pct=round(100 * (first - plain) / plain, 1), load=load_now)


if __name__ == "__main__":
    main()
