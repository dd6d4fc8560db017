"""Cost of reading a table AS OF a new version, and an epoch's changes: Spark's Delta reader
against the file list of a plain table (:mod:`airflow_provider_tsb.spark.inputs`).

Appends ``--versions`` commits of 100 rows to a fresh local Delta table (delta-rs), then, on a
Spark Connect server of its own (``tsb spark start``'s, Delta's jars), reads each version with
a ``count()`` and each one-commit epoch's changes with a ``count()``, two ways, the same work:

* ``files`` (the baseline): :mod:`~airflow_provider_tsb.spark.inputs_files` (delta-rs lists the
  files, Spark reads them as Parquet);
* ``delta``: :mod:`~airflow_provider_tsb.spark.inputs_delta` (``versionAsOf`` and the change
  rules through Spark's Delta reader).

Both must count the same rows. Last line ``versions= files_snapshot_ms= delta_snapshot_ms=
files_changes_ms= delta_changes_ms= load=`` (medians; the first version of each way is left
out: it pays the classes' loading)::

    .venv/bin/python benchmarks/input_reads.py [--versions 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_provider_tsb.spark import inputs_delta, inputs_files  # noqa: E402
from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions  # noqa: E402
from airflow_provider_tsb.spark.session import get_spark  # noqa: E402
from tsb_dev.local_airflow import free_port  # noqa: E402


def timed(fn: object) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = str(Path(tmp) / "t")
        for i in range(args.versions):
            write_deltalake(table, pa.table({"id": list(range(i * 100, i * 100 + 100))}), mode="append")
        server = ConnectServer(Path(tmp) / "spark", ConnectServerOptions(port=free_port()))
        url = server.start().url
        try:
            spark = get_spark("input-reads", remote=url)
            figures: dict[str, list[float]] = {}
            for name, reader in (("files", inputs_files), ("delta", inputs_delta)):
                snaps, changes = [], []
                for v in range(args.versions):
                    ms, n = timed(lambda: reader.read_snapshot(spark, table, v).count())  # noqa: B023
                    assert n == 100 * (v + 1), (name, v, n)
                    snaps.append(ms)
                    ms, n = timed(lambda: reader.read_changes(spark, table, v - 1, v).count())  # noqa: B023
                    assert n == 100, (name, v, n)
                    changes.append(ms)
                    print(f"{name} version {v}: snapshot {snaps[-1]:.0f} ms, changes {changes[-1]:.0f} ms", flush=True)
                figures[f"{name}_snapshot_ms"] = snaps[1:]
                figures[f"{name}_changes_ms"] = changes[1:]
            spark.stop()
        finally:
            server.stop()
    medians = " ".join(f"{k}={statistics.median(v):.0f}" for k, v in sorted(figures.items()))
    print(f"versions={args.versions} {medians} load={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
