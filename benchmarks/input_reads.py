"""Cost of tsb's two readers' reads of a table AS OF a new version, and of an epoch's changes,
against the same reads by plain Spark (:mod:`airflow_provider_tsb.spark.inputs`).

Appends ``--versions`` commits of 100 rows to a fresh local Delta table with the change data
feed on (delta-rs), then, on a Spark Connect server of its own (``tsb spark start``'s, Delta's
jars), reads each version with a ``count()`` and each one-commit epoch's changes with a
``count()``, three ways, the same rows, interleaved version by version (the order turns
each version, since the first way to read a version builds Delta's snapshot of it):

* ``plain`` (the baseline): Spark's Delta reader as a user calls it, ``versionAsOf`` and
  ``readChangeFeed``;
* ``delta``: :mod:`~airflow_provider_tsb.spark.inputs_delta`, tsb's reads through the same
  reader (plus the commit's integrity check and the epoch's commits read from the log), as
  every table with a reader feature is read;
* ``files``: :mod:`~airflow_provider_tsb.spark.inputs_files`, the file list of a plain table
  (delta-rs lists the files, Spark reads them as Parquet), as tsb's sinks are read.

All must count the same rows. Last line ``versions= delta_changes_ms= delta_snapshot_ms=
files_changes_ms= files_snapshot_ms= plain_changes_ms= plain_snapshot_ms= load=`` (medians;
the first two versions are left out: they pay the classes' loading)::

    .venv/bin/python -m benchmarks.input_reads [--versions 12] [--conf KEY=VALUE ...]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from airflow_provider_tsb.spark import inputs_delta, inputs_files
from airflow_provider_tsb.spark.connect_server import ConnectServer, ConnectServerOptions
from airflow_provider_tsb.spark.session import get_spark
from benchmarks.harness import median, parser, report
from dev.local_airflow import free_port


def timed(fn: object) -> tuple[float, int]:
    start = time.perf_counter()
    n = fn()  # type: ignore[operator]
    return (time.perf_counter() - start) * 1000, n


def arms(spark: object, table: str) -> dict[str, tuple[object, object]]:
    """``{arm: (snapshot count at v, changes count of (v-1, v])}``."""
    def plain_snapshot(v: int) -> int:
        return spark.read.format("delta").option("versionAsOf", v).load(table).count()  # type: ignore[attr-defined]

    def plain_changes(v: int) -> int:
        return (spark.read.format("delta").option("readChangeFeed", "true")  # type: ignore[attr-defined]
                .option("startingVersion", v).option("endingVersion", v).load(table).count())

    return {
        "plain": (plain_snapshot, plain_changes),
        "delta": (lambda v: inputs_delta.read_snapshot(spark, table, v).count(),  # type: ignore[arg-type]
                  lambda v: inputs_delta.read_changes(spark, table, v - 1, v).count()),  # type: ignore[arg-type]
        "files": (lambda v: inputs_files.read_snapshot(spark, table, v).count(),  # type: ignore[arg-type]
                  lambda v: inputs_files.read_changes(spark, table, v - 1, v).count()),  # type: ignore[arg-type]
    }


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--versions", type=int, default=12)
    options.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                         help="a Spark session setting for all three ways (repeatable)")
    args = options.parse_args()
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        table = str(Path(tmp) / "t")
        for i in range(args.versions):
            write_deltalake(table, pa.table({"id": list(range(i * 100, i * 100 + 100))}), mode="append",
                            configuration={"delta.enableChangeDataFeed": "true"})
        server = ConnectServer(Path(tmp) / "spark", ConnectServerOptions(port=free_port()))
        url = server.start().url
        try:
            spark = get_spark("input-reads", remote=url)
            for setting in args.conf:
                key, _, value = setting.partition("=")
                spark.conf.set(key, value)
            ways = arms(spark, table)
            for v in range(args.versions):
                names = sorted(ways)
                order = names[v % len(names):] + names[:v % len(names)]
                for name in order:
                    snapshot, changes = ways[name]
                    ms, n = timed(lambda: snapshot(v))  # noqa: B023
                    assert n == 100 * (v + 1), (name, v, n)
                    figures.setdefault(f"{name}_snapshot_ms", []).append(ms)
                    ms2, n = timed(lambda: changes(v))  # noqa: B023
                    assert n == 100, (name, v, n)
                    figures.setdefault(f"{name}_changes_ms", []).append(ms2)
                    print(f"{name} version {v}: snapshot {ms:.0f} ms, changes {ms2:.0f} ms", flush=True)
            spark.stop()
        finally:
            server.stop()
    report("input_reads", versions=args.versions, **{k: round(median(v[2:])) for k, v in sorted(figures.items())})


if __name__ == "__main__":
    main()
